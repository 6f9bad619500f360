"""Notebook 12's vLLM tables at one request (issue 79), from ``vllm.json`` alone (under load: ``serving``)."""
from __future__ import annotations

import pandas as pd

from .. import methods as registry
from ..harness.setup.workloads import label as workload_label
from .formatting import dash, pm
from .main_tables import agreement, per_dataset, speedup_ci
from .records import replicate

POSITIONS = 3  # draft positions the table shows


def with_vllm_equality(df: pd.DataFrame) -> pd.DataFrame:
    """``equals_vllm_ar``: per record, the prompts whose tokens equal vLLM's own AR on the same prompt (workload,
    replicate), by the rows' token hashes; None where that AR is missing."""
    own = {(r.dataset, r.replicate): {x["prompt_id"]: x["tokens_sha"] for x in r.rows}
           for r in df.itertuples() if r.method == "vllm" and getattr(r, "tag_own_ar", False)}

    def count(r) -> str | None:
        ref = own.get((r.dataset, r.replicate))
        if ref is None or (r.method == "vllm" and getattr(r, "tag_own_ar", False)):
            return None
        same = [x["tokens_sha"] == ref[x["prompt_id"]] for x in r.rows if x["prompt_id"] in ref]
        return f"{sum(same)}/{len(same)}"
    return df.assign(equals_vllm_ar=[count(r) for r in df.itertuples()])


def acceptance_at(rows: list[dict], positions: int = POSITIONS) -> list[float]:
    """The share of verifications whose draft token at position j was accepted, j = 1..``positions``, over every
    prompt (``metrics``' ``accepted_at`` / ``drafted_at``); NaN past what was drafted."""
    out = []
    for j in range(positions):
        drafted = sum(r["drafted_at"][j] for r in rows if len(r.get("drafted_at", [])) > j)
        accepted = sum(r["accepted_at"][j] for r in rows if len(r.get("accepted_at", [])) > j)
        out.append(accepted / drafted if drafted else float("nan"))
    return out


def _positions(r) -> str:
    rates = acceptance_at(r.rows)
    return "–" if all(pd.isna(x) for x in rates) else " / ".join(dash(x, "{:.2f}") for x in rates)


def vllm_table(df: pd.DataFrame, r: int = 0) -> pd.DataFrame:
    """Every row of the vllm run per workload (replicate ``r``): throughput, speedup over our AR with its 95% paired
    interval and over vLLM's AR, tokens per verification, acceptance at draft positions 1-3, and agreement with our
    AR's and vLLM's AR's tokens (vLLM's BF16 arithmetic is its own: agreement is measured, not expected)."""
    df = with_vllm_equality(replicate(df, r))
    df = df.assign(label=[lab if m == "vllm" else f"Ours: {lab}" for m, lab in zip(df.method, df.label)])
    return per_dataset(df, {
        "tok/s": lambda r: pm(r.tps, r.tps_std), "over our AR [95% CI]": speedup_ci,
        "over vLLM AR": lambda r: dash(r.speedup_own, "{:.2f}×"), "L̄": lambda r: f"{r.L_bar:.2f}",
        f"accepted at 1-{POSITIONS}": _positions, "= our AR": agreement,
        "= vLLM AR": lambda r: r.equals_vllm_ar if isinstance(r.equals_vllm_ar, str) else "–"})


def vllm_idle_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per replicate: the CPU seconds vLLM's paused workers spent while our engine ran, over the seconds it ran."""
    rows = []
    for rep, w in df[df.method == "vllm"].groupby("replicate"):
        xs = [x for rows_ in w.rows for x in rows_ if "idle_cpu_s" in x]
        rows.append({"replicate": int(rep) + 1, "requests": len(xs),
                     "idle CPU s": f"{sum(x['idle_cpu_s'] for x in xs):.2f}",
                     "idle wall s": f"{sum(x['idle_wall_s'] for x in xs):.0f}"})
    return pd.DataFrame(rows).set_index("replicate") if rows else pd.DataFrame()


def vllm_tuning_table(df: pd.DataFrame) -> pd.DataFrame:
    """Tokens/s of every tuning candidate, our chain's K and vLLM's EAGLE-3 k side by side, per workload."""
    out = {}
    for r in df[df.method != registry.AR].itertuples():
        k = r.config.get("K", r.config.get("k"))
        who = "our chain on the head" if r.method == registry.LINEAR else "vLLM EAGLE-3"
        out.setdefault(f"K = {k}", {})[(workload_label(r.dataset), who)] = pm(r.tps, r.tps_std)
    t = pd.DataFrame(out).T.sort_index(key=lambda ix: ix.str.slice(4).astype(int))
    t.columns = pd.MultiIndex.from_tuples(t.columns)
    return t
