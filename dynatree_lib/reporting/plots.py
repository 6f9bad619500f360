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
from ..core.drafts.heads.kinds import HEAD_KINDS  # noqa: E402
from ..harness.setup.variants import MAIN, NETWORK_ALONE  # noqa: E402
from ..harness.setup.workloads import POOLED, label as workload_label  # noqa: E402
from .formatting import present  # noqa: E402
from .intervals import experiment_run_variance, paired_measured  # noqa: E402
from .records import order, row_id  # noqa: E402
from .serving import serving_figure  # noqa: E402,F401  (notebook 12's, beside its tables)


def color(method: str) -> str:
    """A registered method's colour (unknown names: dark grey)."""
    m = registry.REGISTRY.get(method)
    return m.display.color if m else "#333"


def row_color(method: str, heads=None) -> str:
    """A row's colour: its head kind's where it drafts with a head of its own (``tag_heads``: Medusa, Hydra), else
    its method's, so that rows sharing a policy over other heads do not share a colour."""
    return HEAD_KINDS[heads].color if isinstance(heads, str) and heads in HEAD_KINDS else color(method)


def label(method: str) -> str:
    """A registered method's label (unknown names: the name)."""
    m = registry.REGISTRY.get(method)
    return m.display.label if m else method


plt.rcParams.update({"figure.dpi": 110, "savefig.bbox": "tight", "axes.grid": True, "grid.alpha": 0.3})


def save(fig, name: str, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "pdf"):
        fig.savefig(out_dir / f"{name}.{ext}", metadata={"CreationDate": None} if ext == "pdf" else None)
    return out_dir / f"{name}.png"


def tick(label: str, width: int = 12) -> str:
    """A method label wrapped onto lines of about ``width`` characters (the extension's labels are long)."""
    return textwrap.fill(label, width, break_long_words=False)


def paper_comparison(df: pd.DataFrame) -> pd.Series:
    """The rows of the main figure: the paper's methods and ours (registry roles "paper" and "extension"), each
    in its main variant (tuned where the profile tunes) with the profile's draft: not a control (the draft network
    without its lookup), not another variant (the paper's settings, the extension without a part of it)."""
    main = registry.names("paper") + registry.names("extension")
    return df.method.isin(main) & (df.variant == MAIN)


REPLICATE_MARKERS = ("o", "D", "s", "^")  # replicate 1 filled, the others hollow
GREY = "#b0b0b0"  # a reference row: shown for comparison, not the figure's subject


def _speedup_row(ax, rows: pd.DataFrame, y: float, colour: str) -> None:
    """One method's speedup in each replicate: a marker with its 95% interval, the value beside it."""
    reps = sorted(rows.replicate.unique())
    for j, (_, r) in enumerate(rows.sort_values("replicate").iterrows()):
        yj = y - (j - (len(reps) - 1) / 2) * 0.3  # replicate 1 on top
        lo, hi = (r.speedup, r.speedup) if pd.isna(r.speedup_lo) else (r.speedup_lo, r.speedup_hi)
        ax.errorbar(r.speedup, yj, xerr=[[r.speedup - lo], [hi - r.speedup]], fmt=REPLICATE_MARKERS[j % 4], ms=5,
                    color=colour, mfc=colour if j == 0 else "white", capsize=2.5, lw=1.2)
        if r.method != registry.AR:
            ax.annotate(f"{r.speedup:.2f}", (hi, yj), xytext=(4, 0), textcoords="offset points", va="center",
                        fontsize=6.5, color="#333")


def speedup_panels(df: pd.DataFrame, reference: pd.Series | None = None, title: str = ""):
    """Speedup over AR on the same prompts, one panel per workload, one row per method and variant (registry order),
    each replicate a marker with its 95% paired bootstrap interval; ``reference`` rows are drawn in ``GREY``."""
    df = order(df)
    grey = reference.reindex(df.index, fill_value=False) if reference is not None else pd.Series(False, index=df.index)
    rows = list(df.row.unique())
    labels = [dict(zip(df.row, df.label))[r] for r in rows]
    colours = {r: GREY if g else color(m) for r, m, g in zip(df.row, df.method, grey)}
    dss = present(df.dataset)
    fig, axes = plt.subplots(1, len(dss), figsize=(3.9 * len(dss) + 1.5, 0.42 * len(rows) + 1.3), sharex=True,
                             sharey=True, squeeze=False)
    for ax, ds in zip(axes[0], dss):
        sub = df[df.dataset == ds]
        for i, r in enumerate(rows):
            _speedup_row(ax, sub[sub.row == r], -i, colours[r])
        ax.axvline(1, color=color(registry.AR), ls="--", lw=0.8)
        ax.set_title(workload_label(ds), fontsize=10)
        ax.set_xlabel("speedup over AR (×)", fontsize=8)
        ax.grid(axis="y", visible=False)
    lo = min(np.nanmin(df[["speedup", "speedup_lo"]].to_numpy()), 1)
    hi = max(np.nanmax(df[["speedup", "speedup_hi"]].to_numpy()), 1)
    axes[0, 0].set_xlim(lo - 0.05 * (hi - lo), hi + 0.18 * (hi - lo))  # AR's line, and room for the value labels
    axes[0, 0].set_yticks(-np.arange(len(labels)), [tick(lab, 30) for lab in labels], fontsize=8)
    for t, r in zip(axes[0, 0].get_yticklabels(), rows):
        t.set_color("#808080" if colours[r] == GREY else "black")
    _replicate_legend(fig, sorted(df.replicate.unique()), reference is not None)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _replicate_legend(fig, reps: list, with_reference: bool) -> None:
    """The replicates' markers (and the grey reference rows), below the panels where they cover no data."""
    handles = [plt.Line2D([], [], marker=REPLICATE_MARKERS[j % 4], color="black", mfc="black" if j == 0 else "white",
                          ls="-", lw=1.2, label=f"replicate {int(r) + 1} (95% interval)") for j, r in enumerate(reps)]
    if with_reference:
        handles.append(plt.Line2D([], [], marker="o", color=GREY, ls="-", label="the main figure's row"))
    handles.append(plt.Line2D([], [], color=color(registry.AR), ls="--", lw=0.8, label="AR (1×)"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.06))


def main_speedup(df: pd.DataFrame):
    """Figure 4: the paper's comparison (``paper_comparison``) as speedup over AR with 95% intervals, per workload
    and replicate."""
    return speedup_panels(df[paper_comparison(df)], title="Speedup over AR on the same test prompts: the paper's "
                          "methods and our extension")


def controls_and_variants(df: pd.DataFrame):
    """Figure 4b: every other row of the main run (controls: the draft network alone; variants: the paper's
    settings, the extension without a part of it; the other seed systems), each below its method's main row
    in grey (where it has one)."""
    main = paper_comparison(df)
    varied = df[~main].method.unique()
    return speedup_panels(df[(df.method != registry.AR) & (~main | df.method.isin(varied))], reference=main,
                          title="Controls and variants, each below its method's main row (grey): speedup over AR on "
                          "the same test prompts")


def ablation(df: pd.DataFrame):
    """Figure 5: throughput with #Iter., and L-bar with acceptance, along the ablation steps (replicate 1)."""
    sub = df[(df.method != registry.AR) & (df.replicate == df.replicate.min())].sort_values("tag_step")
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
            if col in ("ell_bar", "accept_rate") and m == registry.AR:
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
    sub = df[df.method != registry.AR]
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
    ar = df[df.method == registry.AR].tps.iloc[0]
    fixed = df[df.method == registry.FIXED_TREE].tps.iloc[0]
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
        ax.axhline(ar, color=color(registry.AR), ls="--", label=label(registry.AR))
        ax.axhline(fixed, color=color(registry.FIXED_TREE), ls=":", label=label(registry.FIXED_TREE))
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
    dss = present(df.dataset)
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
        ar = df[(df.dataset == ds) & (df.method == registry.AR)]
        if len(ar):
            ax.axhline(1e3 * ar.wall_s.iloc[0] / ar["T"].iloc[0], color="k", ls="--", lw=1, label="AR, whole")
        ax.set_xticks(x, [tick(lab, 11) for lab in sub.label], fontsize=6.5)
        ax.set_title(workload_label(ds), fontsize=9)
    np.atleast_1d(axes)[0].set_ylabel("ms per generated token")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def reliability(pair: dict, head: str = "agreement"):
    """Reliability diagram of the draft's top-1 probability against agreement with the target's greedy token,
    one panel per workload (on the target's output, and dashed on the human text), with how many positions fall
    in each bin. ``head``: which draft (``agreement``: as it drafts; ``agreement_no_lookup``: the network alone)."""
    from .formatting import scope_label

    scopes = [k for k in pair[head] if "/" not in k and not k.endswith("_human") and k not in ("all", POOLED)]
    fig, axes = plt.subplots(2, len(scopes), figsize=(3.4 * len(scopes), 5.6), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 1]})
    for j, key in enumerate(scopes):
        a, b = axes[0, j], axes[1, j]
        for k, style, what in ((key, "o-", "target's output"), (key + "_human", "s--", "human text")):
            if k in pair[head]:
                bins = [x for x in pair[head][k]["bins"] if x["n"]]
                a.plot([x["confidence"] for x in bins], [x["accuracy"] for x in bins], style, ms=3,
                       label=f"{what} (ECE {pair[head][k]['ece']:.3f})")
        a.plot([0, 1], [0, 1], color="gray", lw=0.8)
        a.set_title(scope_label(key), fontsize=9)
        a.set_xlabel("draft top-1 probability", fontsize=8)
        a.legend(fontsize=6)
        bins = pair[head][key]["bins"]
        b.bar([(x["lo"] + x["hi"]) / 2 for x in bins], [x["n"] for x in bins], width=0.09, color="#1f77b4")
        b.set_xlabel("draft top-1 probability", fontsize=8)
    axes[0, 0].set_ylabel("agreement with the target")
    axes[1, 0].set_ylabel("positions")
    fig.tight_layout()
    return fig


def chain_acceptance(pair: dict):
    """P(a linear draft is accepted to depth j), and the acceptance at depth j given depth j-1."""
    fig, ax = plt.subplots(figsize=(4.6, 3.2))
    from .formatting import scope_label

    for key in [k for k in pair["agreement"] if not k.endswith("_human") and "/" not in k]:
        p = pair["agreement"][key]["chain_acceptance"]
        ax.plot(range(1, len(p) + 1), p, "o-", label=scope_label(key))
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
    ax.set_yscale("log")
    ax.set_xlabel("tokens per forward (k)")
    ax.set_ylabel("ms per forward (log)")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    return fig


def cost_model(t: pd.DataFrame):
    """Predicted against measured milliseconds per token, every method and dataset (±10% band)."""
    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    markers = "osD^v<>pPX*hH8d"
    for i, ((lab, prec), g) in enumerate(t.groupby(["Method", "precision"], sort=False)):
        ax.scatter(g.predicted, g.measured, s=28, marker=markers[i % len(markers)],
                   facecolors="none" if prec == "float32" else None, label=f"{lab} ({prec})")
    lo, hi = 0.9 * min(t.predicted.min(), t.measured.min()), 1.1 * max(t.predicted.max(), t.measured.max())
    xs = np.geomspace(lo, hi, 20)
    ax.plot(xs, xs, "k-", lw=0.8)
    ax.fill_between(xs, 0.9 * xs, 1.1 * xs, color="gray", alpha=0.15)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted ms / token (cost model)")
    ax.set_ylabel("measured ms / token")
    ax.legend(fontsize=6, ncol=1, loc="center left", bbox_to_anchor=(1.02, 0.5))
    return fig


def sampling(df: pd.DataFrame):
    """Speedup over AR sampling at each temperature, per workload and method (the draft with its lookup), with its
    95% paired bootstrap interval over prompts (replicate 1; the table gives every replicate's)."""
    df = df[df.replicate == df.replicate.min()]
    temps = sorted(df.temperature.unique())
    dss = present(df.dataset)
    fig, axes = plt.subplots(1, len(dss), figsize=(4.2 * len(dss), 3.6), squeeze=False, sharey=True)
    for ax, ds in zip(axes[0], dss):
        sub = order(df[(df.dataset == ds) & (df.method != registry.AR)])
        rows = list(sub.row.unique())
        labels = [dict(zip(sub.row, sub.label))[r] for r in rows]
        w = 0.8 / len(temps)
        for j, t in enumerate(temps):
            g = sub[sub.temperature == t].set_index("row").reindex(rows)
            x = np.arange(len(labels)) + (j - (len(temps) - 1) / 2) * w
            err = [(g.speedup - g.speedup_lo).clip(lower=0), (g.speedup_hi - g.speedup).clip(lower=0)]
            ax.bar(x, g.speedup, w, yerr=err, capsize=2, error_kw={"lw": 0.8},
                   color=[color(m) for m in g.method.fillna("")], alpha=1.0 if j == 0 else 0.55,
                   edgecolor="black", linewidth=0.5, label=f"T = {t:g}")
        ax.axhline(1, color="gray", lw=0.8)
        ax.set_xticks(np.arange(len(labels)), [tick(lab, 12) for lab in labels], fontsize=6, rotation=90)
        ax.set_title(workload_label(ds), fontsize=9)
    axes[0, 0].set_ylabel("speedup over AR sampling")
    axes[0, 0].legend(fontsize=7, title="temperature (left to right)", title_fontsize=7)
    fig.tight_layout()
    return fig


def delta_tau(df: pd.DataFrame):
    """TALON's Figure 6: draft forwards per verification (δ, x) against tokens per verification (τ = L̄, y), one
    panel per temperature (rows) and workload (columns), replicate 1: each drafting method's prompts as small points
    and its mean over them as a large marker, with TALON's zero-waste oracle τ = δ (dashed grey). A method far below
    the line pays draft forwards that commit nothing; one near it drafts only what verifies."""
    df = order(df[(df.method != registry.AR) & (df.replicate == df.replicate.min())])
    temps, dss = sorted(df.temperature.unique()), present(df.dataset)
    fig, axes = plt.subplots(len(temps), len(dss), figsize=(3.6 * len(dss) + 1.0, 3.2 * len(temps) + 0.6),
                             squeeze=False, sharex=True, sharey=True)
    for i, t in enumerate(temps):
        for j, ds in enumerate(dss):
            ax = axes[i, j]
            for _, r in df[(df.temperature == t) & (df.dataset == ds)].iterrows():
                c = row_color(r.method, r.get("tag_heads"))
                ax.scatter([x["draft_forwards_per_iter"] for x in r.rows], [x["L_bar"] for x in r.rows], s=9,
                           alpha=0.35, color=c)
                ax.scatter(r.draft_forwards_per_iter, r.L_bar, s=55, color=c, edgecolors="black", label=r.label,
                           zorder=3)
            ax.axline((0, 0), slope=1, color="gray", ls="--", lw=0.8, label="oracle τ = δ")
            ax.set_title(f"{workload_label(ds)}, T = {t:g}", fontsize=9)
            ax.set_xlabel("δ: draft forwards per verification", fontsize=8)
        axes[i, 0].set_ylabel("τ: tokens per verification (MAT)", fontsize=8)
    top = 1.08 * max([1.0] + [max(x["draft_forwards_per_iter"], x["L_bar"]) for rows in df.rows for x in rows])
    axes[0, 0].set_xlim(0, top)  # one scale on both axes: the oracle is the diagonal
    axes[0, 0].set_ylim(0, top)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.04))
    fig.tight_layout()
    return fig


def frontier(points: pd.DataFrame, reported: dict | None = None):
    """The budget frontier: τ (tokens per verification, y) against draft nodes verified per iteration (x, log
    scale), one line per method through its budgets with 95% intervals over prompts (dashed: on a draft model), one
    panel per temperature (rows) and workload (columns). ``reported``: {(workload, temperature): [(label, method,
    nodes, τ)]}, the papers' numbers at their own setting, in an inset of each panel with its own τ axis (their τ of
    6-7 would squeeze ours; hollow stars; nodes None: a dotted line, the paper giving no tree size)."""
    temps, dss = sorted(points.temperature.unique()), present(points.dataset)
    fig, axes = plt.subplots(len(temps), len(dss), figsize=(3.8 * len(dss) + 1.0, 3.4 * len(temps) + 0.8),
                             squeeze=False, sharex=True)
    for i, t in enumerate(temps):
        for j, ds in enumerate(dss):
            ax = axes[i, j]
            here = points[(points.temperature == t) & (points.dataset == ds)]
            for row, g in here.groupby("row", sort=False):
                g, on_model = g.sort_values("nodes"), isinstance(g.draft_model.iloc[0], str)
                ax.errorbar(g.nodes, g.tau, yerr=[g.tau - g.tau_lo, g.tau_hi - g.tau], marker="s" if on_model else "o",
                            ms=4, lw=1.2, ls="--" if on_model else "-", capsize=2, label=g.label.iloc[0],
                            color=row_color(g.method.iloc[0], g.heads.iloc[0]))
            if papers := (reported or {}).get((ds, t)):
                papers_inset(ax, papers)
            ax.set_xscale("log", base=2)
            ax.tick_params(labelbottom=True)  # every panel keeps its node ticks
            ax.set_title(f"{workload_label(ds)}, T = {t:g}", fontsize=9)
            ax.set_xlabel("draft nodes verified per iteration", fontsize=8)
        axes[i, 0].set_ylabel("τ: tokens per verification", fontsize=8)
    handles = {}
    for ax in (a for panel in axes.flat for a in (panel, *panel.child_axes)):  # the insets hold the papers' points
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(len(handles), 4), fontsize=8,
               frameon=False, bbox_to_anchor=(0.5, -0.08))
    fig.tight_layout()
    return fig


def papers_inset(ax, papers: list) -> None:
    """The papers' τ at their own settings, in a small inset at the panel's upper left with a τ axis of its own."""
    inset = ax.inset_axes([0.06, 0.6, 0.34, 0.34])
    for name, method, nodes, tau in papers:
        if nodes is None:
            inset.axhline(tau, color=color(method), ls=":", lw=1, label=name)
        else:
            inset.scatter([nodes], [tau], marker="*", s=70, facecolors="none", edgecolors=color(method),
                          linewidths=1.2, label=name, zorder=4)
    inset.set_xscale("log", base=2)
    inset.set_title("papers", fontsize=6, pad=2)
    inset.tick_params(labelsize=5, pad=1)
    inset.grid(alpha=0.3)
    taus = [tau for *_, tau in papers]
    inset.set_ylim(min(taus) - 1, max(taus) + 1)


def dynatree_vs_baselines(df: pd.DataFrame):
    """The paper's central comparison directly: DynaTree's throughput over linear drafting's and over the tuned
    fixed tree's on the same prompts, per workload, drafting with the draft model and its lookup and with the
    network alone; each replicate a marker with its paired bootstrap interval, and the bar behind them the
    interval that holds the run-to-run noise (``intervals``, the scorecard's)."""
    pairs = [(f"over {label(b)}{suffix}", row_id(registry.DYNATREE, v), row_id(b, v), color(b))
             for v, suffix in ((MAIN, ""), (NETWORK_ALONE, ", network alone"))
             for b in (registry.LINEAR, registry.FIXED_TREE)]
    dss = present(df.dataset)
    fig, axes = plt.subplots(1, len(dss), figsize=(3.9 * len(dss) + 1.5, 0.5 * len(pairs) + 1.4), sharex=True,
                             sharey=True, squeeze=False)
    run_var = experiment_run_variance(df)
    for ax, ds in zip(axes[0], dss):
        for i, (_, a, b, c) in enumerate(pairs):
            m = paired_measured(df[df.dataset == ds], a, b, run_var=run_var).get(ds)
            if m is None:
                continue
            ax.barh(-i, m.interval.hi - m.interval.lo, left=m.interval.lo, height=0.6, color=c, alpha=0.25)
            for j, r in enumerate(m.replicates):
                yj = -i - (j - (len(m.replicates) - 1) / 2) * 0.25
                ax.errorbar(r.value, yj, xerr=[[r.value - r.lo], [r.hi - r.value]], fmt=REPLICATE_MARKERS[j % 4],
                            ms=5, color=c, mfc=c if j == 0 else "white", capsize=2.5, lw=1.2)
        ax.axvline(1, color=color(registry.AR), ls="--", lw=0.8)
        ax.set_title(workload_label(ds), fontsize=10)
        ax.set_xlabel("DynaTree's throughput over the baseline's (×)", fontsize=8)
        ax.grid(axis="y", visible=False)
    axes[0, 0].set_yticks(-np.arange(len(pairs)), [p[0] for p in pairs], fontsize=8)
    fig.suptitle("DynaTree against linear drafting and the fixed tree, same prompts", fontsize=10)
    fig.tight_layout()
    return fig
