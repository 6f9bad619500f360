"""The README's first screen from the logged JSON alone: the findings (one sentence per claim family, its verdicts
and the numbers they rest on) and the scorecard (each claim, the paper's number, ours per workload, what it rests
on and its verdict). ``python -m dynatree_lib.reporting.scorecard cpu`` rewrites both between the README's
``<!-- findings -->`` and ``<!-- scorecard -->`` markers; ``run_all.sh`` does. How to read them: docs/scorecard.md.

Every claim is a ``Claim`` with an id, always listed: a claim without clean records reads *not measured*. Its
verdict comes from the one rule (``verdict.verdict``), in wall time on a named machine (ratios of mean
throughputs, intervals holding the run-to-run noise: ``intervals``) or in the method's own counts (τ, δ at equal
verified nodes on the budget frontier). Prose that states a verdict marks it ``<!-- verdict: <id> -->``
(``markers``).
"""
from __future__ import annotations

import json
import re
import sys
import textwrap
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .. import methods as registry
from ..core.drafts.heads.kinds import HEAD_KINDS
from ..harness.experiments.frontier import FRONTIER
from ..harness.experiments.tuning import NotTuned
from ..harness.measure.store import results_path
from ..harness.setup.machine import kind_of_record
from ..harness.setup.paths import REPO
from ..harness.setup.variants import BUDGET, MAIN, NETWORK_ALONE
from ..harness.setup.weights import head_kind
from ..harness.setup.workloads import labels as workload_labels
from . import frontier_tables as ft, tables
from .intervals import experiment_run_variance, main_measured, paired_measured, timed_only
from .notebook import machines, on_machine
from .records import paired, ratio_ci, row_id
from .verdict import (COUNTS, MEMORY, NOT_MEASURED, TIMING, VERDICTS, Evidence, Interval, Measured,
                      exact_verdict, shortfall, verdict)

MARK = re.compile(r"<!-- scorecard -->.*?<!-- /scorecard -->", re.S)
FINDINGS_MARK = re.compile(r"<!-- findings -->.*?<!-- /findings -->", re.S)
DOC = "docs/scorecard.md"      # how to read the scorecard's columns
RULE = "docs/usage.md#verdicts"  # the verdict rule, stated once
TALON_FAMILY = "TALON"  # the family whose rows have a table of their own: TALON's paper, on TALON's workloads


@dataclass(frozen=True)
class Claim:
    """A claim of the scorecard: ``id`` names it in verdict markers, ``said`` is how the scorecard states it and
    ``paper`` the paper's number for it."""
    id: str
    said: str
    paper: str = "–"


def current(path: Path, profile) -> pd.DataFrame | None:
    """The records of ``path`` that belong to the profile's current cells; None when there are none (a claim whose
    run is not logged yet reads not measured rather than an old run's number), also when the current cells are
    not known yet because the tuning they come from is not logged for this code and draft's costs."""
    if not path.exists():
        return None
    try:
        df = tables.load(path, profile)
    except NotTuned:
        return None
    return None if df.empty else df


def draft_label(ref: str | None, lookup: bool, impl: str = "ours") -> str:
    """What a row drafts with, in a few words: a head of the target's features, or the draft model, with or
    without our context lookup; another engine's row is named by its engine, which drafts its own way."""
    if impl != "ours":
        return impl
    name = f"{HEAD_KINDS[kind].label} head" if ref and (kind := head_kind(ref)) else "draft model"
    return name + (" + lookup" if lookup else " alone")


def rests_on(df: pd.DataFrame, *, counts: bool = False) -> str:
    """A row's short label: the drafts of its records and the machine kinds that timed them (or "counts", which
    are the method's on any machine)."""
    drafted = df[df.method != registry.AR]
    drafts = sorted({draft_label(d, bool(lk), impl) for d, lk, impl in zip(drafted.draft, drafted.lookup, drafted.impl)})
    drafts = drafts or ["no draft"]
    where = "counts" if counts else ", ".join(sorted({str(m) for m in df.machine if m})) or "unnamed machine"
    return f"{' / '.join(drafts)} · {where}"


def source(df: pd.DataFrame, file: str) -> str:
    """Where a row's numbers come from: the results file, its records' commits, and how many are marked (dirty
    tree, busy machine) for RESULTS.md."""
    commits = ", ".join(sorted({str(c) for c in df.commit if c}))
    marked = int((df.mark != "").sum())
    return f"`{file}` @ {commits or '?'}" + (f" ({marked} of {len(df)} records marked)" if marked else "")


def ratio_text(iv: Interval) -> str:
    return f"{iv.value:.2f} [{iv.lo:.2f}, {iv.hi:.2f}]"


def change_text(iv: Interval) -> str:
    return f"{iv.value - 1:+.1%} [{iv.lo - 1:+.1%}, {iv.hi - 1:+.1%}]"


def cell(m: Measured, need: Evidence, show=ratio_text) -> str:
    """One workload's cell: the interval where the evidence suffices, else only the points and what is missing."""
    if m.enough(need):
        return show(m.interval)
    points = " / ".join(show(Interval(r.value, r.value, r.value)).split(" [")[0] for r in m.replicates)
    return f"{points} ({shortfall({'': m}, need)})"


def claim_row(claim: Claim, measured: dict[str, Measured], need: Evidence, *, used: pd.DataFrame, file: str,
              show=ratio_text, bound: float = 1.0, holds_above: bool = True) -> dict:
    """A scorecard row: the claim, the paper's number, a cell per measured workload, what it rests on (``used``:
    the records it compares, from ``file``) and the rule's verdict."""
    row = {"id": claim.id, "claim": claim.said, "paper": claim.paper}
    row |= {workload_labels()[ws]: cell(m, need, show) for ws, m in measured.items() if ws in workload_labels()}
    row["rests on"] = rests_on(used, counts=need is COUNTS)
    row["source"] = source(used, file)
    row["verdict"] = verdict(measured, need, bound=bound, holds_above=holds_above)
    return row


def unmeasured(claim: Claim) -> dict:
    return {"id": claim.id, "claim": claim.said, "paper": claim.paper, "rests on": "–", "source": "no records",
            "verdict": NOT_MEASURED}


def paper_ratio(a: str, b: str) -> str:
    """The paper's Table 1 throughput of method ``a`` over ``b`` on each workload it reports (WikiText-2 / PG-19;
    data/paper_reported.json)."""
    t1 = tables.reported()["table1_throughput_tokens_per_s"]
    ka, kb = registry.REGISTRY[a].study.reported, registry.REGISTRY[b].study.reported
    return " / ".join(f"{t1[ds][ka]['mean'] / t1[ds][kb]['mean']:.2f}" for ds in t1)


def versus(df: pd.DataFrame | None, claim: Claim, a: str, b: str, *, variant: str = MAIN) -> dict:
    """A speed claim of the main table: ``a``'s row of ``variant`` over ``b``'s (AR's is always its main row)."""
    if df is None:
        return unmeasured(dataclasses.replace(claim, paper=paper_ratio(a, b)))
    rows = [row_id(a, variant), row_id(b, MAIN if b == registry.AR else variant)]
    used = tables.role(df[df.row.isin(rows)])
    return claim_row(dataclasses.replace(claim, paper=paper_ratio(a, b)), paired_measured(df, *rows), TIMING,
                     used=used, file="main.json")


def exactness(df: pd.DataFrame | None, claim: Claim) -> dict:
    """Greedy DynaTree in fp32 equals AR's tokens (a divergence at a numerical near-tie of the target's top two
    logits excepted); its bf16 counts are shown beside."""
    if df is None:
        return unmeasured(claim)
    exact, timed = tables.role(df, "exact"), tables.role(df)
    row = {"id": claim.id, "claim": claim.said, "paper": claim.paper}
    for ws, name in workload_labels().items():
        e = exact[(exact.dataset == ws) & (exact.row == row_id(registry.DYNATREE, MAIN))]
        t = timed[(timed.dataset == ws) & (timed.row == row_id(registry.DYNATREE, MAIN)) & (timed.replicate == 0)]
        if not e.empty and not t.empty:
            row[name] = f"fp32 {e.iloc[0].equals_ar}/{e.iloc[0].n}, bf16 {t.iloc[0].equals_ar}/{t.iloc[0].n}"
    bad = tables.exactness_failures(exact)
    total = int(exact.n.sum())
    dyna = exact[exact.row == row_id(registry.DYNATREE, MAIN)]
    row["rests on"], row["source"] = rests_on(dyna, counts=True), source(exact, "main.json")
    row["verdict"] = NOT_MEASURED if (exact.mark != "").any() else exact_verdict(total - len(bad), total)
    return row


def authors_code_row(path: Path, claim: Claim) -> dict:
    """The differential test (experiment ``authors_code``): the authors' tree decoders against greedy AR, fp32."""
    if not path.exists():
        return unmeasured(claim)
    doc = json.loads(path.read_text())
    groups = doc["summary"]["groups"]
    row = {"id": claim.id, "claim": claim.said, "paper": claim.paper}
    trees = (registry.FIXED_TREE, registry.DYNATREE)
    for ws, name in workload_labels().items():
        gs = [g for g in groups if g["dataset"] == ws and g["method"] in trees]
        count = lambda impl: f"{sum(g['equal_to_ar'] for g in gs if g['impl'] == impl)}/" \
                             f"{sum(g['prompts'] for g in gs if g['impl'] == impl)}"
        if any(g["impl"] == "authors" for g in gs):
            row[name] = f"theirs {count('authors')}, ours {count('ours')}"
    theirs = [g for g in groups if g["impl"] == "authors" and g["method"] != registry.LINEAR]
    envs = [r.get("environment", {}) for r in doc.get("records", [])] or [doc.get("environment", {})]
    row["rests on"] = "their code and ours · counts"
    commits = sorted({str(e.get("git_commit")) for e in envs})
    dirty = sum(bool(e.get("git_dirty")) for e in envs)
    row["source"] = f"`authors_code.json` @ {', '.join(commits)}" + (f" ({dirty} from a dirty tree)" if dirty else "")
    row["verdict"] = NOT_MEASURED if any(e.get("git_dirty") for e in envs) else exact_verdict(
        sum(g["equal_to_ar"] for g in theirs), sum(g["prompts"] for g in theirs))
    return row


def ablation_rows(path: Path, profile, claims: tuple[Claim, Claim]) -> list[dict]:
    """Table 4's two claims on the ablation's workload (``Sweeps.workload``): dynamic breadth and depth over the
    fixed tree D=5, B=2 (step 1 over step 0), and history adaptation over that (step 2 over step 1), the paper's
    gains from ``paper_reported.json``."""
    t4 = tables.reported()["table4_ablation_wikitext2"]
    gain = {0: 1.0} | {s: 1 + t4[k]["delta_vs_fixed"] for s, k in ((1, "plus_dynamic_breadth_depth"),
                                                                  (2, "plus_history_adaptation"))}
    claims = tuple(dataclasses.replace(c, paper=f"{gain[s] / gain[s - 1] - 1:+.1%}") for s, c in zip((1, 2), claims))
    if (df := current(path, profile)) is None:
        return [unmeasured(c) for c in claims]
    rows = []
    for step, claim in zip((1, 2), claims):
        here, before = df[df.tag_step == step], df[df.tag_step == step - 1]
        if here.empty or before.empty:
            rows.append(unmeasured(claim))
            continue
        used = pd.concat([here, before])
        measured = paired_measured(df, here.row.iloc[0], before.row.iloc[0])
        rows.append(claim_row(claim, measured, TIMING, used=used, file="ablation.json", show=change_text))
    return rows


def footprints(df: pd.DataFrame, method: str, ws: str) -> dict:
    """{prompt id: footprint (MB)} of a method's main rows on one workload, over every record and row."""
    sub = df[(df.row == row_id(method, MAIN)) & (df.dataset == ws)]
    return {x["prompt_id"]: x["footprint_mb"] for rows in sub.rows for x in rows if "footprint_mb" in x}


def memory_rows(path: Path, profile, claims: dict[str, tuple[Claim, float]]) -> list[dict]:
    """Table 5's claims from the footprints (each generation in a fresh process): DynaTree's memory over a
    baseline's, per prompt and paired, against the claim's bound (``claims``: {baseline: (claim, bound)})."""
    t5 = tables.reported()["table5_peak_memory_mb"]
    paper = lambda m: t5[registry.REGISTRY[m].study.reported]["average"]
    claims = {b: (dataclasses.replace(c, paper=f"{paper(registry.DYNATREE) / paper(b) - 1:+.1%}"), bound)
              for b, (c, bound) in claims.items()}
    df = current(path, profile)
    if df is None or "footprint_mb" not in df:  # earlier records: absolute peaks only
        return [unmeasured(c) for c, _ in claims.values()]
    rows = []
    for base, (claim, bound) in claims.items():
        measured = {}
        for ws in workload_labels():
            dt, other = footprints(df, registry.DYNATREE, ws), footprints(df, base, ws)
            ids = dt.keys() & other.keys()
            if not ids:
                continue
            ratio = sum(dt[i] for i in ids) / sum(other[i] for i in ids)
            lo, hi = ratio_ci(dt, other) if len(ids) > 1 else (ratio, ratio)
            sub = df[df.dataset == ws]
            measured[ws] = Measured(Interval(ratio, lo, hi), (Interval(ratio, lo, hi),), len(ids),
                                    bool((sub.mark == "").all()))
        used = df[df.row.isin([row_id(registry.DYNATREE, MAIN), row_id(base, MAIN)])]
        rows.append(claim_row(claim, measured, MEMORY, used=used, file="memory.json", show=change_text,
                              bound=bound, holds_above=False))
    return rows


def sampling_row(path: Path, profile, claim: Claim) -> dict:
    """DynaTree over AR, both sampling at the experiment's highest temperature."""
    if (df := current(path, profile)) is None:
        return unmeasured(claim)
    sub = df[df.temperature == df.temperature.max()]
    used = sub[sub.row.isin([row_id(registry.DYNATREE, MAIN), row_id(registry.AR, MAIN)])]
    return claim_row(claim, main_measured(sub, registry.DYNATREE, registry.AR, run_var=experiment_run_variance(df)),
                     TIMING, used=used,
                     file="sampling.json")


def peers_rows(root: Path, profile, claims: tuple[Claim, Claim]) -> list[dict]:
    """Not paper claims: our fastest row against llama.cpp's fastest mode (each chosen by mean throughput over every
    replicate, then compared replicate by replicate), and vLLM serving our head against vLLM's AR."""
    rows = []
    if (df := current(root / "peers.json", profile)) is None:
        rows.append(unmeasured(claims[0]))
    else:
        measured, compared = {}, set()
        for ws, w in timed_only(df).groupby("dataset", sort=False):
            ours, peers = w[(w.impl == "ours") & (w.method != registry.AR)], w[w.impl == "llama.cpp"]
            if not ours.empty and not peers.empty:
                best = [x.groupby("row").tps.mean().idxmax() for x in (ours, peers)]
                measured |= paired_measured(w, *best, run_var=experiment_run_variance(df))
                compared |= set(best)
        rows.append(claim_row(claims[0], measured, TIMING, used=df[df.row.isin(compared)], file="peers.json"))
    if (df := current(root / "vllm.json", profile)) is None:
        rows.append(unmeasured(claims[1]))
    else:
        vllm = df[df.method == "vllm"]
        own = vllm[vllm.tag_own_ar.fillna(False).astype(bool)]
        head = vllm[vllm.variant == "vllm_eagle3"]
        measured = {} if own.empty or head.empty else paired_measured(vllm, head.row.iloc[0], own.row.iloc[0],
                                                                      run_var=experiment_run_variance(df))
        rows.append(claim_row(claims[1], measured, TIMING, used=pd.concat([own, head]), file="vllm.json"))
    return rows


def talon_paper(table: str) -> str:
    """TALON's reported speedup of TALON over EAGLE-3 (range over its benchmarks) for its reference model."""
    rep = tables.talon_reported()
    model = rep["reference_model"]
    rows = rep[table][model]
    talon, eagle = (rows[registry.REGISTRY[m].study.reported_talon] for m in (registry.TALON, registry.EAGLE3_TREE))
    ratios = [talon[b]["speedup"] / eagle[b]["speedup"] for b in rep["benchmarks"]]
    return f"{min(ratios):.2f}-{max(ratios):.2f} ({model})"


def talon_rows(path: Path, profile, claims: tuple[Claim, Claim]) -> list[dict]:
    """TALON's two speed claims on our feature head drafting alone (notebook 14): faster than EAGLE-3's dynamic
    tree greedy (its Table 1) and at T = 1 (Table 3)."""
    claims = tuple(dataclasses.replace(c, paper=talon_paper(t)) for c, t in zip(claims, ("table1_T0", "table3_T1")))
    if (df := current(path, profile)) is None:
        return [unmeasured(c) for c in claims]
    rows = []
    for t, claim in zip((0.0, 1.0), claims):
        sub = df[df.temperature == t]
        used = sub[~sub.lookup.astype(bool) & sub.row.isin([row_id(m, MAIN) for m in (registry.TALON,
                                                                                       registry.EAGLE3_TREE)])]
        rows.append(claim_row(claim, main_measured(sub, registry.TALON, registry.EAGLE3_TREE, lookup=False,
                                                   run_var=experiment_run_variance(df)),
                              TIMING, used=used, file="talon.json"))
    return rows


def committed_frontier(profile) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The budget frontier's records and points (notebook 15) of the profile's own records or, where it has none,
    of the first machine kind's that has them (counts are the method's: the same on every machine whose engine
    computes the same bits, statistics of the same law elsewhere and at T = 1); None where none is committed."""
    for p in (profile, *(on_machine(profile, kind) for kind in machines(profile))):
        if (df := current(results_path(FRONTIER, p), p)) is not None:
            return df, ft.frontier_points(df)
    return None


FIGURE6_KEY = "figure6"  # counted_rows' A for TALON's Figure 6 (δ / τ), which is no pair of frontiers


def counted_rows(profile, claims: dict[str, tuple[str, str, float]]) -> list[dict]:
    """The tree claims in the methods' own counts: τ_A / τ_B at equal verified nodes on the budget frontier
    (``claims``: {claim: (A, B, temperature)}), and TALON's Figure 6 (``FIGURE6``), intervals over prompts."""
    frontier = committed_frontier(profile)
    rows = []
    for claim, (a, b, t) in claims.items():
        if frontier is None:
            rows.append(unmeasured(claim))
            continue
        df, points = frontier
        if a == FIGURE6_KEY:
            measured, compared = ft.figure6_measured(points), (registry.TALON, b)
        else:
            measured, compared = ft.own_measured(points, a, b, t), (a, b)
        used = df[(df.temperature == t) & df.row.isin([row_id(m, BUDGET) for m in compared])]
        rows.append(claim_row(claim, measured, COUNTS, used=used, file=f"{FRONTIER}.json"))
    return rows

C = Claim  # the claims, in the README's order
EXACT = C("exact", "Greedy DynaTree emits the target's own tokens (exact)", "exact (stated)")
AUTHORS = C("authors_exact", "The authors' published tree decoders are exact (fp32, against greedy AR)",
            "exact (§3.6)")
VS_AR = C("dynatree_vs_ar", "DynaTree is faster than AR")
VS_LINEAR = C("dynatree_vs_linear", "DynaTree is faster than linear speculative decoding")
VS_FIXED = C("dynatree_vs_fixed", "DynaTree is faster than a tuned fixed tree")
VS_LINEAR_NET = C("dynatree_vs_linear_network", "... drafting with the network alone, faster than linear")
VS_FIXED_NET = C("dynatree_vs_fixed_network", "... drafting with the network alone, faster than a fixed tree")
TAU_LINEAR = C("dynatree_vs_linear_tau", "DynaTree commits more per verification than linear at equal nodes (τ)")
TAU_FIXED = C("dynatree_vs_fixed_tau", "DynaTree commits more per verification than a fixed tree at equal nodes (τ)")
ABLATION = (C("ablation_dynamic", "Dynamic breadth & depth beat the fixed tree D=5, B=2 (ablation)"),
            C("ablation_history", "... and history adaptation adds more on top of them"))
MEMORY_AR = C("memory_vs_ar", "DynaTree's memory is at most 10% above AR's (footprint of one generation)")
MEMORY_LINEAR = C("memory_vs_linear", "DynaTree's memory is at most 2% above linear's (footprint of one generation)")
SAMPLING = C("sampling", "DynaTree sampling at T = 1 is faster than AR sampling", "TALON Table 3 (T = 1)")
PEERS = (C("peers_llamacpp", "Our fastest method is faster than llama.cpp's fastest mode, same weights "
           "(not in the paper)"),
         C("vllm_serving", "vLLM serving our EAGLE-3 head is faster than vLLM's AR, batch 1 (not in the paper)"))
TALON_CLAIMS = (C("talon_t0", "TALON is faster than EAGLE-3's tree, greedy"),
                C("talon_t1", "... and at T = 1 (TALON's Table 3)"))
TALON_COUNTS = (C("talon_t0_tau", "TALON commits more per verification than EAGLE-3's tree at equal nodes (τ)"),
                C("talon_t1_tau", "... and at T = 1"),
                C("talon_figure6", "TALON drafts fewer forwards per committed token than EAGLE-3's tree (δ / τ)",
                  "Figure 6 (qualitative)"))
SAYS = {  # a claim that continues the row above it, as a finding's sentence says it on its own
    ABLATION[1].id: "history adaptation adds more on top",
    VS_LINEAR_NET.id: "drafting with the network alone, DynaTree is faster than linear",
    VS_FIXED_NET.id: "drafting with the network alone, DynaTree is faster than a fixed tree",
    TALON_CLAIMS[1].id: "TALON is faster than EAGLE-3's tree at T = 1 (TALON's Table 3)",
    TALON_COUNTS[1].id: "TALON commits more per verification than EAGLE-3's tree at equal nodes at T = 1 (τ)"}


def claims(profile) -> dict[str, list[dict]]:
    """The scorecard's rows by claim family, in the README's order; every claim has its row."""
    root = REPO / "results" / profile.name
    main, dt = current(root / "main.json", profile), registry.DYNATREE
    return {
        "Exactness": [exactness(main, EXACT), authors_code_row(root / "authors_code.json", AUTHORS)],
        "Speedup over AR": [versus(main, VS_AR, dt, registry.AR)],
        "DynaTree against linear drafting and the fixed tree": [
            versus(main, VS_LINEAR, dt, registry.LINEAR), versus(main, VS_FIXED, dt, registry.FIXED_TREE),
            versus(main, VS_LINEAR_NET, dt, registry.LINEAR, variant=NETWORK_ALONE),
            versus(main, VS_FIXED_NET, dt, registry.FIXED_TREE, variant=NETWORK_ALONE),
            *counted_rows(profile, {TAU_LINEAR: (dt, registry.LINEAR, 0.0), TAU_FIXED: (dt, registry.FIXED_TREE, 0.0)})],
        "The ablation (the paper's Table 4)": ablation_rows(root / "ablation.json", profile, ABLATION),
        "Memory (the paper's Table 5)": memory_rows(root / "memory.json", profile,
                                                    {registry.AR: (MEMORY_AR, 1.10),
                                                     registry.LINEAR: (MEMORY_LINEAR, 1.02)}),
        "Sampling": [sampling_row(root / "sampling.json", profile, SAMPLING)],
        "Peers": peers_rows(root, profile, PEERS),
        TALON_FAMILY: talon_rows(root / "talon.json", profile, TALON_CLAIMS) + counted_rows(
            profile, {TALON_COUNTS[0]: (registry.TALON, registry.EAGLE3_TREE, 0.0),
                      TALON_COUNTS[1]: (registry.TALON, registry.EAGLE3_TREE, 1.0),
                      TALON_COUNTS[2]: (FIGURE6_KEY, registry.EAGLE3_TREE, 0.0)})}


def verdicts(profile) -> dict[str, str]:
    """{claim id: verdict}: what the verdict markers in the prose are held to."""
    return {row["id"]: row["verdict"] for rows in claims(profile).values() for row in rows}


def table(rows: list[dict]) -> pd.DataFrame:
    """Rows as a table indexed by claim: the paper's number, the workloads in their order, what a row rests on and
    its verdict, without a column that no row fills (the id is the markers' and the source RESULTS.md's: not
    shown)."""
    card = pd.DataFrame(rows).set_index("claim").fillna("–")
    columns = ["paper", *(w for w in workload_labels().values() if w in card), "rests on", "verdict"]
    card = card[columns]
    return card.loc[:, (card != "–").any()]


def scorecard(profile) -> pd.DataFrame:
    """Every claim's row in one table."""
    return table([row for rows in claims(profile).values() for row in rows])


def finding(family: str, rows: list[dict]) -> str:
    """One sentence for a claim family: each claim, its verdict (marked) and the cells that verdict rests on."""
    return wrap(f"- **{family}:** " + "; ".join(clause(row) for row in rows) + ".", indent="  ")


def clause(row: dict) -> str:
    """'claim: **verdict** <!-- verdict: id --> (workload: cell; ...; what it rests on)'."""
    said = SAYS.get(row["id"], row["claim"])
    first = said.split(" ", 1)[0]
    if first[1:] == first[1:].lower():  # a sentence's capital, not a name's ("DynaTree", "TALON", "AR" keep theirs)
        said = said[0].lower() + said[1:]
    cells = [f"{name}: {row[name]}" for name in workload_labels().values() if row.get(name, "–") != "–"]
    if row.get("rests on", "–") != "–":
        cells.append(row["rests on"])
    return f"{said}: **{row['verdict']}** <!-- verdict: {row['id']} -->" + (f" ({'; '.join(cells)})" if cells else "")


def findings(families: dict[str, list[dict]]) -> str:
    """The README's findings: a lead line, then one sentence per claim family (``finding``)."""
    lead = ("What the committed runs show, claim by claim: each verdict, by [one rule](" + RULE + "), and the numbers "
            "it rests on, as in the scorecard below (a ratio with its 95% interval, which holds the run-to-run noise; "
            f"[how to read them]({DOC})).")
    return wrap(lead) + "\n\n" + "\n".join(finding(name, rows) for name, rows in families.items()) + "\n"


def wrap(text: str, indent: str = "") -> str:
    """A paragraph at the README's line width (Markdown joins the lines again), never broken inside `code`, bold
    or a marker."""
    kept = re.sub(r"`[^`]*`|<!--.*?-->|\*\*[^*]*\*\*", lambda m: m.group(0).replace(" ", "\0"), text)
    return textwrap.fill(kept, width=120, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False).replace("\0", " ")


def scorecard_markdown(profile, families: dict[str, list[dict]]) -> str:
    """The scorecard's block: the paper's claims, TALON's in a table of their own (its workloads), one line that
    states the rule's words and links it."""
    paper = [row for name, rows in families.items() if name != TALON_FAMILY for row in rows]
    md = tables.to_markdown(table(paper))
    if talon := families.get(TALON_FAMILY):
        md += ("\nTALON's claims, on its workloads with our EAGLE-3 head drafting alone (notebook 14 and 15):\n\n"
               + tables.to_markdown(table(talon)))
    how = (f"Each verdict is one of reproduces, partly, inconclusive, refuted or not measured, by [one rule]({RULE}); "
           f"ratios of mean throughputs with 95% intervals that hold the run-to-run noise, from `results/"
           f"{profile.name}/` by `python -m dynatree_lib.reporting.scorecard {profile.name}`; how to read the "
           f"columns: [{DOC}]({DOC}).")
    return md + "\n" + wrap(how) + "\n"


def replace(text: str, mark: re.Pattern, name: str, block: str) -> str:
    """``text`` with ``block`` between its ``<!-- name -->`` markers (refused where it has none)."""
    if not mark.search(text):
        raise ValueError(f"the README has no <!-- {name} --> ... <!-- /{name} --> markers")
    return mark.sub(lambda _: f"<!-- {name} -->\n{block}<!-- /{name} -->", text)


def write(profile, readme: Path = REPO / "README.md") -> str:
    """Rewrite the findings and the scorecard between the README's markers; returns the scorecard's Markdown."""
    families = claims(profile)
    md = scorecard_markdown(profile, families)
    text = replace(readme.read_text(), FINDINGS_MARK, "findings", findings(families))
    readme.write_text(replace(text, MARK, "scorecard", md))
    return md


if __name__ == "__main__":
    from ..harness.setup.profiles import get_profile

    print(write(get_profile(sys.argv[1] if len(sys.argv) > 1 else "cpu")))
