"""Tables of the measured runs (main, sampling, ablation, tuning, peers), from ``records.load``'s DataFrames: rows
selected by method and variant, shown by their labels."""
from __future__ import annotations

import pandas as pd

from .. import methods as registry
from ..harness.measure.metrics import TIE_GAP
from ..harness.setup.variants import MAIN, PAPER_SETTINGS
from ..harness.setup.workloads import WORKLOADS, continuations, label as workload_label, labels as workload_labels
from .formatting import CATEGORY_LABELS, dash, pm, present
from .records import order, paired, paired_ratio, replicate, reported, role, row_id, shown


def paired_vs_best(df: pd.DataFrame, methods: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Each DynaTree-family row (``methods``, default ``methods.family(DYNATREE)``) of the timed run (draft with its
    lookup) against the fastest method outside the family on the same workload, per replicate: the ratio of their
    throughputs with its 95% paired bootstrap interval over prompts (an interval that contains 1 is no measured
    difference)."""
    methods = methods or registry.family(registry.DYNATREE)
    rows = []
    timed = role(df)
    timed = timed[timed.lookup & (timed.impl == "ours")]
    for ds in present(timed.dataset):
        for rep, sub in timed[timed.dataset == ds].groupby("replicate"):
            others = sub[~sub.method.isin((registry.AR, *registry.family(registry.DYNATREE)))]
            if others.empty:
                continue
            best = others.loc[others.tps.idxmax()]
            for _, r in order(sub[sub.method.isin(methods)]).iterrows():
                ratio, lo, hi, n = paired(r.tps_by_prompt, best.tps_by_prompt)
                rows.append({"Workload": workload_label(ds), "Method": r.label, "replicate": int(rep) + 1,
                             "vs": best.label, "throughput ratio": f"{ratio:.3f}", "95% CI": f"[{lo:.3f}, {hi:.3f}]",
                             "prompts": n})
    return pd.DataFrame(rows).set_index(["Workload", "Method", "replicate"]) if rows else pd.DataFrame()


def per_dataset(df: pd.DataFrame, cols: dict) -> pd.DataFrame:
    """Methods as rows, (workload, column) pairs as columns; ``cols`` maps a header to a row formatter."""
    out = {}
    for ds in present(df.dataset):
        sub = order(df[df.dataset == ds]).drop_duplicates("row").set_index("row")
        for name, f in cols.items():
            out[(workload_label(ds), name)] = {row: f(r) for row, r in sub.iterrows()}
    return shown(pd.DataFrame(out), df)


def exact_decoders(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of the methods that must emit AR's tokens (``Method.exact``), AR itself aside."""
    return df[~df.method.isin([registry.AR, *registry.inexact()])]


def exactness_failures(df: pd.DataFrame) -> pd.DataFrame:
    """fp32 rows of exact decoders (``exact_decoders``) that left AR's tokens anywhere but at a numerical near-tie
    (a target top-1/top-2 logit gap of at most ``TIE_GAP`` where they diverged): these would be decoder bugs."""
    exact = exact_decoders(df[df.dtype == "float32"])
    gap = exact.max_divergence_gap.astype(float)
    return exact[(exact.equals_ar < exact.n) & ~(gap <= TIE_GAP)]


def agreement(r) -> str:
    """Prompts whose output equals AR's, and where the others first diverged (mean token index)."""
    if r.method == registry.AR:
        return "–"
    s = f"{r.equals_ar}/{r.n}"
    if r.equals_ar < r.n and not pd.isna(r.get("first_divergence")):
        s += f" (div. @{r.first_divergence:.0f}"
        s += f", gap {r.max_divergence_gap:.0e})" if not pd.isna(r.get("max_divergence_gap")) else ")"
    return s


def speedup_ci(r) -> str:
    """A row's speedup over AR with its paired 95% interval ("–" for AR itself), marked where either record was
    measured on a dirty tree or a busy machine (``records.provenance_mark``)."""
    if r.method == registry.AR or pd.isna(r.speedup):
        return "–"
    ci = "" if pd.isna(r.speedup_lo) else f" [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}]"
    mark = r.get("speedup_mark")
    return f"{r.speedup:.2f}×{ci}{mark if isinstance(mark, str) else ''}"


def replicates_agree(a, b) -> bool:
    """Two replicates' speedups tell the same story: their 95% intervals overlap and they are on the same side
    of 1 (where an interval excludes it)."""
    if pd.isna(a.speedup_lo) or pd.isna(b.speedup_lo):
        return bool(abs(a.speedup - b.speedup) <= 0.05 * max(a.speedup, b.speedup))
    side = lambda r: 1 if r.speedup_lo > 1 else -1 if r.speedup_hi < 1 else 0
    return a.speedup_lo <= b.speedup_hi and b.speedup_lo <= a.speedup_hi and side(a) * side(b) >= 0


def table1(df):
    """Throughput (replicate 1) and speedup with its 95% interval in each replicate (timed precision), whether
    the replicates agree, and agreement with AR at that precision."""
    timed = role(df)
    reps = sorted(timed.replicate.unique())
    out = {}
    for ds in present(timed.dataset):
        sub = {r: order(timed[(timed.dataset == ds) & (timed.replicate == r)]).set_index("row") for r in reps}
        first, name = sub[reps[0]], workload_label(ds)
        out[(name, "tok/s")] = {row: pm(x.tps, x.tps_std) for row, x in first.iterrows()}
        for r in reps:
            out[(name, f"speedup r{r + 1} [95% CI]")] = {row: speedup_ci(x) for row, x in sub[r].iterrows()}
        if len(reps) > 1:
            out[(name, "replicates agree")] = {
                row: "–" if x.method == registry.AR or row not in sub[reps[1]].index
                else ("yes" if replicates_agree(x, sub[reps[1]].loc[row]) else "**no**") for row, x in first.iterrows()}
        out[(name, "= AR")] = {row: agreement(x) for row, x in first.iterrows()}
    return shown(pd.DataFrame(out), timed)


def table1_exact(df):
    """The exactness run (fp32): every exact method must equal AR on every prompt."""
    return per_dataset(role(df, "exact"), {"= AR": agreement, "Speedup": lambda r: f"{r.speedup:.2f}×"})


def table2(df):
    return per_dataset(replicate(role(df)), {"TTFT (ms)": lambda r: pm(r.ttft_ms, r.ttft_ms_std),
                                              "TPOT (ms)": lambda r: pm(r.tpot_ms, r.tpot_ms_std, "{:.2f}")})


def table3(df):
    return per_dataset(replicate(role(df)), {
        "Accept.": lambda r: dash(r.accept_rate, "{:.1%}") if r.method != registry.AR else "–",
        "L̄": lambda r: f"{r.L_bar:.2f}", "ℓ̄": lambda r: dash(r.ell_bar, "{:.2f}") if r.method != registry.AR else "–",
        "#Iter.": lambda r: f"{r.iterations:.0f}"})


def table5(df):
    """Memory of one generation (a fresh process per cell): its footprint above the bare runtime (the models the
    method loads, their caches and the generation's tensors; what Table 5 compares) per workload, the part the
    generation itself adds, and the footprint against AR's."""
    t = {}
    ar = df[df.method == registry.AR]
    for row, sub in order(df).groupby("row", sort=False):
        cols = {f"{workload_label(d)} footprint (MB)": f"{sub[sub.dataset == d].footprint_mb.mean():.1f}"
                for d in present(sub.dataset)}
        cols |= {"generation's own (MB)": f"{sub.above_start_mb.mean():.1f}",
                 "footprint vs AR": f"{sub.footprint_mb.mean() / ar.footprint_mb.mean() - 1:+.2%}"}
        t[row] = cols
    return shown(pd.DataFrame(t).T, df)


def table4(df):
    """The ablation's steps: throughput, Δ against the fixed tree D=5, B=2 and the counts in replicate 1, and the
    speedup over AR with its 95% interval in each replicate."""
    first = replicate(df, int(df.replicate.min()))
    base = first[first.tag_step == 0].tps.iloc[0]
    sub = first[first.method != registry.AR].sort_values("tag_step")
    out = pd.DataFrame({"Variant": sub.label,
                        "Throughput (tok/s)": [pm(a, b) for a, b in zip(sub.tps, sub.tps_std)]})
    for r in sorted(df.replicate.unique()):
        by_step = replicate(df, r).set_index("tag_step")
        out[f"Speedup r{r + 1} [95% CI]"] = [speedup_ci(by_step.loc[s]) if s in by_step.index else "–"
                                             for s in sub.tag_step]
    out = out.assign(**{"Δ vs Fixed (D=5, B=2)": [f"{t / base - 1:+.1%}" for t in sub.tps],
                        "L̄": [f"{x:.2f}" for x in sub.L_bar], "#Iter.": [f"{x:.0f}" for x in sub.iterations],
                        "= AR": [f"{a}/{n}" for a, n in zip(sub.equals_ar, sub.n)]})
    return out.set_index("Variant")


def _speedup_over(rows: list[dict], ar_rows: list[dict]) -> float:
    return paired_ratio({r["prompt_id"]: r["tps"] for r in rows}, {r["prompt_id"]: r["tps"] for r in ar_rows})


def categorized() -> list[str]:
    """The workloads whose prompts carry a category."""
    return [n for n, w in WORKLOADS.items() if w.per_category]


def spec_bench_table(df, temperature: float = 0.0) -> pd.DataFrame:
    """Each category's form (Spec-Bench's), per category and overall, on the workloads with categories (replicate
    1, draft with its lookup): mean tokens per verification (τ = L̄, the bonus token included) and speedup over AR
    on the same questions."""
    sub = replicate(role(df))
    sub = sub[sub.dataset.isin(categorized()) & (sub.temperature == temperature) & sub.lookup]
    if sub.empty:
        return pd.DataFrame()
    ar = sub[sub.method == registry.AR].iloc[0].rows
    out = {}
    for _, r in order(sub).iterrows():
        row = {}
        for cat, name in CATEGORY_LABELS.items():
            rows = [x for x in r.rows if x.get("category") == cat]
            if rows:
                tau = sum(x["tokens"] for x in rows) / sum(x["iterations"] for x in rows)
                row[(name, "τ")] = f"{tau:.2f}"
                row[(name, "speedup")] = "–" if r.method == registry.AR else f"{_speedup_over(rows, ar):.2f}×"
        row[("Overall", "τ")] = f"{r.L_bar:.2f}"
        row[("Overall", "speedup")] = "–" if r.method == registry.AR else f"{r.speedup:.2f}×"
        out[r.row] = row
    t = shown(pd.DataFrame(out).T, sub)
    t.columns = pd.MultiIndex.from_tuples(t.columns)
    return t


def controls_table(df) -> pd.DataFrame:
    """Each drafting method with its draft network alone and with the network plus the context lookup
    (replicate 1): speedups, and the share of the speedup the lookup adds."""
    sub = replicate(role(df))
    rows = []
    for ds in present(sub.dataset):
        w = sub[sub.dataset == ds]
        for _, alone in order(w[~w.lookup]).iterrows():
            main = w[(w.row == row_id(alone.method, MAIN)) & w.lookup]
            if main.empty:
                continue
            m = main.iloc[0]
            rows.append({"Workload": workload_label(ds), "Method": m.label, "network alone": f"{alone.speedup:.2f}×",
                         "network + lookup": f"{m.speedup:.2f}×",
                         "lookup's share of the gain": "–" if m.speedup <= 1 else
                         f"{(m.speedup - max(alone.speedup, 1)) / (m.speedup - 1):.0%}"})
    return pd.DataFrame(rows).set_index(["Workload", "Method"]) if rows else pd.DataFrame()


def draft_change_table(now: pd.DataFrame, before: pd.DataFrame, names: tuple[str, str]) -> pd.DataFrame:
    """What a new draft changed in the main run: each drafting method of ours in both runs (``before``: the
    earlier draft's records, ``now``: the current one's; ``names`` their versions), with the network alone and with its
    lookup, per workload: speedup over AR in each replicate, tokens per verification and drafting time per iteration
    (replicate 1). Each speedup is paired with AR inside its own run; the two runs are different sessions, so the table
    compares
    paired ratios, it is not a paired test of one draft against the other."""
    def drafting(df):
        t = role(df)
        return order(t[(t.impl == "ours") & (t.method != registry.AR)])

    runs = {name: {(r.dataset, r.row, r.replicate): r for _, r in drafting(df).iterrows()}
            for name, df in zip(names, (before, now))}
    ours = drafting(now)
    reps = sorted(ours.replicate.unique())
    rows = []
    for ds in workload_labels():
        for key, lab in ours[ours.dataset == ds].drop_duplicates("row")[["row", "label"]].itertuples(index=False):
            first = {name: c.get((ds, key, 0)) for name, c in runs.items()}
            if any(r is None for r in first.values()):
                continue
            row = {"Workload": workload_label(ds), "Method": lab}
            speedup = lambda r: "–" if r is None else f"{r.speedup:.2f}×"
            row |= {f"{name} speedup r{rep + 1}": speedup(c.get((ds, key, rep)))
                    for name, c in runs.items() for rep in reps}
            row |= {f"{name} L̄": f"{r.L_bar:.2f}" for name, r in first.items()}
            row |= {f"{name} draft ms/iter": f"{1e3 * r.draft_s / r.iterations:.2f}" for name, r in first.items()}
            rows.append(row)
    return pd.DataFrame(rows).set_index(["Workload", "Method"]) if rows else pd.DataFrame()


def loop_table(df) -> pd.DataFrame:
    """How much of each continuation's output copies earlier text (AR rows: the share of positions whose
    preceding 12-gram occurred earlier, and how many outputs end in an exactly periodic tail), and each method's
    speedup on the prompts whose AR output loops and on the others (replicate 1)."""
    sub = replicate(role(df))
    rows = []
    for ds in [d for d in continuations() if d in set(sub.dataset)]:
        w = sub[sub.dataset == ds]
        ar = w[w.method == registry.AR].iloc[0]
        looping = {x["prompt_id"] for x in ar.rows if x.get("periodic_tail")}
        ar_tps = {x["prompt_id"]: x["tps"] for x in ar.rows}
        for _, r in order(w[w.method != registry.AR]).iterrows():
            tps = {x["prompt_id"]: x["tps"] for x in r.rows}
            loop = {k: v for k, v in tps.items() if k in looping}
            rest = {k: v for k, v in tps.items() if k not in looping}
            rows.append({"Workload": workload_label(ds), "Method": r.label,
                         "AR loop share": f"{ar.loop_share:.0%}", "periodic outputs": f"{len(looping)}/{ar.n}",
                         "speedup, looping prompts": dash(paired_ratio(loop, ar_tps), "{:.2f}×"),
                         "speedup, other prompts": dash(paired_ratio(rest, ar_tps), "{:.2f}×")})
    return pd.DataFrame(rows).set_index(["Workload", "Method"]) if rows else pd.DataFrame()


def ar_loops(df) -> pd.DataFrame:
    """AR's outputs per workload (and temperature): the share of positions whose preceding 12-gram occurred
    earlier (what a context lookup can copy) and how many outputs end in an exactly periodic tail (replicate 1)."""
    ar = replicate(role(df))
    ar = ar[ar.method == registry.AR]
    rows = [{"Workload": workload_label(ds), "T": f"{r.temperature:g}", "AR loop share": f"{r.loop_share:.1%}",
             "periodic outputs": f"{sum(bool(x.get('periodic_tail')) for x in r.rows)}/{r.n}"}
            for ds in workload_labels() for _, r in ar[ar.dataset == ds].iterrows()]
    return pd.DataFrame(rows).set_index(["Workload", "T"]) if rows else pd.DataFrame()


def hf_table(df) -> pd.DataFrame:
    """transformers' own engine: HF assisted generation over HF's AR (the algorithm) and over ours (algorithm and
    engine together), and HF's AR over ours (the engine alone), per workload (replicate 1)."""
    sub = replicate(role(df))
    on_hf = [n for n, m in registry.REGISTRY.items() if m.impl == "transformers"]
    rows = []
    for ds in present(sub.dataset):
        w = sub[sub.dataset == ds]
        for name in on_hf:
            r = w[w.method == name]
            if not r.empty:
                r = r.iloc[0]
                rows.append({"Workload": workload_label(ds), "Method": r.label, "tok/s": pm(r.tps, r.tps_std),
                             "over HF AR": dash(r.speedup_own, "{:.2f}×"), "over our AR": f"{r.speedup:.2f}×"})
    return pd.DataFrame(rows).set_index(["Workload", "Method"]) if rows else pd.DataFrame()


def peers_table(df, r: int = 0) -> pd.DataFrame:
    """Notebook 12: every method of the peers run per workload (replicate ``r``): throughput, speedup over our AR
    with its 95% paired interval, over llama.cpp's own BF16 AR, mean tokens per verification, and agreement with
    our AR's tokens (llama.cpp's arithmetic is its own: agreement is measured, not expected)."""
    return per_dataset(replicate(df, r), {
        "tok/s": lambda r: pm(r.tps, r.tps_std), "over our AR [95% CI]": speedup_ci,
        "over llama.cpp AR": lambda r: dash(r.speedup_own, "{:.2f}×"), "L̄": lambda r: f"{r.L_bar:.2f}",
        "= our AR": agreement})


def best_pairs(df) -> list[dict]:
    """Per workload and replicate, our fastest method (``ours``, a row) against llama.cpp's fastest mode
    (``peer``) on the same prompts: ``paired``'s ratio, interval and prompt count."""
    out = []
    for ds in present(df.dataset):
        for rep, w in df[df.dataset == ds].groupby("replicate"):
            ours, peers = w[(w.impl == "ours") & (w.method != registry.AR)], w[w.impl == "llama.cpp"]
            if ours.empty or peers.empty:
                continue
            a, b = ours.loc[ours.tps.idxmax()], peers.loc[peers.tps.idxmax()]
            ratio, lo, hi, n = paired(a.tps_by_prompt, b.tps_by_prompt)
            out.append({"dataset": ds, "replicate": int(rep), "ours": a, "peer": b, "ratio": ratio, "lo": lo,
                        "hi": hi, "prompts": n})
    return out


def best_vs_peer(df) -> pd.DataFrame:
    """``best_pairs`` as a table (an interval containing 1 is no measured difference)."""
    rows = [{"Workload": workload_label(p["dataset"]), "replicate": p["replicate"] + 1, "ours": p["ours"].label,
             "llama.cpp": p["peer"].label, "throughput ratio": f"{p['ratio']:.2f}",
             "95% CI": f"[{p['lo']:.2f}, {p['hi']:.2f}]", "prompts": p["prompts"]} for p in best_pairs(df)]
    return pd.DataFrame(rows).set_index(["Workload", "replicate"]) if rows else pd.DataFrame()


def sampling_table(df) -> pd.DataFrame:
    """TALON's Table 3 form: per temperature and workload, mean tokens per verification (τ, replicate 1) and the
    speedup over AR sampling at the same temperature on the same prompts with its 95% interval in each
    replicate."""
    out = {}
    for t, ds in [(t, ds) for t in sorted(set(df.temperature)) for ds in workload_labels()]:
        for _, r in order(df[(df.temperature == t) & (df.dataset == ds)]).iterrows():
            col = lambda name: (f"T = {t:g}", workload_label(ds), name)  # noqa: E731
            if r.replicate == 0:
                out.setdefault(r.row, {})[col("τ")] = f"{r.L_bar:.2f}"
            out.setdefault(r.row, {})[col(f"speedup r{r.replicate + 1}")] = \
                "–" if r.method == registry.AR else speedup_ci(r)
    t = shown(pd.DataFrame(out).T, df).fillna("–")
    t.columns = pd.MultiIndex.from_tuples(t.columns)
    return t


def reported_vs_reproduced_main(df: pd.DataFrame) -> pd.DataFrame:
    """Speedup and verification numbers: the paper (Pythia-2.8B/70M, A100) beside ours (this profile), on the
    workloads the paper reports."""
    rep = reported()
    rows = []
    df = replicate(role(df))
    df = df[df.lookup]
    shown_rows = [(m, MAIN) for m in registry.names("paper")] + [(registry.DYNATREE, PAPER_SETTINGS)]
    for ds in [d for d in rep["table1_throughput_tokens_per_s"] if d in set(df.dataset)]:
        for m, variant in shown_rows:
            ours = df[(df.dataset == ds) & (df.row == row_id(m, variant))]
            if ours.empty:
                continue
            o = ours.iloc[0]
            key = registry.REGISTRY[m].study.reported
            p1 = rep["table1_throughput_tokens_per_s"][ds][key]
            p3 = rep["table3_verification_efficiency"][ds][key]
            rows.append({"Dataset": workload_label(ds), "Method": o.label,
                         "Speedup (paper)": f"{p1['speedup']:.2f}×", "Speedup (ours)": f"{o.speedup:.2f}×",
                         "L̄ (paper)": f"{p3['L_bar']:.2f}", "L̄ (ours)": f"{o.L_bar:.2f}",
                         "Accept. (paper)": "–" if p3["accept"] is None else f"{p3['accept']:.1%}",
                         "Accept. (ours)": "–" if m == registry.AR else f"{o.accept_rate:.1%}"})
    return pd.DataFrame(rows).set_index(["Dataset", "Method"])


def reported_vs_reproduced_v1(df: pd.DataFrame, dataset: str | None = None) -> pd.DataFrame:
    """The earlier paper version's Table 1 (one prompt, 500 tokens, with HF assisted generation and
    StreamingLLM + spec) beside our speedups for the same methods (``Study.reported_v1``) on ``dataset`` (default:
    the first workload): over our AR, and for HF assisted also over HF's own AR (the paper's 1.36x is HF assisted
    over HF's AR on one engine)."""
    dataset = dataset or next(iter(workload_labels()))
    rep = reported()["earlier_version_500_tokens"]["table1"]
    of_key = {m.study.reported_v1: n for n, m in registry.REGISTRY.items() if m.study.reported_v1}
    rows = []
    df = replicate(role(df))
    for rk in [k for k in rep if k in of_key]:
        m = of_key[rk]
        ours = df[(df.dataset == dataset) & (df.row == row_id(m, MAIN))]
        o = None if ours.empty else ours.iloc[0]
        rows.append({"Method": registry.REGISTRY[m].display.label, "Speedup (paper v1)": f"{rep[rk]['speedup']:.2f}×",
                     "Speedup (ours, over our AR)": "–" if o is None else f"{o.speedup:.2f}×",
                     "Speedup (ours, over HF AR)": "–" if o is None else dash(o.speedup_own, "{:.2f}×"),
                     "Agreement with AR (ours)": "–" if o is None or pd.isna(o.get("ar_agreement"))
                     else f"{o.ar_agreement:.1%}"})
    return pd.DataFrame(rows).set_index("Method")


def tuning_table(df: pd.DataFrame) -> pd.DataFrame:
    """Every tuning candidate (equal budget per family) with its throughput, greedy and sampled; the chosen one
    marked."""
    rows = []
    for (t, ds, _), g in df.groupby(["temperature", "dataset", "row"], sort=False):  # a head of its own: a row
        best = g.tps.idxmax()
        for i, r in g.iterrows():
            rows.append({"T": "greedy" if t == 0 else f"{t:g}", "Workload": workload_label(ds), "Candidate": r.label,
                         "tok/s": pm(r.tps, r.tps_std), "Speedup": f"{r.speedup:.2f}×", "L̄": f"{r.L_bar:.2f}",
                         "nodes/iter": f"{r.draft_nodes_per_iter:.1f}", "chosen": "✓" if i == best and r.method != registry.AR else ""})
    return pd.DataFrame(rows).set_index(["T", "Workload", "Candidate"])


def heads_table(df) -> pd.DataFrame:
    """Notebook 13, TALON's Table 3 form for a feature head: per temperature and workload, tokens per verification
    (τ) and draft forwards per verification (δ) in replicate 1, and the speedup over AR at that temperature on the
    same prompts with its 95% interval in each replicate; greedy, the prompts whose output equals AR's. A control
    measured only greedy shows "–" at the other temperatures."""
    out: dict = {}
    for t in sorted(set(df.temperature)):
        for ds in present(df.dataset):
            for _, r in order(df[(df.temperature == t) & (df.dataset == ds)]).iterrows():
                col = lambda name: (f"T = {t:g}", workload_label(ds), name)  # noqa: E731
                cells, ar = out.setdefault(r.row, {}), r.method == registry.AR
                if r.replicate == 0:
                    cells[col("τ")] = f"{r.L_bar:.2f}"
                    cells[col("δ")] = "–" if ar else f"{r.draft_forwards_per_iter:.2f}"
                cells[col(f"speedup r{r.replicate + 1}")] = "–" if ar else speedup_ci(r)
                if t == 0 and r.replicate == 0:
                    cells[col("= AR")] = agreement(r)
    table = shown(pd.DataFrame(out).T, df).fillna("–")
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    return table
