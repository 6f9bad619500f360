"""Notebook 14's tables: TALON's Tables 1 and 3 on a feature head, from the ``talon`` experiment's records, and
TALON's reported advantage over EAGLE-3 beside ours (``data/talon_reported.json``: numbers transcribed from the
TALON paper, never our measurements).

MAT is TALON's "mean accepted tokens", τ = L / N_p (its eq. 12: new tokens over target verification forwards, the
bonus token included), which is our L̄: our prefill runs the prompt less its last token and yields no token, so every
new token is committed by a verification and L̄ = tokens / verifications. δ is TALON's draft efficiency, N_q / N_p
(eq. 6): draft forwards per verification. Both are means over a cell's prompts.
"""
from __future__ import annotations

import json

import pandas as pd

from .. import methods as registry
from ..harness.setup.data import REPO_DATA
from ..harness.setup.variants import short
from ..harness.peers.vllm import AR_PEER, EAGLE3_VARIANT
from ..harness.setup.workloads import TALON_BENCHMARKS, label as workload_label
from .formatting import CATEGORY_LABELS, dash, present
from .main_tables import heads_table
from .records import order, paired, shown

MAT = "MAT (τ)"


def talon_reported() -> dict:
    """TALON's Tables 1 and 3 as transcribed in data/talon_reported.json (not our measurements)."""
    return json.loads((REPO_DATA / "talon_reported.json").read_text(encoding="utf-8"))


def talon_table(df: pd.DataFrame) -> pd.DataFrame:
    """TALON's Tables 1 (T = 0) and 3 (T = 1) in one, per temperature and workload: MAT (τ = L̄, the bonus token
    included, as TALON counts it) and δ (draft forwards per verification) in replicate 1, the speedup over AR at that
    temperature on the same prompts with its 95% interval in each replicate, and at T = 0 the prompts whose output
    equals AR's; "–" where a column does not apply (AR's δ and speedup). ``heads_table``'s conventions, TALON's
    name for τ; our engine's rows only (llama.cpp's: ``talon_peer_table``)."""
    df = df[df.impl == "ours"] if not df.empty else df
    if df.empty:
        return pd.DataFrame()
    t = heads_table(df)
    t.columns = pd.MultiIndex.from_tuples([(a, b, MAT if c == "τ" else c) for a, b, c in t.columns])
    return t


def talon_budget_table(df: pd.DataFrame) -> pd.DataFrame:
    """The setting each drafting row of our engine runs with on each workload (its fastest tuning candidate on the
    head where the profile tunes), and greedy, replicate 1, the nodes it drafts and verifies per iteration: the
    budget each is tuned to, beside TALON's N = 60 (which every row of TALON's Table 1 shares)."""
    rows = df[(df.impl == "ours") & (df.method != registry.AR) & (df.temperature == 0) & (df.replicate == 0)] \
        if not df.empty else df
    if rows.empty:
        return pd.DataFrame()
    out: dict = {}
    for ds in present(rows.dataset):
        for _, r in order(rows[rows.dataset == ds]).iterrows():
            cells = out.setdefault(r.row, {})
            cells[(workload_label(ds), "setting")] = short(r.config)
            cells[(workload_label(ds), "nodes / iter")] = f"{r.draft_nodes_per_iter:.1f}"
    table = shown(pd.DataFrame(out).T, rows).fillna("–")
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    return table


def talon_peer_table(df: pd.DataFrame, peers: pd.DataFrame | None = None) -> pd.DataFrame:
    """Other engines' EAGLE-3 modes with our head beside their own AR, and our AR and SD (a chain on the same head):
    per temperature and workload, tokens/s and MAT in replicate 1 (greedy, the prompts whose output equals our AR's:
    another engine's BF16 kernels can part from ours at near-ties), and each row's speedup over its own engine's AR and
    over ours on the same prompts, in each replicate. ``df``'s peer rows are llama.cpp's; ``peers`` adds another
    run's (vLLM's AR and EAGLE-3 rows from ``vllm.json``, on TALON's workloads), each row's "over our AR" taken from
    our AR measured in its own run. Empty where no peer record was measured."""
    frames = [df] if peers is None or peers.empty else [df, peer_rows(peers)]
    rows = pd.concat([f for f in frames if not f.empty]) if any(not f.empty for f in frames) else df
    rows = rows[(rows.impl != "ours") | rows.method.isin((registry.AR, registry.LINEAR))] if not rows.empty else rows
    if rows.empty or (rows.impl == "ours").all():
        return pd.DataFrame()
    out: dict = {}
    for t in sorted(set(rows.temperature)):
        for ds in present(rows.dataset):
            for _, r in order(rows[(rows.temperature == t) & (rows.dataset == ds)]).iterrows():
                col = lambda name: (f"T = {t:g}", workload_label(ds), name)  # noqa: E731
                cells = out.setdefault(r.row, {})
                own = r.speedup if r.impl == "ours" else r.speedup_own
                if r.replicate == 0:
                    cells[col("tok/s")] = f"{r.tps:.1f}"
                    cells[col(MAT)] = f"{r.L_bar:.2f}"
                    if t == 0:
                        cells[col("= our AR")] = "–" if r.method == registry.AR else f"{r.equals_ar}/{r.n}"
                cells[col(f"over own AR r{r.replicate + 1}")] = dash(own, "{:.2f}×")
                cells[col(f"over our AR r{r.replicate + 1}")] = dash(r.speedup, "{:.2f}×")
    table = shown(pd.DataFrame(out).T, rows).fillna("–")
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    return table


def peer_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of a peer run that belong in TALON's peer table: the peer's own AR and its EAGLE-3 mode with our
    head, on TALON's workloads (not its head-free modes, not our rows of that run)."""
    keep = df.variant.isin((AR_PEER.variant, EAGLE3_VARIANT)) & df.dataset.isin({ds for ds, _ in TALON_BENCHMARKS.values()})
    return df[(df.impl != "ours") & keep]


def benchmark_rows(r, category: str | None) -> list[dict]:
    """A record's per-prompt rows on one of TALON's benchmarks: a Spec-Bench category's questions, or them all."""
    return [x for x in r.rows if category is None or x.get("category") == category]


def mean_mat(rows: list[dict]) -> float:
    return sum(x["L_bar"] for x in rows) / len(rows) if rows else float("nan")


def ours(df: pd.DataFrame, temperature: float, workload: str, category: str | None, replicates: list) -> dict:
    """TALON's throughput over EAGLE-3's tree on one benchmark's prompts in each replicate (with its 95% paired
    interval where two or more prompts), both MATs (replicate 1) and the prompt count; "–" where not measured."""
    def record(method, rep):
        if df.empty:
            return None
        sub = df[(df.method == method) & (df.dataset == workload) & (df.temperature == temperature)
                 & (df.replicate == rep)]
        return None if sub.empty else sub.iloc[0]

    ratios, first = {}, {"MAT TALON / EAGLE-3 (ours)": "–", "prompts": "–"}
    for rep in replicates:
        talon, eagle = record(registry.TALON, rep), record(registry.EAGLE3_TREE, rep)
        cell = "–"
        if talon is not None and eagle is not None:
            tps = [{x["prompt_id"]: x["tps"] for x in benchmark_rows(r, category)} for r in (talon, eagle)]
            ratio, lo, hi, n = paired(*tps)
            cell = f"{ratio:.2f}" + ("" if pd.isna(lo) else f" [{lo:.2f}, {hi:.2f}]")
            if rep == replicates[0]:
                mats = [mean_mat(benchmark_rows(r, category)) for r in (talon, eagle)]
                first = {"MAT TALON / EAGLE-3 (ours)": f"{mats[0]:.2f} / {mats[1]:.2f}", "prompts": n}
        ratios[f"TALON / EAGLE-3 (ours, r{rep + 1} [95% CI])"] = cell
    return ratios | first


def talon_reported_vs_reproduced(df: pd.DataFrame, model: str | None = None) -> pd.DataFrame:
    """Per temperature and TALON benchmark: TALON's speedup over EAGLE-3's as TALON reports it (``model``'s row,
    default the file's ``reference_model``: the smallest model it reports) with both MATs, beside ours: TALON's mean
    throughput over EAGLE-3's tree on the same prompts (``ours``). TALON's ratio of two speedups over one AR is a
    ratio of throughputs, so the two compare like for like; the models, hardware, prompts and limits do not.
    ``Ours`` names the workload that stands for each benchmark (``TALON_BENCHMARKS``: Alpaca is UltraChat's
    evaluation set, the work TALON cites for it, not the same questions)."""
    rep = talon_reported()
    model = model or rep["reference_model"]
    if model not in rep["table1_T0"]:
        raise ValueError(f"TALON reports no model {model!r}; choose one of {sorted(rep['table1_T0'])}")
    keys = [registry.REGISTRY[m].study.reported_talon for m in (registry.TALON, registry.EAGLE3_TREE)]
    replicates = sorted(df.replicate.unique()) if not df.empty else [0]
    rows = []
    for t, table in ((0.0, rep["table1_T0"][model]), (1.0, rep["table3_T1"][model])):
        for bench in rep["benchmarks"]:
            ws, category = TALON_BENCHMARKS[bench]
            talon, eagle = (table[k][bench] for k in keys)
            row = {"T": f"{t:g}", "Benchmark": bench,
                   "ours": workload_label(ws) + (f" · {CATEGORY_LABELS[category]}" if category else ""),
                   f"TALON / EAGLE-3 (reported, {model})": f"{talon['speedup'] / eagle['speedup']:.2f}",
                   "MAT TALON / EAGLE-3 (reported)": f"{talon['MAT']:.2f} / {eagle['MAT']:.2f}"}
            rows.append(row | ours(df, t, ws, category, replicates))
    return pd.DataFrame(rows).set_index(["T", "Benchmark"]).fillna("–")
