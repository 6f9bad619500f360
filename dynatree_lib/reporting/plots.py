"""Figures from logged JSON only (via ``tables.load``), saved as PNG and PDF."""
from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .. import methods as registry  # noqa: E402
from .tables import DATASET_LABELS, order  # noqa: E402


def color(method: str) -> str:
    """A registered method's colour (unknown names: dark grey)."""
    m = registry.REGISTRY.get(method)
    return m.color if m else "#333"


def label(method: str) -> str:
    """A registered method's label (unknown names: the name)."""
    m = registry.REGISTRY.get(method)
    return m.label if m else method


plt.rcParams.update({"figure.dpi": 110, "savefig.bbox": "tight", "axes.grid": True, "grid.alpha": 0.3})


def save(fig, name: str, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "pdf"):
        fig.savefig(out_dir / f"{name}.{ext}", metadata={"CreationDate": None} if ext == "pdf" else None)
    return out_dir / f"{name}.png"


def tick(label: str, width: int = 12) -> str:
    """A method label wrapped onto lines of about ``width`` characters (the extension's labels are long)."""
    return textwrap.fill(label, width, break_long_words=False)


def main_throughput(df: pd.DataFrame):
    """Figure 4: throughput (bars) and speedup (labels) per method, one bar per dataset."""
    fig, ax = plt.subplots(figsize=(12, 3.8))
    df = order(df)
    labels = list(df.label.unique())
    colors = [color(m) for m in df.drop_duplicates("label").method]
    dss = [d for d in DATASET_LABELS if d in set(df.dataset)]
    w = 0.8 / len(dss)
    for j, ds in enumerate(dss):
        sub = df[df.dataset == ds].set_index("label").reindex(labels)
        x = np.arange(len(labels)) + (j - (len(dss) - 1) / 2) * w
        bars = ax.bar(x, sub.tps, w, yerr=sub.tps_std, capsize=3, label=DATASET_LABELS[ds],
                      color=colors, alpha=1.0 if j == 0 else 0.55, edgecolor="black", linewidth=0.5)
        for b, s in zip(bars, sub.speedup):
            ax.annotate(f"{s:.2f}×", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                        fontsize=7, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(np.arange(len(labels)), [tick(lab, 13) for lab in labels], fontsize=7.5)
    ax.set_ylabel("throughput (tokens/s)")
    ax.legend(title="left (solid) / right (light)", fontsize=8, title_fontsize=8, loc="upper left")
    ax.set_title("Throughput and speedup vs AR")
    return fig


def ablation(df: pd.DataFrame):
    """Figure 5: throughput with #Iter., and L-bar with acceptance, along the ablation steps."""
    sub = df[df.method != "ar"].sort_values("tag_step")
    x, labels = np.arange(len(sub)), [tick(m, 14) for m in sub.label]
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
            ax.plot(sub[param], sub[col], "o-", color=color(m), label=label(m), ms=4)
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
        ax.axhline(ar, color=color("ar"), ls="--", label="AR")
        ax.axhline(fixed, color=color("fixed_tree"), ls=":", label="Fixed Tree")
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
        ax.scatter(g.ell_bar, g.draft_forwards_per_iter, label=label(m), color=color(m), s=25)
    ax.set_xlabel("mean accepted tokens per iteration (ℓ̄)")
    ax.set_ylabel("draft forwards per iteration")
    ax.legend(fontsize=7)
    return fig


def time_breakdown(df: pd.DataFrame):
    """Where the time goes: milliseconds per generated token in drafting, verification and bookkeeping
    (tree, top-k, commit), plus prefill, per method and dataset (speculative loop rows)."""
    dss = [d for d in DATASET_LABELS if d in set(df.dataset)]
    fig, axes = plt.subplots(1, len(dss), figsize=(6.4 * len(dss), 3.9), sharey=True)
    parts = [("prefill_s", "prefill", "#cccccc"), ("draft_s", "draft", "#1f77b4"), ("verify_s", "verify", "#ff7f0e"),
             ("commit_s", "bookkeeping", "#2ca02c")]
    for ax, ds in zip(np.atleast_1d(axes), dss):
        sub = order(df[(df.dataset == ds) & df.draft_s.notna()])
        x, bottom = np.arange(len(sub)), np.zeros(len(sub))
        tokens = sub["T"].to_numpy(dtype=float)
        for col, name, c in parts:
            v = 1e3 * sub[col].to_numpy(dtype=float) / tokens
            ax.bar(x, v, bottom=bottom, color=c, label=name, edgecolor="black", linewidth=0.4)
            bottom += v
        ar = df[(df.dataset == ds) & (df.method == "ar")]
        if len(ar):
            ax.axhline(1e3 * ar.wall_s.iloc[0] / ar["T"].iloc[0], color="k", ls="--", lw=1, label="AR, whole")
        ax.set_xticks(x, [tick(lab, 11) for lab in sub.label], fontsize=6.5)
        ax.set_title(DATASET_LABELS[ds], fontsize=9)
    np.atleast_1d(axes)[0].set_ylabel("ms per generated token")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def reliability(pair: dict):
    """Reliability diagram of the draft's top-1 probability against agreement with the target's greedy
    token (on the target's continuations), with how many positions fall in each bin."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    for key, style in (("all", "o-"), ("all_human", "s--")):
        bins = [x for x in pair["agreement"][key]["bins"] if x["n"]]
        a.plot([x["confidence"] for x in bins], [x["accuracy"] for x in bins], style,
               label=f"{'continuations' if key == 'all' else 'human text'} (ECE {pair['agreement'][key]['ece']:.3f})")
    a.plot([0, 1], [0, 1], color="gray", lw=0.8)
    a.set_xlabel("draft top-1 probability")
    a.set_ylabel("agreement with the target")
    a.legend(fontsize=7)
    bins = pair["agreement"]["all"]["bins"]
    b.bar([(x["lo"] + x["hi"]) / 2 for x in bins], [x["n"] for x in bins], width=0.09, color="#1f77b4")
    b.set_xlabel("draft top-1 probability")
    b.set_ylabel("positions")
    fig.tight_layout()
    return fig


def chain_acceptance(pair: dict):
    """P(a linear draft is accepted to depth j), and the acceptance at depth j given depth j-1."""
    fig, ax = plt.subplots(figsize=(4.6, 3.2))
    for key in [k for k in pair["agreement"] if not k.endswith("_human")]:
        p = pair["agreement"][key]["chain_acceptance"]
        ax.plot(range(1, len(p) + 1), p, "o-", label=DATASET_LABELS.get(key, "all"))
    ax.set_xlabel("depth j in a linear draft")
    ax.set_ylabel("P(accepted to depth j)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    return fig


def cost_curves(costs: dict):
    """fwd(k) of target and draft in each precision, with the bandwidth bound of one token."""
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    for (dtype, c), ls in zip(costs["curves"].items(), ("-", "--")):
        for role, col in (("target", "#d62728"), ("draft", "#1f77b4"), ("draft_full_vocab", "#9ecae1")):
            if role not in c:
                continue
            ks = sorted(int(k) for k in c[role])
            ax.plot(ks, [c[role][str(k)] if str(k) in c[role] else c[role][k] for k in ks], "o" + ls, color=col, ms=3,
                    label=f"{role.replace('_', ' ')} {dtype}")
        ax.axhline(c["bound"]["ms_per_token"], color="gray", ls=ls, lw=0.8, label=f"target bound {dtype}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens per forward (k)")
    ax.set_ylabel("ms per forward")
    ax.legend(fontsize=7)
    return fig


def cost_model(t: pd.DataFrame):
    """Predicted against measured milliseconds per token, every method and dataset (±10% band)."""
    fig, ax = plt.subplots(figsize=(4.8, 4.2))
    for (lab, prec), g in t.groupby(["Method", "precision"], sort=False):
        ax.scatter(g.predicted, g.measured, s=30, marker="o" if prec != "float32" else "^", label=f"{lab} ({prec})")
    lo, hi = 0.9 * min(t.predicted.min(), t.measured.min()), 1.1 * max(t.predicted.max(), t.measured.max())
    xs = np.linspace(lo, hi, 10)
    ax.plot(xs, xs, "k-", lw=0.8)
    ax.fill_between(xs, 0.9 * xs, 1.1 * xs, color="gray", alpha=0.15)
    ax.set_xlabel("predicted ms / token (cost model)")
    ax.set_ylabel("measured ms / token")
    ax.legend(fontsize=6, ncol=1, loc="upper left")
    return fig
