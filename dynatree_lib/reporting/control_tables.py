"""Notebook 16's tables and figure (the controller, issue 94): each controlled method against its tuned uncontrolled
setting and AR, per workload and temperature; issue 94's targets against the records, with the best setting found
afterwards; and the budgets a controller chose along one generation."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from .. import methods as registry
from ..harness.setup.variants import CONTROLLED
from ..harness.setup.workloads import SPEC_BENCH, label as workload_label
from .formatting import present
from .intervals import experiment_run_variance, paired_measured
from .main_tables import speedup_ci
from .records import paired
from .verdict import Measured


def head_of(row: str) -> str:
    """The head a row drafts with (its row id's third part), "" for the draft model."""
    return row.split(":")[2] if row.count(":") > 1 else ""


def control_vs_tuned(df: pd.DataFrame) -> pd.DataFrame:
    """Per temperature, workload, replicate and draft: each controlled row's throughput over its uncontrolled
    setting's on the same prompts (paired mean ratio, 95% interval), beside both rows' speedups over AR."""
    out = []
    for _, c in df[df.variant == CONTROLLED].iterrows():
        kind = head_of(c.row)  # the head it drafts with, if any
        base = df[(df.method == c.method) & (df.variant != CONTROLLED) & (df.dataset == c.dataset)
                  & (df.temperature == c.temperature) & (df.replicate == c.replicate)
                  & (df.row.map(head_of) == kind)]
        if base.empty:
            continue
        b = base.iloc[0]
        budgets = [x for p in c.rows for x in p.get("budgets", [])]
        ratio, lo, hi, n = paired(c.tps_by_prompt, b.tps_by_prompt)
        out.append({"T": f"{c.temperature:g}", "workload": workload_label(c.dataset), "replicate": int(c.replicate) + 1,
                    "method": b.label, "uncontrolled over AR": speedup_ci(b), "controlled over AR": speedup_ci(c),
                    "controlled / uncontrolled": f"{ratio:.2f}× [{lo:.2f}, {hi:.2f}]", "prompts": n,
                    "AR steps": f"{sum(x == 0 for x in budgets) / max(len(budgets), 1):.0%}"})
    return pd.DataFrame(out).set_index(["T", "workload", "replicate", "method"]) if out else pd.DataFrame()


TARGET_AR, TARGET_TUNED, TARGET_SPEC_BENCH_HEAD = 0.98, 0.97, 1.1  # issue 94's targets (its "Targets" section)


def best_afterwards(rows: pd.DataFrame) -> pd.Series | None:
    """Of one workload's, temperature's and draft's uncontrolled rows and AR, over every replicate: the one with the
    highest mean speedup over AR (AR's is 1), chosen after seeing these very prompts, so no setting chosen in
    advance can beat it."""
    score = rows.assign(s=rows.speedup.where(rows.method != registry.AR, 1.0)).groupby("row").s.mean()
    return None if score.empty else rows[rows.row == score.idxmax()]


def control_targets(df: pd.DataFrame) -> pd.DataFrame:
    """Per temperature, workload, draft and controlled method: the controlled row over AR, over its own uncontrolled
    setting and over the best setting found afterwards (``best_afterwards``), each over both replicates with the
    interval that holds the run-to-run noise (``intervals``), and the target issue 94 sets there: sampled, at least
    0.98x AR with the interval not wholly below 1 (on Spec-Bench with the head, DynaTree at least 1.1x); greedy, at
    least 0.97x its uncontrolled setting."""
    df = df.assign(head=df.row.map(head_of))
    run_var = experiment_run_variance(df)
    out = []
    for (t, ws, head, m), c in df[df.variant == CONTROLLED].groupby(["temperature", "dataset", "head", "method"],
                                                                     sort=False):
        here = df[(df.temperature == t) & (df.dataset == ws)]
        mine = here[(here.variant != CONTROLLED) & ((here["head"] == head) | (here.method == registry.AR))]
        best = best_afterwards(mine)
        refs = {"over AR": mine[mine.method == registry.AR], "over uncontrolled": mine[mine.method == m],
                "over best afterwards": best if best is not None else mine.iloc[:0]}
        ratios = {k: paired_measured(here, c.row.iloc[0], ref.row.iloc[0], run_var=run_var).get(ws)
                  if not ref.empty else None for k, ref in refs.items()}
        out.append({"T": f"{t:g}", "workload": workload_label(ws), "draft": head or "draft model",
                    "method": registry.REGISTRY[m].display.label,
                    **{k: measured_text(v) for k, v in ratios.items()},
                    "best afterwards": "–" if best is None else best.iloc[0].label,
                    **target_met(t, ws, head, m, ratios)})
    return pd.DataFrame(out).set_index(["T", "workload", "draft", "method"]) if out else pd.DataFrame()


def measured_text(m: Measured | None) -> str:
    """'ratio× [lo, hi] (r1 / r2)': over the replicates, with each replicate's ratio."""
    if m is None:
        return "–"
    reps = " / ".join(f"{r.value:.2f}" for r in m.replicates)
    return f"{m.interval.value:.2f}× [{m.interval.lo:.2f}, {m.interval.hi:.2f}] ({reps})"


def target_met(t: float, ws: str, head: str, method: str, ratios: dict[str, Measured | None]) -> dict:
    """Issue 94's target for one controlled row and whether the estimate over the replicates meets it ("–": no
    target here)."""
    if t == 0:
        got = ratios["over uncontrolled"]
        return {"target": f">= {TARGET_TUNED}x uncontrolled",
                "met": "–" if got is None else "yes" if got.interval.value >= TARGET_TUNED else "no"}
    floor = TARGET_SPEC_BENCH_HEAD if (ws == SPEC_BENCH and head and method == registry.DYNATREE) else TARGET_AR
    got = ratios["over AR"]
    ok = got is not None and got.interval.value >= floor and got.interval.hi >= 1
    return {"target": f">= {floor}x AR, interval not below 1", "met": "–" if got is None else "yes" if ok else "no"}


def control_trace(df: pd.DataFrame):
    """The budgets one controlled DynaTree chose along its first generation (replicate 1, the first workload with
    one), beside the draft tokens each verification accepted: greedy on the left, the first temperature on the
    right."""
    rows = df[(df.variant == CONTROLLED) & (df.method == registry.DYNATREE) & (df.replicate == 0)]
    temps = sorted(set(rows.temperature))
    fig, axes = plt.subplots(1, max(len(temps), 1), figsize=(6 * max(len(temps), 1), 3.2), squeeze=False)
    for ax, t in zip(axes[0], temps):
        sub = rows[rows.temperature == t]
        ws = present(sub.dataset)[0]
        first = next(p for p in sub[sub.dataset == ws].iloc[0].rows if "budgets" in p)
        it = range(1, len(first["budgets"]) + 1)
        ax.step(it, first["budgets"], where="mid", color=registry.REGISTRY[registry.DYNATREE].display.color,
                label="budget chosen (0: an AR step)")
        ax.bar(it, first["accepted_per_iteration"], color="#7f7f7f", alpha=0.5, label="draft tokens accepted")
        ax.set(title=f"{workload_label(ws)}, T = {t:g}, prompt {first['prompt_id']}", xlabel="verification",
               ylabel="nodes / tokens")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
