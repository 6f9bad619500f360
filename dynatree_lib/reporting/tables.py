"""Tables from logged JSON only: load records, recompute speedups, format, save Markdown + LaTeX.

Also the "reported (paper) vs reproduced (ours)" tables, from the repository's ``data/paper_reported.json``.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import torch

from .. import methods as registry
from ..harness.data import REPO_DATA
from ..harness.experiments import ALONE, EXPERIMENTS, PAPER_DYNATREE, cell_key, label
from ..harness.metrics import TIE_GAP
from ..harness.weights import weights_info

DATASET_LABELS = {"wikitext2": "WikiText-2", "pg19": "PG-19", "spec_bench": "Spec-Bench",
                  "continuations": "Continuations (WikiText-2 + PG-19)"}
CATEGORY_LABELS = {"multi-turn": "Multi-turn conv.", "translation": "Translation", "summarization": "Summarization",
                   "qa": "QA", "math_reasoning": "Math reasoning", "rag": "RAG"}


def records(path: str | Path, profile=None, verbose: bool = True) -> list[dict]:
    """The records of an experiment file that belong to ``profile``'s current cells (all if None).

    A file can hold runs of other settings (fewer prompts, another precision); those are skipped, and
    said so, so a table never mixes two runs of one cell."""
    recs = json.loads(Path(path).read_text())["records"]
    if profile is None:
        return recs
    name = Path(path).stem
    want = {cell_key(name, profile, c) for c in EXPERIMENTS[name](profile, Path(path).parents[1])}
    keep = [r for r in recs if r["key"] in want]
    if verbose and len(keep) < len(recs):
        print(f"{Path(path).name}: skipped {len(recs) - len(keep)} record(s) of other settings "
              f"(kept the {len(keep)} of profile {profile.name!r})")
    if verbose:
        say_other_drafts(Path(path).name, keep, weights_info(profile.models.draft))
    return keep


def say_other_drafts(name: str, recs: list[dict], draft: dict) -> None:
    """Say which records were measured with another draft than the one the profile loads now (a rebuilt draft):
    the cell is the same, the numbers are the earlier draft's until the experiment is rerun."""
    other = {}
    for r in recs:
        w = r.get("weights", {}).get("draft")
        if w is not None and w != draft:
            other.setdefault(w.get("sha256", str(w))[:12], []).append(r)
    for sha, rs in other.items():
        print(f"{name}: {len(rs)} record(s) were measured with an earlier draft (sha256 {sha}...), not the one the "
              f"profile loads now ({str(draft.get('sha256', draft))[:12]}...); `--rerun` measures them again")


def load(path: str | Path, profile=None) -> pd.DataFrame:
    """One row per record: identifiers, tags, ``<metric>`` / ``<metric>_std`` means, equality counts, the
    per-prompt rows (``rows``), and the speedups (``add_speedup``)."""
    rows = []
    for r in records(path, profile):
        m = registry.REGISTRY.get(r["method"])
        row = {"dataset": r["dataset"], "method": r["method"], "label": r.get("label", r["method"]), "T": r["T"],
               "L_max": r["L_max"], "dtype": r.get("dtype"), "n": r["aggregate"]["n"],
               "equals_ar": r["aggregate"]["equals_ar"], "config": r["config"],
               "temperature": r.get("temperature", 0.0), "lookup": r.get("lookup", True),
               "replicate": r.get("tags", {}).get("replicate", 0), "engine": m.engine if m else "ours",
               "max_divergence_gap": r["aggregate"].get("max_divergence_gap"),
               "bound_ms": bound_ms(r), "bound_ratios": bound_ratios(r), "rows": r["rows"],
               "tps_by_prompt": {row["prompt_id"]: row["tps"] for row in r["rows"] if "tps" in row},
               **{f"tag_{k}": (tuple(v) if isinstance(v, list) else v) for k, v in r.get("tags", {}).items()}}
        for k, v in r["aggregate"].items():
            if isinstance(v, dict):
                row[k], row[f"{k}_std"] = v["mean"], v["std"]
        rows.append(row)
    return add_speedup(pd.DataFrame(rows))


def bound_ms(record: dict) -> float | None:
    """A record's bandwidth bound (ms per token): weight bytes over the read bandwidth probed after each of
    its generations (AR records), else over the probe taken when the models were loaded."""
    b = record.get("bound") or {}
    bw = record["aggregate"].get("read_bandwidth_gbs", {}).get("mean")
    if bw is None or "weight_bytes" not in b:
        return b.get("ms_per_token")
    return b["weight_bytes"] / bw / 1e6


def bound_ratios(record: dict) -> list[float] | None:
    """Each AR generation's TPOT over the bound from the probe taken right after it (None where the rows carry
    no probes). A VM's read bandwidth can flip between phases within seconds, so a record's mean probe can
    describe no moment of the run; a generation and its own probe are the closer pair."""
    wb = (record.get("bound") or {}).get("weight_bytes")
    rows = record["rows"]
    if not wb or not rows or any(not r.get("read_bandwidth_gbs") for r in rows):
        return None
    return [r["tpot_ms"] / (wb / r["read_bandwidth_gbs"] / 1e6) for r in rows]


BOOTSTRAP = 2000  # resamples of the prompts for a confidence interval (seeded: tables are deterministic)


def ratio_ci(a: dict, b: dict, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(a) / mean(b) over the prompts both measured (``{prompt id:
    tps}``), resampling prompts in pairs: a prompt that is slow for one method is slow for the other, so the
    pairing keeps the prompts' spread out of the ratio. (nan, nan) with fewer than 2 common prompts."""
    ids = sorted(set(a) & set(b))
    if len(ids) < 2:
        return float("nan"), float("nan")
    x, y = torch.tensor([a[i] for i in ids]), torch.tensor([b[i] for i in ids])
    pick = torch.randint(len(ids), (BOOTSTRAP, len(ids)), generator=torch.Generator().manual_seed(seed))
    r = x[pick].mean(1) / y[pick].mean(1)
    lo, hi = r.quantile(torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=r.dtype)).tolist()
    return lo, hi


def paired_ratio(a: dict, b: dict) -> float:
    """mean(a) / mean(b) over the prompts both measured."""
    ids = set(a) & set(b)
    if not ids:
        return float("nan")
    return statistics.fmean(a[i] for i in ids) / statistics.fmean(b[i] for i in ids)


AR_KEY = ["dataset", "T", "L_max", "dtype", "temperature", "replicate"]


def paired(a: dict, b: dict) -> tuple[float, float, float, int]:
    """``paired_ratio`` of two ``{prompt id: tps}``, its ``ratio_ci`` and how many prompts both measured."""
    return (paired_ratio(a, b), *ratio_ci(a, b), len(set(a) & set(b)))


def add_speedup(df: pd.DataFrame) -> pd.DataFrame:
    """speedup = mean TPS / mean TPS of AR over the same prompts (same file, workload, T, L_max, precision,
    temperature and replicate; never taken from a log), with its 95% paired bootstrap interval over prompts
    (``speedup_lo``, ``speedup_hi``); rows of another engine also ``speedup_own`` over that engine's AR (a method
    registered as ``engine_ar``: HF's AR; or the row tagged ``own_ar``: llama.cpp's)."""
    df = df.copy()
    if df.empty:
        return df
    keys = list(df[AR_KEY].itertuples(index=False, name=None))
    ar = {k: t for k, t, m in zip(keys, df.tps_by_prompt, df.method) if m == "ar"}
    own_ar = df.method.isin(registry.engine_ars()) | df.get("tag_own_ar", pd.Series(False, index=df.index)).fillna(False).astype(bool)
    own = {(e, k): t for k, t, e, o in zip(keys, df.tps_by_prompt, df.engine, own_ar) if o}
    df["speedup"] = [paired_ratio(t, ar[k]) if k in ar else float("nan") for t, k in zip(df.tps_by_prompt, keys)]
    ci = [ratio_ci(t, ar[k]) if k in ar else (float("nan"),) * 2 for t, k in zip(df.tps_by_prompt, keys)]
    df["speedup_lo"], df["speedup_hi"] = [c[0] for c in ci], [c[1] for c in ci]
    df["speedup_own"] = [paired_ratio(t, own[(e, k)]) if e != "ours" and (e, k) in own else float("nan")
                         for t, k, e in zip(df.tps_by_prompt, keys, df.engine)]
    return df


def paired_vs_best(df: pd.DataFrame, methods=("dynatree", "dynatree_cost")) -> pd.DataFrame:
    """Each DynaTree row of the timed run (draft with its lookup) against the fastest method outside the
    DynaTree family on the same workload, per replicate: the ratio of their throughputs with its 95% paired
    bootstrap interval over prompts (an interval that contains 1 is no measured difference)."""
    rows = []
    timed = role(df)
    timed = timed[timed.lookup & (timed.engine == "ours")]
    for ds in [d for d in DATASET_LABELS if d in set(timed.dataset)]:
        for rep, sub in timed[timed.dataset == ds].groupby("replicate"):
            others = sub[~sub.method.isin(("ar", "dynatree", "dynatree_cost"))]
            if others.empty:
                continue
            best = others.loc[others.tps.idxmax()]
            for _, r in order(sub[sub.method.isin(methods)]).iterrows():
                ratio, lo, hi, n = paired(r.tps_by_prompt, best.tps_by_prompt)
                rows.append({"Workload": DATASET_LABELS[ds], "Method": r.label, "replicate": int(rep) + 1,
                             "vs": best.label, "throughput ratio": f"{ratio:.3f}", "95% CI": f"[{lo:.3f}, {hi:.3f}]",
                             "prompts": n})
    return pd.DataFrame(rows).set_index(["Workload", "Method", "replicate"]) if rows else pd.DataFrame()


def pm(mean: float, std: float, fmt: str = "{:.1f}") -> str:
    if pd.isna(mean):
        return "–"
    return f"{fmt.format(mean)} ± {fmt.format(std)}"


def order(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in the registry's method order (DynaTree with the paper's settings right after DynaTree, a control
    row right after its method)."""
    rank = {m: i for i, m in enumerate(registry.REGISTRY)}
    r = [rank.get(m, 99) + (0.5 if lab == PAPER_DYNATREE else 0) + (0.25 if not lk else 0)
         for m, lab, lk in zip(df.method, df.label, df.get("lookup", pd.Series(True, index=df.index)))]
    return df.assign(_r=r).sort_values(["_r"], kind="stable").drop(columns="_r")


def _per_dataset(df: pd.DataFrame, cols: dict) -> pd.DataFrame:
    """Methods as rows, (workload, column) pairs as columns; ``cols`` maps a header to a row formatter."""
    out = {}
    for ds in [d for d in DATASET_LABELS if d in set(df.dataset)]:
        sub = order(df[df.dataset == ds]).drop_duplicates("label").set_index("label")
        for name, f in cols.items():
            out[(DATASET_LABELS[ds], name)] = {lab: f(r) for lab, r in sub.iterrows()}
    t = pd.DataFrame(out)
    t.index.name = "Method"
    return t


def role(df: pd.DataFrame, name: str = "timed") -> pd.DataFrame:
    """The records of one role of the main run: "timed" (the timed precision) or "exact" (fp32)."""
    return df[df.get("tag_role", pd.Series("timed", index=df.index)).fillna("timed") == name]


def replicate(df: pd.DataFrame, r: int = 0) -> pd.DataFrame:
    return df[df.replicate == r]


def exactness_failures(df: pd.DataFrame) -> pd.DataFrame:
    """fp32 rows of exact decoders that left AR's tokens anywhere but at a numerical near-tie (a target
    top-1/top-2 logit gap of at most ``TIE_GAP`` where they diverged): these would be decoder bugs."""
    exact = df[(df.dtype == "float32") & ~df.method.isin(["ar", "streaming_spec"])]
    gap = exact.max_divergence_gap.astype(float)
    return exact[(exact.equals_ar < exact.n) & ~(gap <= TIE_GAP)]


def _agree(r) -> str:
    """Prompts whose output equals AR's, and where the others first diverged (mean token index)."""
    if r.method == "ar":
        return "–"
    s = f"{r.equals_ar}/{r.n}"
    if r.equals_ar < r.n and not pd.isna(r.get("first_divergence")):
        s += f" (div. @{r.first_divergence:.0f}"
        s += f", gap {r.max_divergence_gap:.0e})" if not pd.isna(r.get("max_divergence_gap")) else ")"
    return s


def _speedup_ci(r) -> str:
    if r.method == "ar" or pd.isna(r.speedup):
        return "–"
    ci = "" if pd.isna(r.speedup_lo) else f" [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}]"
    return f"{r.speedup:.2f}×{ci}"


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
    for ds in [d for d in DATASET_LABELS if d in set(timed.dataset)]:
        sub = {r: order(timed[(timed.dataset == ds) & (timed.replicate == r)]).set_index("label") for r in reps}
        first = sub[reps[0]]
        out[(DATASET_LABELS[ds], "tok/s")] = {lab: pm(x.tps, x.tps_std) for lab, x in first.iterrows()}
        for r in reps:
            out[(DATASET_LABELS[ds], f"speedup r{r + 1} [95% CI]")] = {lab: _speedup_ci(x) for lab, x in sub[r].iterrows()}
        if len(reps) > 1:
            out[(DATASET_LABELS[ds], "replicates agree")] = {
                lab: "–" if x.method == "ar" or lab not in sub[reps[1]].index
                else ("yes" if replicates_agree(x, sub[reps[1]].loc[lab]) else "**no**") for lab, x in first.iterrows()}
        out[(DATASET_LABELS[ds], "= AR")] = {lab: _agree(x) for lab, x in first.iterrows()}
    t = pd.DataFrame(out)
    t.index.name = "Method"
    return t


def table1_exact(df):
    """The exactness run (fp32): every exact method must equal AR on every prompt."""
    return _per_dataset(role(df, "exact"), {"= AR": _agree, "Speedup": lambda r: f"{r.speedup:.2f}×"})


def table2(df):
    return _per_dataset(replicate(role(df)), {"TTFT (ms)": lambda r: pm(r.ttft_ms, r.ttft_ms_std),
                                              "TPOT (ms)": lambda r: pm(r.tpot_ms, r.tpot_ms_std, "{:.2f}")})


def _dash(x, fmt):
    return "–" if pd.isna(x) else fmt.format(x)


def table3(df):
    return _per_dataset(replicate(role(df)), {
        "Accept.": lambda r: _dash(r.accept_rate, "{:.1%}") if r.method != "ar" else "–",
        "L̄": lambda r: f"{r.L_bar:.2f}", "ℓ̄": lambda r: _dash(r.ell_bar, "{:.2f}") if r.method != "ar" else "–",
        "#Iter.": lambda r: f"{r.iterations:.0f}"})


def table5(df):
    """Memory of one generation (a fresh process per cell): its footprint above the bare runtime (the models the
    method loads, their caches and the generation's tensors; what Table 5 compares) per workload, the part the
    generation itself adds, and the footprint against AR's."""
    t = {}
    ar = df[df.method == "ar"]
    for lab, sub in order(df).groupby("label", sort=False):
        row = {f"{DATASET_LABELS[d]} footprint (MB)": f"{sub[sub.dataset == d].footprint_mb.mean():.1f}"
               for d in DATASET_LABELS if d in set(sub.dataset)}
        row |= {"generation's own (MB)": f"{sub.above_start_mb.mean():.1f}",
                "footprint vs AR": f"{sub.footprint_mb.mean() / ar.footprint_mb.mean() - 1:+.2%}"}
        t[lab] = row
    out = pd.DataFrame(t).T
    out.index.name = "Method"
    return out


def table4(df):
    base = df[df.tag_step == 0].tps.iloc[0]
    sub = df[df.method != "ar"].sort_values("tag_step")
    out = pd.DataFrame({"Variant": sub.label,
                        "Throughput (tok/s)": [pm(a, b) for a, b in zip(sub.tps, sub.tps_std)],
                        "Speedup": [f"{s:.2f}×" for s in sub.speedup],
                        "Δ vs Fixed (D=5, B=2)": [f"{t / base - 1:+.1%}" for t in sub.tps],
                        "L̄": [f"{x:.2f}" for x in sub.L_bar], "#Iter.": [f"{x:.0f}" for x in sub.iterations],
                        "= AR": [f"{a}/{n}" for a, n in zip(sub.equals_ar, sub.n)]}).set_index("Variant")
    return out


def _speedup_over(rows: list[dict], ar_rows: list[dict]) -> float:
    return paired_ratio({r["prompt_id"]: r["tps"] for r in rows}, {r["prompt_id"]: r["tps"] for r in ar_rows})


def spec_bench_table(df, temperature: float = 0.0) -> pd.DataFrame:
    """Spec-Bench's form, per category and overall (replicate 1, draft with its lookup): mean tokens per
    verification (τ = L̄, the bonus token included) and speedup over AR on the same questions."""
    sub = replicate(role(df))
    sub = sub[(sub.dataset == "spec_bench") & (sub.temperature == temperature) & sub.lookup]
    if sub.empty:
        return pd.DataFrame()
    ar = sub[sub.method == "ar"].iloc[0].rows
    out = {}
    for _, r in order(sub).iterrows():
        row = {}
        for cat, name in CATEGORY_LABELS.items():
            rows = [x for x in r.rows if x.get("category") == cat]
            if rows:
                tau = sum(x["tokens"] for x in rows) / sum(x["iterations"] for x in rows)
                row[(name, "τ")] = f"{tau:.2f}"
                row[(name, "speedup")] = "–" if r.method == "ar" else f"{_speedup_over(rows, ar):.2f}×"
        row[("Overall", "τ")] = f"{r.L_bar:.2f}"
        row[("Overall", "speedup")] = "–" if r.method == "ar" else f"{r.speedup:.2f}×"
        out[r.label] = row
    t = pd.DataFrame(out).T
    t.columns = pd.MultiIndex.from_tuples(t.columns)
    t.index.name = "Method"
    return t


def controls_table(df) -> pd.DataFrame:
    """Each drafting method with its draft network alone and with the network plus the context lookup
    (replicate 1): speedups, and the share of the speedup the lookup adds."""
    sub = replicate(role(df))
    rows = []
    for ds in [d for d in DATASET_LABELS if d in set(sub.dataset)]:
        w = sub[sub.dataset == ds]
        for _, alone in order(w[~w.lookup]).iterrows():
            main = w[(w.method == alone.method) & w.lookup & (w.label == alone.label.replace(ALONE, ""))]
            if main.empty:
                continue
            m = main.iloc[0]
            rows.append({"Workload": DATASET_LABELS[ds], "Method": m.label, "network alone": f"{alone.speedup:.2f}×",
                         "network + lookup": f"{m.speedup:.2f}×",
                         "lookup's share of the gain": "–" if m.speedup <= 1 else
                         f"{(m.speedup - max(alone.speedup, 1)) / (m.speedup - 1):.0%}"})
    return pd.DataFrame(rows).set_index(["Workload", "Method"]) if rows else pd.DataFrame()


def draft_change_table(now: pd.DataFrame, before: pd.DataFrame, names: tuple[str, str]) -> pd.DataFrame:
    """What a new draft changed in the main run: each drafting method of ours in both runs (``before``: the
    earlier draft's records, ``now``: the current one's; ``names`` their versions), with the network alone and
    with its lookup, per workload: speedup over AR in each replicate, tokens per verification and drafting time
    per iteration (replicate 1).
    Each speedup is paired with AR inside its own run; the two runs are different sessions, so the table compares
    paired ratios, it is not a paired test of one draft against the other."""
    def drafting(df):
        t = role(df)
        return order(t[(t.engine == "ours") & (t.method != "ar")])

    runs = {name: {(r.dataset, r.label, r.replicate): r for _, r in drafting(df).iterrows()}
            for name, df in zip(names, (before, now))}
    ours = drafting(now)
    reps = sorted(ours.replicate.unique())
    rows = []
    for ds in DATASET_LABELS:
        for lab in ours[ours.dataset == ds].label.drop_duplicates():
            first = {name: c.get((ds, lab, 0)) for name, c in runs.items()}
            if any(r is None for r in first.values()):
                continue
            row = {"Workload": DATASET_LABELS[ds], "Method": lab}
            speedup = lambda r: "–" if r is None else f"{r.speedup:.2f}×"
            row |= {f"{name} speedup r{rep + 1}": speedup(c.get((ds, lab, rep)))
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
    for ds in [d for d in ("wikitext2", "pg19") if d in set(sub.dataset)]:
        w = sub[sub.dataset == ds]
        ar = w[w.method == "ar"].iloc[0]
        looping = {x["prompt_id"] for x in ar.rows if x.get("periodic_tail")}
        ar_tps = {x["prompt_id"]: x["tps"] for x in ar.rows}
        for _, r in order(w[w.method != "ar"]).iterrows():
            tps = {x["prompt_id"]: x["tps"] for x in r.rows}
            loop = {k: v for k, v in tps.items() if k in looping}
            rest = {k: v for k, v in tps.items() if k not in looping}
            rows.append({"Workload": DATASET_LABELS[ds], "Method": r.label,
                         "AR loop share": f"{ar.loop_share:.0%}", "periodic outputs": f"{len(looping)}/{ar.n}",
                         "speedup, looping prompts": _dash(paired_ratio(loop, ar_tps), "{:.2f}×"),
                         "speedup, other prompts": _dash(paired_ratio(rest, ar_tps), "{:.2f}×")})
    return pd.DataFrame(rows).set_index(["Workload", "Method"]) if rows else pd.DataFrame()


def ar_loops(df) -> pd.DataFrame:
    """AR's outputs per workload (and temperature): the share of positions whose preceding 12-gram occurred
    earlier (what a context lookup can copy) and how many outputs end in an exactly periodic tail (replicate 1)."""
    ar = replicate(role(df))
    ar = ar[ar.method == "ar"]
    rows = [{"Workload": DATASET_LABELS[ds], "T": f"{r.temperature:g}", "AR loop share": f"{r.loop_share:.1%}",
             "periodic outputs": f"{sum(bool(x.get('periodic_tail')) for x in r.rows)}/{r.n}"}
            for ds in DATASET_LABELS for _, r in ar[ar.dataset == ds].iterrows()]
    return pd.DataFrame(rows).set_index(["Workload", "T"]) if rows else pd.DataFrame()


def hf_table(df) -> pd.DataFrame:
    """transformers' own engine: HF assisted generation over HF's AR (the algorithm) and over ours (algorithm and
    engine together), and HF's AR over ours (the engine alone), per workload (replicate 1)."""
    sub = replicate(role(df))
    rows = []
    for ds in [d for d in DATASET_LABELS if d in set(sub.dataset)]:
        w = sub[sub.dataset == ds]
        for name in ("hf_assisted", "hf_ar"):
            r = w[w.method == name]
            if not r.empty:
                r = r.iloc[0]
                rows.append({"Workload": DATASET_LABELS[ds], "Method": r.label, "tok/s": pm(r.tps, r.tps_std),
                             "over HF AR": _dash(r.speedup_own, "{:.2f}×"), "over our AR": f"{r.speedup:.2f}×"})
    return pd.DataFrame(rows).set_index(["Workload", "Method"]) if rows else pd.DataFrame()


def peers_table(df, r: int = 0) -> pd.DataFrame:
    """Notebook 12: every method of the peers run per workload (replicate ``r``): throughput, speedup over our AR
    with its 95% paired interval, over llama.cpp's own BF16 AR, mean tokens per verification, and agreement with
    our AR's tokens (llama.cpp's arithmetic is its own: agreement is measured, not expected)."""
    return _per_dataset(replicate(df, r), {
        "tok/s": lambda r: pm(r.tps, r.tps_std), "over our AR [95% CI]": _speedup_ci,
        "over llama.cpp AR": lambda r: _dash(r.speedup_own, "{:.2f}×"), "L̄": lambda r: f"{r.L_bar:.2f}",
        "= our AR": _agree})


def best_pairs(df) -> list[dict]:
    """Per workload and replicate, our fastest method (``ours``, a row) against llama.cpp's fastest mode
    (``peer``) on the same prompts: ``paired``'s ratio, interval and prompt count."""
    out = []
    for ds in [d for d in DATASET_LABELS if d in set(df.dataset)]:
        for rep, w in df[df.dataset == ds].groupby("replicate"):
            ours, peers = w[(w.engine == "ours") & (w.method != "ar")], w[w.engine == "llama.cpp"]
            if ours.empty or peers.empty:
                continue
            a, b = ours.loc[ours.tps.idxmax()], peers.loc[peers.tps.idxmax()]
            ratio, lo, hi, n = paired(a.tps_by_prompt, b.tps_by_prompt)
            out.append({"dataset": ds, "replicate": int(rep), "ours": a, "peer": b, "ratio": ratio, "lo": lo,
                        "hi": hi, "prompts": n})
    return out


def best_vs_peer(df) -> pd.DataFrame:
    """``best_pairs`` as a table (an interval containing 1 is no measured difference)."""
    rows = [{"Workload": DATASET_LABELS[p["dataset"]], "replicate": p["replicate"] + 1, "ours": p["ours"].label,
             "llama.cpp": p["peer"].label, "throughput ratio": f"{p['ratio']:.2f}",
             "95% CI": f"[{p['lo']:.2f}, {p['hi']:.2f}]", "prompts": p["prompts"]} for p in best_pairs(df)]
    return pd.DataFrame(rows).set_index(["Workload", "replicate"]) if rows else pd.DataFrame()


def sampling_table(df) -> pd.DataFrame:
    """TALON's Table 3 form: per temperature and workload, mean tokens per verification (τ) and the speedup over
    AR sampling at the same temperature on the same prompts."""
    out = {}
    for t, ds in [(t, ds) for t in sorted(set(df.temperature)) for ds in DATASET_LABELS]:
        for _, r in order(df[(df.temperature == t) & (df.dataset == ds)]).iterrows():
            out.setdefault(r.label, {})[(f"T = {t:g}", DATASET_LABELS[ds], "τ")] = f"{r.L_bar:.2f}"
            out[r.label][(f"T = {t:g}", DATASET_LABELS[ds], "speedup")] = "–" if r.method == "ar" else _speedup_ci(r)
    t = pd.DataFrame(out).T
    t.columns = pd.MultiIndex.from_tuples(t.columns)
    t.index.name = "Method"
    return t


def reported() -> dict:
    """The paper's numbers as transcribed in data/paper_reported.json (not our measurements). Always the
    repository's copy: ``$DYNATREE_DATA`` moves the evaluation text, never the reference numbers."""
    return json.loads((REPO_DATA / "paper_reported.json").read_text(encoding="utf-8"))


def reported_vs_reproduced_main(df: pd.DataFrame) -> pd.DataFrame:
    """Speedup and verification numbers: the paper (Pythia-2.8B/70M, A100) beside ours (this profile)."""
    rep = reported()
    rows = []
    df = replicate(role(df))
    df = df[df.lookup]
    for ds in [d for d in ("wikitext2", "pg19") if d in set(df.dataset)]:
        for m, lab in [(m, label(m)) for m in registry.names("paper")] + [("dynatree", PAPER_DYNATREE)]:
            ours = df[(df.dataset == ds) & (df.label == lab)]
            if ours.empty:
                continue
            o = ours.iloc[0]
            key = registry.REGISTRY[m].reported
            p1 = rep["table1_throughput_tokens_per_s"][ds][key]
            p3 = rep["table3_verification_efficiency"][ds][key]
            rows.append({"Dataset": DATASET_LABELS[ds], "Method": lab,
                         "Speedup (paper)": f"{p1['speedup']:.2f}×", "Speedup (ours)": f"{o.speedup:.2f}×",
                         "L̄ (paper)": f"{p3['L_bar']:.2f}", "L̄ (ours)": f"{o.L_bar:.2f}",
                         "Accept. (paper)": "–" if p3["accept"] is None else f"{p3['accept']:.1%}",
                         "Accept. (ours)": "–" if m == "ar" else f"{o.accept_rate:.1%}"})
    return pd.DataFrame(rows).set_index(["Dataset", "Method"])


def reported_vs_reproduced_v1(df: pd.DataFrame, dataset: str = "wikitext2") -> pd.DataFrame:
    """The earlier paper version's Table 1 (one prompt, 500 tokens, with HF assisted generation and
    StreamingLLM + spec) beside our speedups for the same methods on ``dataset``: over our AR, and for HF assisted
    also over HF's own AR (the paper's 1.36x is HF assisted over HF's AR on one engine)."""
    rep = reported()["earlier_version_500_tokens"]["table1"]
    pairs = [("ar", "ar"), ("hf_assisted", "hf_assisted"), ("linear_spec_K6", "linear"),
             ("streamingllm_spec_cache1024", "streaming_spec"), ("dynatree_v1", "dynatree")]
    rows = []
    df = replicate(role(df))
    for rk, m in pairs:
        ours = df[(df.dataset == dataset) & (df.label == label(m))]
        o = None if ours.empty else ours.iloc[0]
        rows.append({"Method": label(m), "Speedup (paper v1)": f"{rep[rk]['speedup']:.2f}×",
                     "Speedup (ours, over our AR)": "–" if o is None else f"{o.speedup:.2f}×",
                     "Speedup (ours, over HF AR)": "–" if o is None else _dash(o.speedup_own, "{:.2f}×"),
                     "Agreement with AR (ours)": "–" if o is None or pd.isna(o.get("ar_agreement"))
                     else f"{o.ar_agreement:.1%}"})
    return pd.DataFrame(rows).set_index("Method")


def to_markdown(t: pd.DataFrame) -> str:
    """GitHub Markdown without extra dependencies; MultiIndex columns are joined with ' / '."""
    cols = [" / ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in t.columns]
    idx = t.index.names if any(t.index.names) else [""]
    head = [" / ".join(str(x) for x in idx if x)] + cols
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, row in t.iterrows():
        i = " / ".join(map(str, i)) if isinstance(i, tuple) else str(i)
        lines.append("| " + " | ".join([i] + [str(v) for v in row]) + " |")
    return "\n".join(lines) + "\n"


def save(t: pd.DataFrame, name: str, out_dir: Path) -> str:
    """Write ``name.md`` and ``name.tex`` into ``out_dir``; return the Markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = to_markdown(t)
    (out_dir / f"{name}.md").write_text(md)
    (out_dir / f"{name}.tex").write_text(t.to_latex(escape=True))
    return md


def tuning_table(df: pd.DataFrame) -> pd.DataFrame:
    """Every tuning candidate (equal budget per family) with its throughput, greedy and sampled; the chosen one
    marked."""
    rows = []
    for (t, ds, fam), g in df.groupby(["temperature", "dataset", "method"], sort=False):
        best = g.tps.idxmax()
        for i, r in g.iterrows():
            rows.append({"T": "greedy" if t == 0 else f"{t:g}", "Workload": DATASET_LABELS[ds], "Candidate": r.label,
                         "tok/s": pm(r.tps, r.tps_std), "Speedup": f"{r.speedup:.2f}×", "L̄": f"{r.L_bar:.2f}",
                         "nodes/iter": f"{r.draft_nodes_per_iter:.1f}", "chosen": "✓" if i == best and fam != "ar" else ""})
    return pd.DataFrame(rows).set_index(["T", "Workload", "Candidate"])


def scope_label(scope: str) -> str:
    """A pair-report scope ("wikitext2", "spec_bench/qa", "all") as tables name it."""
    ws, _, cat = scope.partition("/")
    name = DATASET_LABELS.get(ws, ws)
    return f"{name} · {CATEGORY_LABELS.get(cat, cat)}" if cat else name


def pair_table(pair: dict) -> pd.DataFrame:
    """The model pair on held-out text: size, bits/byte, agreement and calibration (pair.json)."""
    rows = {}
    for role in ("target", "draft"):
        m = pair["models"][role]
        rows[role] = {"params (M)": f"{m['params'] / 1e6:.1f}", "layers × width": f"{m['layers']} × {m['hidden']}",
                      **{f"bits/byte {DATASET_LABELS.get(ds, ds)}": f"{v:.3f}" for ds, v in pair["bits_per_byte"][role].items()}}
    t = pd.DataFrame(rows).T
    t.index.name = "model"
    return t


def agreement_table(pair: dict) -> pd.DataFrame:
    """Teacher-forced draft/target agreement, mean confidence, ECE and the overlap of the two laws at T = 1
    (``harness.pair``: what a drawn token's acceptance reads), on the target's greedy continuations
    and on the human-written prompts; with a draft head over a token subset, also with the full head; with a
    context lookup, also the network alone."""
    rows = {}
    heads = [("agreement", "")] + ([("agreement_full_vocab", ", full-vocabulary head")]
                                   if "agreement_full_vocab" in pair else []) + \
        ([("agreement_no_lookup", ", network alone (no lookup)")] if "agreement_no_lookup" in pair else [])
    for field_, head in heads:
        for key, a in pair[field_].items():
            text = ("human text (prompts)" if key.endswith("_human") else "target's greedy output") + head
            rows[(scope_label(key.replace("_human", "")), text)] = {
                "positions": a["positions"], "agreement": f"{a['agreement']:.3f}",
                "mean top-1 prob": f"{a['mean_confidence']:.3f}", "ECE": f"{a['ece']:.3f}",
                "Σ min(p, q) at T = 1": f"{a['overlap']:.3f}" if "overlap" in a else "–"}
    t = pd.DataFrame(rows).T
    t.index.names = ["scope", "text"]
    return t


def overlap_table(pair: dict) -> pd.DataFrame:
    """Σ min(p, q) per workload and category, the probability that speculative sampling accepts a token drawn from
    the draft at temperature 1, teacher-forced on the target's greedy output and on its output sampled at
    temperature 1 (``pair["sampled"]``), for each head the report measured; empty for a report without it."""
    sampled = pair.get("sampled")
    if not sampled:
        return pd.DataFrame()
    heads = {"agreement": "as drafting uses it", "agreement_no_lookup": "network alone",
             "agreement_full_vocab": "full head"}
    rows = {}
    for field_, head in heads.items():
        for text, rep in (("greedy output", pair), ("sampled output", sampled)):
            for key, a in rep.get(field_, {}).items():
                if not key.endswith("_human") and "overlap" in a:
                    rows.setdefault(scope_label(key), {})[(head, text)] = f"{a['overlap']:.3f}"
    t = pd.DataFrame(rows).T
    t.columns = pd.MultiIndex.from_tuples(t.columns)
    t.index.name = "text"
    return t


def draft_versions_table(pair: dict, earlier: dict[str, dict], now: str = "now") -> pd.DataFrame:
    """The draft against earlier versions (``earlier``: version name -> its pair report) on the same dev prompts,
    teacher-forced on the target's greedy output: agreement of the network alone and with its lookup, and the
    calibration error, per workload and category."""
    from ..harness.pair import versions

    metrics = {"network alone": "alone", "with lookup": "served", "ECE (network alone)": "ece"}
    rows = {}
    for name, before in earlier.items():
        for key, v in versions(pair, before).items():
            row = rows.setdefault(scope_label(key), {("positions", ""): v["positions"]})
            for label, field in metrics.items():
                row[(label, name)] = f"{v['before'][field]:.3f}"
                row[(label, now)] = f"{v['now'][field]:.3f}"
    order = [(label, ver) for label in metrics for ver in (*earlier, now)] + [("positions", "")]
    t = pd.DataFrame(rows).T
    t = t[[c for c in order if c in t.columns]]
    t.columns = pd.MultiIndex.from_tuples(t.columns)
    t.index.name = "text"
    return t


def forward_cost_table(costs: dict) -> pd.DataFrame:
    """fwd(k) in ms for target and draft (back to back, and the draft right after a target forward; with a
    draft head over a token subset also the same draft scoring every token) in each precision, with the
    bandwidth bound of one token."""
    from ..harness.costs import COLD

    cols = {}
    for dtype, c in costs["curves"].items():
        for role in ("target", "draft", "draft_full_vocab", COLD):
            if role in c:
                cols[(dtype, role.replace("_", " "))] = {int(k): f"{v:.2f}" for k, v in c[role].items()}
        cols[(dtype, "draft / target")] = {int(k): f"{c['draft'][k] / c['target'][k]:.3f}" for k in c["target"]}
    t = pd.DataFrame(cols)
    t.index.name = "k tokens"
    bounds = {d: c["bound"]["ms_per_token"] for d, c in costs["curves"].items()}
    t.attrs["bound"] = bounds
    return t


def one_token_table(costs: dict, earlier: dict[str, dict] | None = None, now: str = "now") -> pd.DataFrame:
    """The draft's one-token forward over the target's in paired rounds (``costs.one_token_ratio``): the
    median ratio with its quartiles, each model's range and the read bandwidth's over the rounds (the phases
    they met); a file measured before the paired rounds existed shows a row saying so. Below, the same ratio on
    the forward-cost curves (k = 1) of this draft and of ``earlier`` versions (version name -> its costs file),
    the one measurement every version has."""
    rows = {}
    for dtype, o in costs.get("one_token", {}).get("by_dtype", {}).items():
        gbs = [g for g in o.get("read_gbs", []) if g == g]  # NaN: no probe
        rows[f"{now}, paired rounds, {dtype}"] = {
            "draft / target (median)": f"{o['median']:.3f}",
            "quartiles": f"[{o['quartiles'][0]:.3f}, {o['quartiles'][1]:.3f}]",
            "target ms (min-max)": f"{min(o['target_ms']):.2f}-{max(o['target_ms']):.2f}",
            "draft ms (min-max)": f"{min(o['draft_ms']):.2f}-{max(o['draft_ms']):.2f}",
            "read GB/s (min-max)": f"{min(gbs):.1f}-{max(gbs):.1f}" if gbs else "–",
            "rounds over s": f"{o['rounds']} over {o.get('span_s', 0):.0f}"}
    if not rows:
        rows[f"{now}, paired rounds"] = {"draft / target (median)": "not measured"}
    for name, c in {**(earlier or {}), now: costs}.items():
        for dtype, curve in c.get("curves", {}).items():
            target, draft = curve["target"]["1"], curve["draft"]["1"]
            rows[f"{name}, curves (k = 1), {dtype}"] = {
                "draft / target (median)": f"{draft / target:.3f}", "target ms (min-max)": f"{target:.2f}",
                "draft ms (min-max)": f"{draft:.2f}"}
    t = pd.DataFrame.from_dict(rows, orient="index").fillna("–")
    t.index.name = "draft, measurement, precision"
    return t


def ar_vs_bound(df: pd.DataFrame) -> pd.DataFrame:
    """AR's time per token (TPOT) beside the bandwidth bound of the same record (``bound_ms``: record means),
    and each generation against its own probe (``bound_ratios``: median [min, max])."""
    ar = df[df.method == "ar"]
    bw = ar.read_bandwidth_gbs if "read_bandwidth_gbs" in ar else pd.Series(float("nan"), index=ar.index)
    per = ar.bound_ratios if "bound_ratios" in ar else pd.Series(None, index=ar.index, dtype=object)
    out = pd.DataFrame({"dataset": ar.dataset.map(DATASET_LABELS), "precision": ar.dtype,
                        "AR TPOT (ms)": ar.tpot_ms.map(lambda x: f"{x:.2f}"),
                        "read bandwidth (GB/s)": bw.map(lambda x: "–" if pd.isna(x) else f"{x:.1f}"),
                        "bound (ms)": ar.bound_ms.map(lambda x: f"{x:.2f}"),
                        "TPOT / bound": (ar.tpot_ms / ar.bound_ms).map(lambda x: f"{x:.2f}×"),
                        "each generation / its probe": per.map(
                            lambda xs: "–" if not isinstance(xs, list)
                            else f"{statistics.median(xs):.2f}× [{min(xs):.2f}, {max(xs):.2f}]")})
    return out.set_index(["dataset", "precision"])


def cost_model_table(df: pd.DataFrame, costs: dict) -> pd.DataFrame:
    """Predicted (cost model) vs measured milliseconds per generated token, prefill excluded; for the
    speculative rows also one iteration's drafting and verification, predicted and measured (ms).

    ``gap``: measured / predicted - 1. ``gap, AR-scaled``: the same with the prediction multiplied by AR's
    measured / predicted on the same dataset, precision and replicate (0 for AR by construction): the curves are
    timed in notebook 00, minutes before or after the main run, and a shared VM's overall speed can drift between
    the two; this gap is what remains once that common factor is taken out."""
    from ..harness.costs import predict_iteration, predict_ms_per_token

    rows, ar_scale = [], {}  # (dataset, precision, replicate) -> AR's measured / predicted
    for _, r in order(df).iterrows():
        prec = r["dtype"]  # not r.dtype: that is the Series' own dtype
        if prec not in costs["curves"] or r.engine != "ours":
            continue
        c = costs["curves"][prec]
        stats = (r.draft_nodes_per_iter, r.depth_per_iter, r.draft_forwards_per_iter, r.L_bar)
        pred = predict_ms_per_token(c, r.method, *stats)
        row = {"Dataset": DATASET_LABELS[r.dataset], "Method": r.label, "precision": prec,
               "replicate": int(r.get("replicate", 0)) + 1, "predicted": pred, "measured": r.ms_per_token, "gap": r.ms_per_token / pred - 1}
        if r.method != "ar":
            d, v, cm = predict_iteration(c, *stats)
            row |= {"draft/iter pred.": d, "draft/iter meas.": 1e3 * r.draft_s / r.iterations,
                    "verify/iter pred.": v, "verify/iter meas.": 1e3 * r.verify_s / r.iterations,
                    "commit/iter pred.": cm, "commit/iter meas.": 1e3 * r.commit_s / r.iterations}
        if r.method == "ar":
            ar_scale[(row["Dataset"], prec, row["replicate"])] = r.ms_per_token / pred
        rows.append(row)
    t = pd.DataFrame(rows)
    if t.empty:
        return t
    scale = pd.Series([ar_scale.get(k, float("nan")) for k in zip(t.Dataset, t.precision, t.replicate)], index=t.index)
    t.insert(t.columns.get_loc("gap") + 1, "gap, AR-scaled", t.measured / (t.predicted * scale) - 1)
    return t


def ceiling_table(costs: dict, alphas=(0.5, 0.6, 0.7, 0.8, 0.9, 0.95), Ks=range(1, 9)) -> pd.DataFrame:
    """Per per-token acceptance and precision: the best chain length K and its predicted speedup over AR
    from that precision's forward-cost curves (``costmodel.chain_speedup``): what acceptance a drafter
    needs on this hardware."""
    from ..harness.costs import chain_speedup

    cols = {}
    for prec, curves in costs["curves"].items():
        best = {a: max(Ks, key=lambda K: chain_speedup(curves, a, K)) for a in alphas}
        cols[(prec, "best K")] = {a: str(best[a]) for a in alphas}
        cols[(prec, "predicted speedup")] = {a: f"{chain_speedup(curves, a, best[a]):.2f}x" for a in alphas}
    t = pd.DataFrame(cols)
    t.index.name = "acceptance per token"
    return t
