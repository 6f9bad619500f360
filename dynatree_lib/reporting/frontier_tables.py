"""Notebook 15's tables (issue 77), from committed JSON only: the budget frontier in each method's own numbers (τ, δ
and nodes per verification at each budget), the cost model checked against the heads' and TALON's rows of a
machine, each method's best budget projected on every machine whose curves are committed, and each tree claim's two
verdicts (in the method's own numbers; in wall time on a named machine).

The rule, once: a count (τ at equal verified nodes, δ / τ) is the method's, the same on every machine whose engine
computes the same bits; a wall-time ratio is the machine's, and its verdict is stated per machine kind.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .. import methods as registry
from ..core.policies.eagle_tree import Eagle3TreeConfig
from ..core.policies.talon import TalonConfig
from ..harness.experiments.costs import head_curves, interp, predict_ms_per_token
from ..harness.setup.machine import kind_of_record
from ..harness.experiments.tuning import NotTuned, head_share, measured_curves
from ..harness.setup.variants import BUDGET, own
from ..harness.setup.workloads import label as workload_label
from .intervals import experiment_run_variance, main_measured
from .records import BOOTSTRAP, order, paired, row_id
from .verdict import COUNTS, TIMING, Evidence, Interval, Measured, shortfall, verdict

EQUAL_NODES_CAP = 16  # own-numbers verdicts compare τ at the nodes both methods reach, at most this many
TALON_NODES = TalonConfig().N                   # TALON's published budget: Figure 6's setting
EAGLE3_NODES = Eagle3TreeConfig().total_tokens - 1  # EAGLE-3's published 60 tokens, the root among them


def recorded_kind(path: Path) -> str:
    """The machine kind a results file's records were measured on (``machine.kind_of_record``)."""
    doc = json.loads(Path(path).read_text())
    envs = [r.get("environment", {}) for r in doc.get("records", [])] or [doc.get("environment", {})]
    return ", ".join(sorted({k for e in envs if (k := kind_of_record(e))})) or "unnamed machine"


def tau_interval(rows: list[dict], seed: int = 0) -> tuple[float, float, float]:
    """Mean τ over a record's prompts with its 95% percentile bootstrap interval over prompts (as ``records``)."""
    taus = torch.tensor([x["L_bar"] for x in rows], dtype=torch.float64)
    if len(taus) < 2:
        return float(taus.mean()), float("nan"), float("nan")
    pick = torch.randint(len(taus), (BOOTSTRAP, len(taus)), generator=torch.Generator().manual_seed(seed))
    lo, hi = taus[pick].mean(1).quantile(torch.tensor([0.025, 0.975], dtype=taus.dtype)).tolist()
    return float(taus.mean()), lo, hi


def tag(r, name: str) -> str | None:
    """A record's string tag ``name`` (``tag_<name>``), None where it has none (a missing tag reads as nan)."""
    x = r.get(f"tag_{name}")
    return x if isinstance(x, str) else None


def frontier_points(df: pd.DataFrame) -> pd.DataFrame:
    """One row per frontier record: workload, temperature, row identity (method and its own draft: a head kind, a
    draft model) and the method's label, budget, τ with its interval, δ, nodes and depth per verification, and
    greedy, how many prompts equal AR's."""
    rows = []
    for _, r in order(df[df.method != registry.AR]).iterrows():
        heads, model = tag(r, "heads"), tag(r, "draft_model")
        tau, lo, hi = tau_interval(r.rows)
        label = own(registry.REGISTRY[r.method].display.label, {"heads": heads} if heads else {})
        if model:  # the profile's own draft model by what it is, another by its folder: no internal id in a legend
            label += " on the draft model" + ("" if model.startswith("embedded:") else f" {Path(model).name}")
        rows.append({"dataset": r.dataset, "temperature": r.temperature, "row": r.row, "method": r.method,
                     "heads": heads, "draft_model": model, "label": label, "budget": int(r.tag_budget), "tau": tau,
                     "tau_lo": lo, "tau_hi": hi, "delta": r.draft_forwards_per_iter, "nodes": r.draft_nodes_per_iter,
                     "depth": r.depth_per_iter, "equals_ar": r.equals_ar, "n": r.n, "mark": r.mark,
                     "tau_by_prompt": {x["prompt_id"]: x["L_bar"] for x in r.rows},
                     "delta_by_prompt": {x["prompt_id"]: x["draft_forwards_per_iter"] for x in r.rows}})
    return pd.DataFrame(rows)


def frontier_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per workload, temperature and method: at each budget, τ [its 95% interval], the nodes it verified and δ."""
    cell = lambda p: f"{p.tau:.2f} [{p.tau_lo:.2f}, {p.tau_hi:.2f}] · {p.nodes:.1f} n · δ {p.delta:.1f}"
    t = points.assign(Workload=points.dataset.map(workload_label), T=points.temperature.map(lambda x: f"{x:g}"),
                      Method=points.label, cell=points.apply(cell, axis=1))
    t = t.pivot_table(index=["Workload", "T", "Method"], columns="budget", values="cell", aggfunc="first", sort=False)
    t.columns = [f"budget {b}: τ · nodes · δ" for b in t.columns]
    return t


def across_kinds(frontiers: dict[str, tuple[pd.DataFrame, pd.DataFrame]]) -> pd.DataFrame:
    """Whether the frontier's counts travel between two machine kinds ({kind: (records, ``frontier_points``)}, the
    first two): per workload and temperature, on how many prompts the two kinds' AR emitted the same tokens, the
    points (row and budget) both measured, how many have the same τ, the median and the largest |Δτ| (with its row),
    and how many of the second kind's τ fall inside the first's 95% interval. Each kind's greedy outputs are its own
    AR's; where the two AR differ (a near-tie of bf16 falling the other way on the other kernels), the methods draft
    on other text, so the test is the intervals, as at T = 1."""
    (ka, (ra, a)), (kb, (rb, b)) = list(frontiers.items())[:2]
    keys = ["dataset", "temperature", "row", "budget"]
    both = a.merge(b, on=keys, suffixes=("_a", "_b"))
    rows = {}
    for (ws, t), g in both.groupby(["dataset", "temperature"], sort=False):
        diff = (g.tau_a - g.tau_b).abs()
        worst = g.loc[diff.idxmax()]
        inside = ((g.tau_b >= g.tau_lo_a) & (g.tau_b <= g.tau_hi_a)).sum()
        rows[(workload_label(ws), f"{t:g}")] = {
            "AR's tokens equal": ar_agreement(ra, rb, ws, t), "points": len(g), "same τ": int((diff < 1e-9).sum()),
            "median |Δτ|": f"{diff.median():.3f}", "largest |Δτ|": f"{diff.max():.3f} ({worst.label_a} @ {worst.budget})",
            f"{kb}'s τ inside {ka}'s 95% interval": f"{inside} of {len(g)}"}
    t = pd.DataFrame(rows).T
    t.index.names = ["Workload", "T"]
    return t


def ar_agreement(ra: pd.DataFrame, rb: pd.DataFrame, ws: str, t: float) -> str:
    """On how many common prompts two runs' AR records of one workload and temperature emitted the same tokens."""
    outs = [{x["prompt_id"]: x["output_ids"] for r in df[(df.method == registry.AR) & (df.dataset == ws)
                                                         & (df.temperature == t)].rows for x in r} for df in (ra, rb)]
    common = outs[0].keys() & outs[1].keys()
    return f"{sum(outs[0][i] == outs[1][i] for i in common)} of {len(common)}" if common else "–"


def tau_at(points: pd.DataFrame, nodes: float) -> float:
    """τ of one row's frontier at ``nodes`` verified nodes, linear between its measured points (nan outside them)."""
    p = points.sort_values("nodes")
    if p.empty or not p.nodes.iloc[0] - 1e-9 <= nodes <= p.nodes.iloc[-1] + 1e-9:
        return float("nan")
    return float(np.interp(nodes, p.nodes, p.tau))


def equal_nodes(a: pd.DataFrame, b: pd.DataFrame) -> float | None:
    """The nodes at which two frontiers are compared: the most both reach, at most ``EQUAL_NODES_CAP`` (but not
    below the fewest both reach); None where their ranges do not overlap."""
    low, high = max(a.nodes.min(), b.nodes.min()), min(a.nodes.max(), b.nodes.max())
    return None if low > high else max(min(high, EQUAL_NODES_CAP), low)


def predict_row(curves: dict, r) -> float:
    """Predicted milliseconds per token of a logged row (its mean nodes, depth, draft forwards and τ)."""
    return predict_ms_per_token(curves, r.method, nodes=r.draft_nodes_per_iter, depth=r.depth_per_iter,
                                draft_forwards=r.draft_forwards_per_iter, L_bar=r.L_bar)


def own_drafts(df: pd.DataFrame) -> pd.Series:
    """Rows drafted with a draft of their own (Medusa's, Hydra's heads; a draft model): the curves price the
    profile's head's step only."""
    none = pd.Series(None, index=df.index, dtype=object)
    named = [df.get(f"tag_{name}", none).map(lambda x: isinstance(x, str)) for name in ("heads", "draft_model")]
    return (named[0] | named[1]).astype(bool)


def ar_scales(df: pd.DataFrame, curves: dict) -> dict[tuple, float]:
    """{(workload, temperature, replicate): AR's measured / predicted ms per token}: how much slower than its curves
    the machine ran during that run, the drift every row of the run shares."""
    return {(r.dataset, r.temperature, r.replicate): r.ms_per_token / predict_row(curves, r)
            for _, r in df[df.method == registry.AR].iterrows()}


def fitted_terms(frontier: pd.DataFrame, curves: dict) -> dict[float, list[float]]:
    """Per temperature, what the curves leave out of an iteration on this machine, as ms = a + b·nodes + c·δ, fitted
    by least squares to the frontier's records: each row's ms per iteration (prefill excluded) over its run's AR
    scale (``ar_scales``), less the predicted. It holds the sampled verification and drafting (the loop's terms are
    timed greedy) and the per-iteration work the timers do not. Fitted on the frontier's run, checked on the heads'
    and TALON's runs (other runs and times; the prompts overlap, every experiment taking the first test prompts)."""
    out, scale = {}, ar_scales(frontier, curves)
    drafting = frontier[(frontier.method != registry.AR) & ~own_drafts(frontier)]
    for t, g in drafting.groupby("temperature"):
        x = np.array([[1.0, r.draft_nodes_per_iter, r.draft_forwards_per_iter] for r in g.itertuples()])
        y = np.array([(r.ms_per_token / scale[(r.dataset, r.temperature, r.replicate)] - predict_row(curves, r))
                      * r.L_bar for r in g.itertuples()])
        out[float(t)] = np.linalg.lstsq(x, y, rcond=None)[0].tolist()
    return out


def predict_with_terms(curves: dict, r, terms: dict | None) -> float:
    """``predict_row`` plus the row's temperature's ``fitted_terms`` per iteration, over τ (nan without them)."""
    coef = (terms or {}).get(float(r.temperature))
    if coef is None:
        return float("nan")
    a, b, c = coef
    extra = 0.0 if r.method == registry.AR else a + b * r.draft_nodes_per_iter + c * r.draft_forwards_per_iter
    return predict_row(curves, r) + extra / r.L_bar


ERRORS = ("error", "AR-scaled", "AR-scaled, fitted terms")


def cost_check_table(frames: dict[str, pd.DataFrame], curves: dict, terms: dict | None = None) -> pd.DataFrame:
    """Predicted against measured tokens per second (prefill excluded) of every row of our loop in ``frames``
    ({source: records}, the heads' and TALON's tables of one machine) drafted with the profile's head, priced on that
    machine's ``curves`` (``head_curves``). Each error is measured ms per token over predicted, less 1 (the same as
    predicted tok/s over measured, less 1; notebook 03's "gap"): positive where the row ran slower than priced.
    ``AR-scaled``: the prediction times its run's ``ar_scales`` (the machine's drift between the curves' timing and
    the run's, common to every row); ``AR-scaled, fitted terms``: the same with ``terms`` added (``fitted_terms`` of
    the same machine's frontier; nan without)."""
    rows = []
    for source, df in frames.items():
        df = df[(df.impl == "ours") & ~own_drafts(df)]
        ar = ar_scales(df, curves)
        for _, r in order(df[df.method != registry.AR]).iterrows():
            pred, scale = predict_row(curves, r), ar.get((r.dataset, r.temperature, r.replicate), float("nan"))
            rows.append({"source": source, "Workload": workload_label(r.dataset), "T": f"{r.temperature:g}",
                         "Method": r.label, "replicate": int(r.replicate) + 1, "predicted tok/s": 1e3 / pred,
                         "measured tok/s": 1e3 / r.ms_per_token, "error": r.ms_per_token / pred - 1,
                         "AR-scaled": r.ms_per_token / (pred * scale) - 1,
                         "AR-scaled, fitted terms":
                             r.ms_per_token / (predict_with_terms(curves, r, terms) * scale) - 1})
    return pd.DataFrame(rows)


def cost_check_summary(t: pd.DataFrame) -> pd.DataFrame:
    """The check's verdict per temperature and overall: rows, the median absolute error of each prediction
    (``ERRORS``), and the worst row of the curves alone with its error."""
    out = {}
    for name, part in [*((f"T = {x}", t[t["T"] == x]) for x in sorted(t["T"].unique())), ("all rows", t)]:
        worst = part.loc[part.error.abs().idxmax()]
        med = {f"median abs. {e}": "–" if part[e].isna().all() else f"{part[e].abs().median():.1%}" for e in ERRORS}
        out[name] = {"rows": len(part), **med, "worst row (curves alone)":
                     f"{worst.source}: {worst.Workload}, {worst.Method} ({worst.error:+.0%})"}
    return pd.DataFrame(out).T


def projection_table(points: pd.DataFrame, machines: dict[str, dict]) -> pd.DataFrame:
    """Each method's best budget on each machine ({kind: curves}, ``head_curves``): the budget whose frontier point
    the cost model prices fastest there, with its predicted speedup over AR (the target's one-token forward). Rows
    over Medusa's and Hydra's heads or a draft model are left out: the curves price the EAGLE-3 head's step."""
    points, cols = points[points.heads.isna() & points.draft_model.isna()], {}
    for kind, curves in machines.items():
        ar, best = interp(curves["target"], 1), {}
        for (ws, t, _), g in points.groupby(["dataset", "temperature", "row"], sort=False):
            speed = {p.budget: ar / predict_ms_per_token(curves, p.method, nodes=p.nodes, depth=p.depth,
                                                         draft_forwards=p.delta, L_bar=p.tau) for p in g.itertuples()}
            b = max(speed, key=speed.get)
            best[(workload_label(ws), f"{t:g}", g.label.iloc[0])] = f"{b}: {speed[b]:.2f}x"
        cols[f"{kind}: best budget: predicted speedup"] = best
    t = pd.DataFrame(cols)
    t.index.names = ["Workload", "T", "Method"]
    return t


CLAIMS = (  # (claim, A, B, the table whose wall time judges it): every tree claim of the scorecard
    ("DynaTree over a fixed tree", registry.DYNATREE, registry.FIXED_TREE, "heads"),
    ("DynaTree over a chain (SD)", registry.DYNATREE, registry.LINEAR, "heads"),
    ("TALON over EAGLE-3's tree", registry.TALON, registry.EAGLE3_TREE, "talon"),
)


def frontier_of(points: pd.DataFrame, method: str, ws: str, t: float) -> pd.DataFrame:
    """One method's frontier (drafted with the profile's head) on one workload and temperature."""
    return points[(points.row == row_id(method, BUDGET)) & (points.dataset == ws) & (points.temperature == t)]


def tau_by_prompt_at(points: pd.DataFrame, nodes: float) -> dict[str, float]:
    """Each prompt's τ at ``nodes`` verified nodes on one row's frontier, linear between the budgets' mean nodes
    (the x the frontier is drawn on), over the prompts every budget measured."""
    p = points.sort_values("nodes")
    ids = set.intersection(*(set(d) for d in p.tau_by_prompt))
    return {i: float(np.interp(nodes, p.nodes, [d[i] for d in p.tau_by_prompt])) for i in ids}


def counted(a: dict, b: dict, clean: bool) -> Measured:
    """mean(a) / mean(b) over the prompts both counted, with its paired bootstrap interval over prompts: counts
    are deterministic greedy on one engine, so one replicate."""
    ratio, lo, hi, n = paired(a, b)
    iv = Interval(ratio, lo, hi)
    return Measured(iv, (iv,), n, clean)


def own_measured(points: pd.DataFrame, a: str, b: str, t: float) -> dict[str, Measured]:
    """{workload: τ_A / τ_B at equal verified nodes (``equal_nodes``)} on every frontier workload where both
    frontiers exist and overlap, intervals over prompts."""
    out = {}
    for ws in points.dataset.unique():
        pa, pb = frontier_of(points, a, ws, t), frontier_of(points, b, ws, t)
        if pa.empty or pb.empty or (n := equal_nodes(pa, pb)) is None:
            continue
        clean = bool((pa.mark == "").all() and (pb.mark == "").all())
        out[ws] = counted(tau_by_prompt_at(pa, n), tau_by_prompt_at(pb, n), clean)
    return out


def figure6_measured(points: pd.DataFrame) -> dict[str, Measured]:
    """TALON's Figure 6 as a count: EAGLE-3's tree's δ / τ (draft forwards per committed token) over TALON's, each
    at TALON's published budget (``TALON_NODES``), greedy, per frontier workload; above 1 where TALON drafts
    fewer."""
    out = {}
    for ws in points.dataset.unique():
        ta, ea = (frontier_of(points, m, ws, 0.0) for m in (registry.TALON, registry.EAGLE3_TREE))
        ta, ea = ta[ta.budget == TALON_NODES], ea[ea.budget == TALON_NODES]
        if ta.empty or ea.empty:
            continue
        per = lambda p: {i: p.delta_by_prompt[i] / p.tau_by_prompt[i] for i in p.tau_by_prompt}
        out[ws] = counted(per(ea.iloc[0]), per(ta.iloc[0]), ea.iloc[0].mark == "" and ta.iloc[0].mark == "")
    return out


def wall_cells(frames: dict[str, pd.DataFrame], table: str, a: str, b: str, t: float) -> tuple[str, str]:
    """One machine's wall-time ratios of A's main row over B's per workload (``intervals.main_measured``; the
    heads' table drafts with the head and its lookup, TALON's with the head alone) and their verdict, "–" without
    records."""
    df = frames.get(table)
    measured = {} if df is None else main_measured(df[df.temperature == t], a, b, run_var=experiment_run_variance(df))
    if not measured:
        return "–", "–"
    return counted_text(measured, TIMING), verdict(measured, TIMING)


def counted_text(measured: dict[str, Measured], need: Evidence) -> str:
    """'workload ratio [lo, hi]; ...' where the evidence suffices, the points and what is missing elsewhere."""
    def one(m: Measured) -> str:
        if m.enough(need):
            return f"{m.interval.value:.2f} [{m.interval.lo:.2f}, {m.interval.hi:.2f}]"
        return "/".join(f"{r.value:.2f}" for r in m.replicates) + f" ({shortfall({'': m}, need)})"
    return "; ".join(f"{workload_label(ws)} {one(m)}" for ws, m in measured.items())


def two_verdicts(points: pd.DataFrame, walls: dict[str, dict[str, pd.DataFrame]]) -> pd.DataFrame:
    """Every ``CLAIMS`` claim, greedy and at T = 1, by the one rule (``verdict``): in the method's own numbers (τ_A /
    τ_B at equal verified nodes on each frontier workload) and in wall time on each machine kind (``walls``: {kind:
    {table: records}}), and TALON's Figure 6 claim in counts (``figure6_measured``)."""
    rows = []
    for claim, a, b, table in CLAIMS:
        for t in sorted(points.temperature.unique()):
            own = own_measured(points, a, b, t)
            row = {"claim": f"{claim}, T = {t:g}", "own numbers": counted_text(own, COUNTS) or "–",
                   "own verdict": verdict(own, COUNTS)}
            for kind, frames in walls.items():
                row[f"wall, {kind}"], row[f"wall verdict, {kind}"] = wall_cells(frames, table, a, b, t)
            rows.append(row)
    fig6 = figure6_measured(points)
    rows.append({"claim": "TALON drafts fewer forwards per committed token than EAGLE-3's tree (Figure 6), T = 0",
                 "own numbers": counted_text(fig6, COUNTS) or "–", "own verdict": verdict(fig6, COUNTS)})
    return pd.DataFrame(rows).set_index("claim").fillna("–")


def frontier_reported() -> dict:
    """The papers' τ beside the frontier where their setting is one of its budgets: TALON's MAT for TALON (its N)
    and EAGLE-3 (its total tokens, less the root) on its reference model (mean over its benchmarks of each workload,
    Spec-Bench's categories for Spec-Bench), and DynaTree's L̄ on WikiText-2 (its Table 3, greedy; no tree size
    reported: a line)."""
    from ..harness.setup.workloads import TALON_BENCHMARKS, WIKITEXT2
    from .records import reported
    from .talon_tables import talon_reported

    rep, out = talon_reported(), {}
    model = rep["reference_model"]
    for t, table in ((0.0, "table1_T0"), (1.0, "table3_T1")):
        for method, nodes in ((registry.TALON, TALON_NODES), (registry.EAGLE3_TREE, EAGLE3_NODES)):
            by_ws: dict[str, list] = {}
            rows = rep[table][model][registry.REGISTRY[method].study.reported_talon]
            for bench, (ws, _) in TALON_BENCHMARKS.items():
                by_ws.setdefault(ws, []).append(rows[bench])
            label = f"{registry.REGISTRY[method].display.label}, TALON's paper ({model})"
            for ws, cells in by_ws.items():
                out.setdefault((ws, t), []).append((label, method, nodes, statistics.fmean(c["MAT"] for c in cells)))
    dyna = reported()["table3_verification_efficiency"][WIKITEXT2][registry.REGISTRY[registry.DYNATREE].study.reported]
    out.setdefault((WIKITEXT2, 0.0), []).append(("DynaTree's paper L̄ (Pythia, its draft model)", registry.DYNATREE,
                                               None, dyna["L_bar"]))
    return out


def machine_curves(p) -> dict | None:
    """The profile's machine's curves priced for its feature head (``head_curves`` of costs.json in the timed
    precision, by the head's measured step), or None where either is not committed or the costs are stale."""
    try:
        return head_curves(measured_curves(p, p.models.dtype, None), head_share(p))
    except (NotTuned, KeyError):
        return None
