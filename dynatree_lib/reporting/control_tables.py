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
from .main_tables import speedup_ci
from .records import paired


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
    """Per temperature, workload, draft and controlled method, every replicate: the controlled row over AR, over its
    own uncontrolled setting and over the best setting found afterwards (``best_afterwards``), and the target issue
    94 sets there: sampled, at least 0.98x AR with no interval wholly below 1 (on Spec-Bench with the head,
    DynaTree at least 1.1x); greedy, at least 0.97x its uncontrolled setting."""
    df = df.assign(head=df.row.map(head_of))
    out = []
    controlled = df[df.variant == CONTROLLED]
    for (t, ws, head, m), c in controlled.groupby(["temperature", "dataset", "head", "method"], sort=False):
        mine = df[(df.temperature == t) & (df.dataset == ws) & (df.variant != CONTROLLED)
                  & ((df["head"] == head) | (df.method == registry.AR))]
        base = mine[mine.method == m]
        best = best_afterwards(mine)
        ratios = {"over AR": [], "over uncontrolled": [], "over best afterwards": []}
        for rep, cr in c.groupby("replicate"):
            cr = cr.iloc[0]
            ratios["over AR"].append((cr.speedup, cr.speedup_lo, cr.speedup_hi))
            for key, ref in (("over uncontrolled", base), ("over best afterwards", best)):
                ref = ref[ref.replicate == rep] if ref is not None else pd.DataFrame()
                if not ref.empty:
                    ratios[key].append(paired(cr.tps_by_prompt, ref.iloc[0].tps_by_prompt)[:3])
        out.append({"T": f"{t:g}", "workload": workload_label(ws), "draft": head or "draft model",
                    "method": registry.REGISTRY[m].display.label,
                    **{k: " / ".join(map(with_interval, v)) or "–" for k, v in ratios.items()},
                    "best afterwards": "–" if best is None else best.iloc[0].label,
                    **target_met(t, ws, head, m, ratios)})
    return pd.DataFrame(out).set_index(["T", "workload", "draft", "method"]) if out else pd.DataFrame()


def with_interval(estimate: tuple) -> str:
    r, lo, hi = estimate
    return f"{r:.2f}×" + ("" if pd.isna(lo) else f" [{lo:.2f}, {hi:.2f}]")


def target_met(t: float, ws: str, head: str, method: str, ratios: dict) -> dict:
    """Issue 94's target for one controlled row and whether every replicate meets it ("–": no target here)."""
    if t == 0:
        got = ratios["over uncontrolled"]
        return {"target": f">= {TARGET_TUNED}x uncontrolled",
                "met": ("yes" if all(r >= TARGET_TUNED for r, _, _ in got) else "no") if got else "–"}
    floor = TARGET_SPEC_BENCH_HEAD if (ws == SPEC_BENCH and head and method == registry.DYNATREE) else TARGET_AR
    got = ratios["over AR"]
    ok = all(r >= floor and not hi < 1 for r, _, hi in got)  # one prompt has no interval: its point decides
    return {"target": f">= {floor}x AR, interval not below 1", "met": ("yes" if ok else "no") if got else "–"}


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
