"""Tables from logged JSON only: load records, recompute speedups, format, save Markdown + LaTeX.

Also the "reported (paper) vs reproduced (ours)" tables, from the repository's ``data/paper_reported.json``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .data import REPO_DATA

METHOD_ORDER = ["ar", "linear", "fixed_tree", "dynatree", "hf_assisted", "streaming_spec", "talon"]
LABELS = {"ar": "AR", "linear": "Linear Spec", "fixed_tree": "Fixed Tree", "dynatree": "DynaTree",
          "hf_assisted": "HF Assisted", "streaming_spec": "StreamingLLM + Spec", "talon": "TALON"}
DATASET_LABELS = {"wikitext2": "WikiText-2", "pg19": "PG-19"}


def load(path: str | Path) -> pd.DataFrame:
    """One row per record: identifiers, tags, ``<metric>`` / ``<metric>_std`` means, equality counts."""
    recs = json.loads(Path(path).read_text())["records"]
    rows = []
    for r in recs:
        row = {"dataset": r["dataset"], "method": r["method"], "T": r["T"], "L_max": r["L_max"],
               "n": r["aggregate"]["n"], "equals_ar": r["aggregate"]["equals_ar"], "config": r["config"],
               **{f"tag_{k}": (tuple(v) if isinstance(v, list) else v) for k, v in r.get("tags", {}).items()}}
        for k, v in r["aggregate"].items():
            if isinstance(v, dict):
                row[k], row[f"{k}_std"] = v["mean"], v["std"]
        rows.append(row)
    df = pd.DataFrame(rows)
    return add_speedup(df)


def add_speedup(df: pd.DataFrame) -> pd.DataFrame:
    """speedup = TPS / TPS_AR of the same dataset, T and L_max in the same file (never taken from a log)."""
    ar = df[df.method == "ar"].set_index(["dataset", "T", "L_max"])["tps"]
    key = list(zip(df.dataset, df["T"], df.L_max))
    df = df.copy()
    df["speedup"] = [t / ar.get(k, float("nan")) for t, k in zip(df.tps, key)]
    return df


def pm(mean: float, std: float, fmt: str = "{:.1f}") -> str:
    if pd.isna(mean):
        return "–"
    return f"{fmt.format(mean)} ± {fmt.format(std)}"


def order(df: pd.DataFrame) -> pd.DataFrame:
    rank = {m: i for i, m in enumerate(METHOD_ORDER)}
    return df.assign(_r=df.method.map(lambda m: rank.get(m, 99))).sort_values(["_r"]).drop(columns="_r")


def _per_dataset(df: pd.DataFrame, cols: dict) -> pd.DataFrame:
    """Methods as rows, (dataset, column) pairs as columns; ``cols`` maps a header to a row formatter."""
    out = {}
    for ds in [d for d in DATASET_LABELS if d in set(df.dataset)]:
        sub = order(df[df.dataset == ds]).set_index("method")
        for name, f in cols.items():
            out[(DATASET_LABELS[ds], name)] = {LABELS.get(m, m): f(r) for m, r in sub.iterrows()}
    t = pd.DataFrame(out)
    t.index.name = "Method"
    return t


def table1(df):
    return _per_dataset(df, {"Throughput (tok/s)": lambda r: pm(r.tps, r.tps_std),
                             "Speedup": lambda r: f"{r.speedup:.2f}×",
                             "= AR": lambda r: f"{r.equals_ar}/{r.n}"})


def table2(df):
    return _per_dataset(df, {"TTFT (ms)": lambda r: pm(r.ttft_ms, r.ttft_ms_std),
                             "TPOT (ms)": lambda r: pm(r.tpot_ms, r.tpot_ms_std, "{:.2f}")})


def _dash(x, fmt):
    return "–" if pd.isna(x) else fmt.format(x)


def table3(df):
    return _per_dataset(df, {"Accept.": lambda r: _dash(r.accept_rate, "{:.1%}") if r.name != "ar" else "–",
                             "L̄": lambda r: f"{r.L_bar:.2f}",
                             "ℓ̄": lambda r: _dash(r.ell_bar, "{:.2f}") if r.name != "ar" else "–",
                             "#Iter.": lambda r: f"{r.iterations:.0f}"})


def table5(df):
    t = {}
    ar_avg = df[df.method == "ar"].peak_mem_mb.mean()
    for m, sub in order(df).groupby("method", sort=False):
        row = {DATASET_LABELS[d]: f"{sub[sub.dataset == d].peak_mem_mb.mean():.1f}" for d in ("pg19", "wikitext2")
               if d in set(sub.dataset)}
        avg = sub.peak_mem_mb.mean()
        row.update({"Average (MB)": f"{avg:.1f}", "Rel. change": f"{(avg / ar_avg - 1):+.2%}"})
        t[LABELS.get(m, m)] = row
    out = pd.DataFrame(t).T
    out.index.name = "Method"
    return out


def table4(df):
    fixed = df[df.tag_step == 0].tps.iloc[0]
    sub = df[df.method != "ar"].sort_values("tag_step")
    out = pd.DataFrame({"Variant": sub.method,
                        "Throughput (tok/s)": [pm(a, b) for a, b in zip(sub.tps, sub.tps_std)],
                        "Speedup": [f"{s:.2f}×" for s in sub.speedup],
                        "Δ vs Fixed": [f"{t / fixed - 1:+.1%}" for t in sub.tps],
                        "L̄": [f"{x:.2f}" for x in sub.L_bar], "#Iter.": [f"{x:.0f}" for x in sub.iterations],
                        "= AR": [f"{a}/{n}" for a, n in zip(sub.equals_ar, sub.n)]}).set_index("Variant")
    return out


def reported() -> dict:
    """The paper's numbers as transcribed in data/paper_reported.json (not our measurements). Always the
    repository's copy: ``$DYNATREE_DATA`` moves the evaluation text, never the reference numbers."""
    return json.loads((REPO_DATA / "paper_reported.json").read_text(encoding="utf-8"))


def reported_vs_reproduced_main(df: pd.DataFrame) -> pd.DataFrame:
    """Speedup and verification numbers: the paper (Pythia-2.8B/70M, A100) beside ours (this profile)."""
    rep = reported()
    rows = []
    for ds in [d for d in ("wikitext2", "pg19") if d in set(df.dataset)]:
        for m in ("ar", "linear", "fixed_tree", "dynatree"):
            ours = df[(df.dataset == ds) & (df.method == m)]
            if ours.empty:
                continue
            o = ours.iloc[0]
            key = "linear_spec" if m == "linear" else m
            p1 = rep["table1_throughput_tokens_per_s"][ds][key]
            p3 = rep["table3_verification_efficiency"][ds][key]
            rows.append({"Dataset": DATASET_LABELS[ds], "Method": LABELS[m],
                         "Speedup (paper)": f"{p1['speedup']:.2f}×", "Speedup (ours)": f"{o.speedup:.2f}×",
                         "L̄ (paper)": f"{p3['L_bar']:.2f}", "L̄ (ours)": f"{o.L_bar:.2f}",
                         "Accept. (paper)": "–" if p3["accept"] is None else f"{p3['accept']:.1%}",
                         "Accept. (ours)": "–" if m == "ar" else f"{o.accept_rate:.1%}"})
    return pd.DataFrame(rows).set_index(["Dataset", "Method"])


def reported_vs_reproduced_v1(df: pd.DataFrame, dataset: str = "wikitext2") -> pd.DataFrame:
    """The earlier paper version's Table 1 (one prompt, 500 tokens, with HF assisted generation and
    StreamingLLM + spec) beside our speedups for the same methods on ``dataset``."""
    rep = reported()["earlier_version_500_tokens"]["table1"]
    pairs = [("ar", "ar"), ("hf_assisted", "hf_assisted"), ("linear_spec_K6", "linear"),
             ("streamingllm_spec_cache1024", "streaming_spec"), ("dynatree_v1", "dynatree")]
    rows = []
    for rk, m in pairs:
        ours = df[(df.dataset == dataset) & (df.method == m)]
        rows.append({"Method": LABELS[m], "Speedup (paper v1)": f"{rep[rk]['speedup']:.2f}×",
                     "Speedup (ours)": "–" if ours.empty else f"{ours.iloc[0].speedup:.2f}×",
                     "Agreement with AR (ours)": "–" if ours.empty or pd.isna(ours.iloc[0].get("ar_agreement"))
                     else f"{ours.iloc[0].ar_agreement:.1%}"})
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
