"""Figures from logged JSON only (via ``tables.load``), saved as PNG and PDF."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .tables import DATASET_LABELS, LABELS, order  # noqa: E402

COLORS = {"ar": "#7f7f7f", "linear": "#1f77b4", "fixed_tree": "#ff7f0e", "dynatree": "#2ca02c",
          "hf_assisted": "#9467bd", "streaming_spec": "#8c564b", "talon": "#d62728"}
plt.rcParams.update({"figure.dpi": 110, "savefig.bbox": "tight", "axes.grid": True, "grid.alpha": 0.3})


def save(fig, name: str, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "pdf"):
        fig.savefig(out_dir / f"{name}.{ext}", metadata={"CreationDate": None} if ext == "pdf" else None)
    return out_dir / f"{name}.png"


def main_throughput(df: pd.DataFrame):
    """Figure 4: throughput (bars) and speedup (labels) per method, one bar per dataset."""
    fig, ax = plt.subplots(figsize=(9.5, 3.8))
    methods = list(order(df).method.unique())
    dss = [d for d in DATASET_LABELS if d in set(df.dataset)]
    w = 0.8 / len(dss)
    for j, ds in enumerate(dss):
        sub = df[df.dataset == ds].set_index("method").reindex(methods)
        x = np.arange(len(methods)) + (j - (len(dss) - 1) / 2) * w
        bars = ax.bar(x, sub.tps, w, yerr=sub.tps_std, capsize=3, label=DATASET_LABELS[ds],
                      color=[COLORS.get(m, "#333") for m in methods], alpha=1.0 if j == 0 else 0.55,
                      edgecolor="black", linewidth=0.5)
        for b, s in zip(bars, sub.speedup):
            ax.annotate(f"{s:.2f}×", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                        fontsize=7, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(np.arange(len(methods)), [LABELS.get(m, m).replace(" + ", "\n+ ") for m in methods], fontsize=8)
    ax.set_ylabel("throughput (tokens/s)")
    ax.legend(title="left (solid) / right (light)", fontsize=8, title_fontsize=8, loc="upper left")
    ax.set_title("Throughput and speedup vs AR")
    return fig


def ablation(df: pd.DataFrame):
    """Figure 5: throughput with #Iter., and L-bar with acceptance, along the ablation steps."""
    sub = df[df.method != "ar"].sort_values("tag_step")
    x, labels = np.arange(len(sub)), [m.replace(" (", "\n(").replace("+ ", "+\n") for m in sub.method]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.4))
    a1.bar(x, sub.tps, yerr=sub.tps_std, color="#2ca02c", alpha=0.7, capsize=3)
    a1.set_ylabel("throughput (tok/s)")
    b1 = a1.twinx()
    b1.plot(x, sub.iterations, "o-k")
    b1.set_ylabel("#Iter.")
    a2.bar(x, sub.L_bar, color="#1f77b4", alpha=0.7)
    a2.set_ylabel("L̄ (tokens/iter)")
    b2 = a2.twinx()
    b2.plot(x, sub.accept_rate, "s-r")
    b2.set_ylabel("acceptance")
    for a in (a1, a2):
        a.set_xticks(x, labels, fontsize=7)
    fig.tight_layout()
    return fig


def vs_param(df: pd.DataFrame, param: str, metrics: list[tuple[str, str]], logx: bool = False):
    """One panel per metric, one line per method, x = a sweep coordinate (T or L_max)."""
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.3 * len(metrics), 3.1))
    axes = np.atleast_1d(axes)
    for ax, (col, title) in zip(axes, metrics):
        for m, sub in order(df).groupby("method", sort=False):
            if col in ("ell_bar", "accept_rate") and m == "ar":
                continue
            sub = sub.sort_values(param)
            ax.plot(sub[param], sub[col], "o-", color=COLORS.get(m), label=LABELS.get(m, m), ms=4)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(param)
        if logx:
            ax.set_xscale("log")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def fixed_sweep(df: pd.DataFrame):
    """Figure 7: fixed-tree speedup vs D for each (B, tau), best configuration marked."""
    sub = df[df.method != "ar"]
    best = sub.loc[sub.tps.idxmax()]
    fig, axes = plt.subplots(1, sub.tag_B.nunique(), figsize=(3.6 * sub.tag_B.nunique(), 3.2), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, (B, g) in zip(axes, sub.groupby("tag_B")):
        for tau, h in g.groupby("tag_tau"):
            h = h.sort_values("tag_D")
            ax.plot(h.tag_D, h.speedup, "o-", ms=4, label=f"τ={tau}")
        if B == best.tag_B:
            ax.plot([best.tag_D], [best.speedup], "*", ms=16, color="gold", mec="k",
                    label=f"best D={best.tag_D:.0f} B={best.tag_B:.0f} τ={best.tag_tau}")
        ax.set_title(f"B = {B:.0f}")
        ax.set_xlabel("depth D")
    axes[0].set_ylabel("speedup vs AR")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig, best


def dynatree_sensitivity(df: pd.DataFrame):
    """Figure 8: threshold scatter over (tau_h, tau_l); breadth and depth sweeps with AR / fixed lines."""
    ar = df[df.method == "ar"].tps.iloc[0]
    fixed = df[df.method == "fixed_tree"].tps.iloc[0]
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(11, 3.3))
    th = df[df.get("tag_sweep") == "thresholds"]
    sc = a.scatter(th.tag_tau_h, th.tag_tau_l, c=th.tps, s=120, cmap="viridis", edgecolors="k")
    fig.colorbar(sc, ax=a, label="tok/s")
    a.set_xlabel("τ_h")
    a.set_ylabel("τ_l")
    a.set_title("(a) thresholds")
    for ax, sweep, lab, title in ((b, "breadth", "tag_B", "(b) breadth (B_min,B_mid,B_max)"),
                                  (c, "depth", None, "(c) depth (D0, D_max)")):
        s = df[df.get("tag_sweep") == sweep]
        names = [str(tuple(v)) for v in s.tag_B] if sweep == "breadth" else \
            [f"({d0:.0f},{dm:.0f})" for d0, dm in zip(s.tag_D0, s.tag_D_max)]
        ax.errorbar(range(len(s)), s.tps, yerr=s.tps_std, fmt="o-", color="#2ca02c", capsize=3, label="DynaTree")
        ax.axhline(ar, color=COLORS["ar"], ls="--", label="AR")
        ax.axhline(fixed, color=COLORS["fixed_tree"], ls=":", label="Fixed Tree")
        ax.set_xticks(range(len(s)), names, fontsize=7, rotation=20)
        ax.set_title(title)
        ax.set_ylabel("tok/s")
    c.legend(fontsize=7)
    fig.tight_layout()
    return fig


def draft_efficiency(rows: pd.DataFrame):
    """Draft forwards per verification vs mean accepted tokens per prompt, tree methods (TALON's axes)."""
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    for m, g in rows.groupby("method", sort=False):
        ax.scatter(g.ell_bar, g.draft_forwards_per_iter, label=LABELS.get(m, m), color=COLORS.get(m), s=25)
    ax.set_xlabel("mean accepted tokens per iteration (ℓ̄)")
    ax.set_ylabel("draft forwards per iteration")
    ax.legend(fontsize=7)
    return fig
