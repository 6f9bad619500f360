"""Notebook 16's tables and figure (the controller, issue 94): each controlled method against its tuned uncontrolled
setting and AR, per workload and temperature, and the budgets a controller chose along one generation."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from .. import methods as registry
from ..harness.setup.variants import CONTROLLED
from ..harness.setup.workloads import label as workload_label
from .formatting import present
from .main_tables import speedup_ci
from .records import paired


def control_vs_tuned(df: pd.DataFrame) -> pd.DataFrame:
    """Per temperature, workload, replicate and draft: each controlled row's throughput over its uncontrolled
    setting's on the same prompts (paired mean ratio, 95% interval), beside both rows' speedups over AR."""
    out = []
    for _, c in df[df.variant == CONTROLLED].iterrows():
        kind = c.row.split(":")[2] if c.row.count(":") > 1 else None  # the head it drafts with, if any
        base = df[(df.method == c.method) & (df.variant != CONTROLLED) & (df.dataset == c.dataset)
                  & (df.temperature == c.temperature) & (df.replicate == c.replicate)
                  & (df.row.str.split(":").str[2].fillna("").eq(kind or ""))]
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
