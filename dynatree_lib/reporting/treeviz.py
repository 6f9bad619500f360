"""Drafted trees, seen: text for the terminal, drawings, and shape statistics, all from recorded trees.

A recorded tree (``Tree.record``) holds every node's parent, token, draft probability and depth, the
accepted path (node indices from the root), the draft's top-1 probability at the root and the position of
the root token. Records come from ``generate(..., record_trees=n)`` or from the ``trees`` experiment's JSON.
"""
from __future__ import annotations

from collections import Counter

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .. import methods as registry  # noqa: E402
from ..harness.setup import variants  # noqa: E402


def _children(rec: dict) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {i: [] for i in range(len(rec["parents"]))}
    for i, p in enumerate(rec["parents"]):
        if p >= 0:
            kids[p].append(i)
    return kids


def _text(tok, t: int) -> str:
    s = tok.decode([t]) if tok is not None else str(t)
    return repr(s)[1:-1] or "∅"


def format_tree(rec: dict, tok=None) -> str:
    """The tree as indented text: token, draft probability, ✓ on the accepted path."""
    kids, acc = _children(rec), set(rec["accepted"])
    n = len(rec["parents"]) - 1
    lines = [f"@{rec['position']}  root '{_text(tok, rec['tokens'][0])}'  draft conf {rec['root_conf']:.2f}  "
             f"{n} nodes, depth {max(rec['depth'])}, accepted {len(rec['accepted']) - 1}"]

    def walk(i: int, prefix: str) -> None:
        ks = kids[i]
        for j, c in enumerate(ks):
            last = j == len(ks) - 1
            mark = " ✓" if c in acc else ""
            lines.append(f"{prefix}{'└─ ' if last else '├─ '}'{_text(tok, rec['tokens'][c])}' {rec['prob'][c]:.2f}{mark}")
            walk(c, prefix + ("   " if last else "│  "))

    walk(0, "")
    return "\n".join(lines)


def layout(rec: dict) -> tuple[np.ndarray, np.ndarray]:
    """x = depth, y = leaf order (parents centred over their children)."""
    kids = _children(rec)
    y = np.zeros(len(rec["parents"]))
    nxt = [0.0]

    def place(i: int) -> float:
        if not kids[i]:
            y[i] = nxt[0]
            nxt[0] += 1
        else:
            y[i] = np.mean([place(c) for c in kids[i]])
        return y[i]

    place(0)
    return np.array(rec["depth"], dtype=float), -y


def draw_tree(ax, rec: dict, tok=None, title: str = "") -> None:
    """One iteration's tree: edge width from draft probability, accepted path in green, rest dimmed."""
    x, y = layout(rec)
    acc = set(rec["accepted"])
    for i, p in enumerate(rec["parents"]):
        if p < 0:
            continue
        on = i in acc
        ax.plot([x[p], x[i]], [y[p], y[i]], color="#2ca02c" if on else "#999999", alpha=1.0 if on else 0.5,
                lw=0.5 + 4 * rec["prob"][i], zorder=1)
    for i in range(len(x)):
        on = i in acc
        ax.text(x[i], y[i], _text(tok, rec["tokens"][i])[:10], fontsize=6.5, ha="center", va="center", zorder=2,
                color="black" if on or i == 0 else "#666666",
                bbox=dict(boxstyle="round,pad=0.2", fc="#d9f2d9" if on else "white", ec="#2ca02c" if on else "#bbbbbb",
                          lw=0.6))
    ax.set_title(title or f"@{rec['position']}  conf {rec['root_conf']:.2f}", fontsize=8)
    ax.set_xlim(-0.5, max(x) + 0.5)
    ax.set_ylim(min(y) - 0.7, 0.7)
    ax.axis("off")


def tree_table(records: list[dict]) -> pd.DataFrame:
    """One row per recorded tree: method, its label, dataset, prompt, position, size, depth, root breadth, accepted,
    root confidence, nodes per depth."""
    rows = []
    for r in records:
        label = variants.label(r["method"], r["variant"], r["config"], r.get("tags", {}))
        for row in r["rows"]:
            for t in row.get("trees", []):
                per_depth = Counter(t["depth"][1:])
                rows.append({"method": r["method"], "label": label, "dataset": r["dataset"],
                             "prompt_id": row["prompt_id"], "position": t["position"], "nodes": len(t["parents"]) - 1,
                             "depth": max(t["depth"]), "root_breadth": per_depth.get(1, 0),
                             "accepted": len(t["accepted"]) - 1, "root_conf": t["root_conf"],
                             "per_depth": [per_depth.get(d, 0) for d in range(1, max(t["depth"]) + 1)], "tree": t})
    return pd.DataFrame(rows)


def by_label(out: pd.DataFrame, trees: pd.DataFrame) -> pd.DataFrame:
    """``out``, whose first index level is the method, with each method shown by its label."""
    labels = dict(zip(trees.method, trees.label))
    return out.rename(index=labels, level=0).rename_axis(["label", *out.index.names[1:]])


def shape_summary(trees: pd.DataFrame) -> pd.DataFrame:
    """Per method and dataset: mean and spread of tree size, depth, root breadth and accepted length."""
    g = trees.groupby(["method", "dataset"], sort=False)
    out = pd.DataFrame({"trees": g.size(), "nodes": g.nodes.mean(), "nodes sd": g.nodes.std(),
                        "depth": g.depth.mean(), "depth sd": g.depth.std(), "root breadth": g.root_breadth.mean(),
                        "accepted": g.accepted.mean(), "accepted / node": g.accepted.sum() / g.nodes.sum()})
    return by_label(out, trees)


def by_confidence(trees: pd.DataFrame, edges=(0, 0.2, 0.4, 0.6, 0.8, 1.0)) -> pd.DataFrame:
    """Tree depth, root breadth and accepted length against the draft's confidence at the root (binned):
    does a method deepen where the draft is sure and widen where it hesitates?"""
    t = trees.assign(conf=pd.cut(trees.root_conf, list(edges), include_lowest=True))
    g = t.groupby(["method", "conf"], observed=True, sort=False)
    out = pd.DataFrame({"trees": g.size(), "depth": g.depth.mean(), "root breadth": g.root_breadth.mean(),
                        "nodes": g.nodes.mean(), "accepted": g.accepted.mean()})
    return by_label(out, trees)


def label_of(trees: pd.DataFrame, method: str) -> str:
    return trees[trees.method == method].label.iloc[0]


def depth_heatmap(ax, trees: pd.DataFrame, method: str, max_depth: int = 10) -> None:
    """Mean nodes per depth level, for trees binned by root confidence (rows) of one method."""
    sub = trees[trees.method == method]
    edges = np.linspace(0, 1, 6)
    mat = np.full((5, max_depth), np.nan)
    for b in range(5):
        sel = sub[(sub.root_conf >= edges[b]) & (sub.root_conf < edges[b + 1] + (b == 4))]
        if len(sel):
            m = np.zeros(max_depth)
            for pd_ in sel.per_depth:
                m[:min(len(pd_), max_depth)] += pd_[:max_depth]
            mat[b] = m / len(sel)
    im = ax.imshow(mat, aspect="auto", cmap="viridis", origin="lower")
    ax.set_xticks(range(max_depth), range(1, max_depth + 1), fontsize=7)
    ax.set_yticks(range(5), [f"{edges[b]:.1f}-{edges[b + 1]:.1f}" for b in range(5)], fontsize=7)
    ax.set_xlabel("depth")
    ax.set_ylabel("root confidence")
    ax.set_title(label_of(trees, method), fontsize=9)
    plt.colorbar(im, ax=ax, label="nodes per tree")


def informative(trees: pd.DataFrame, method: str = registry.DYNATREE, min_nodes: int = 4) -> tuple[str, int]:
    """(prompt, position) of an iteration worth drawing: one of ``method``'s trees with at least ``min_nodes``
    nodes that branches and accepts the most tokens (the earliest such), rather than a trivial one."""
    sub = trees[trees.method == method]
    widest = sub.per_depth.map(lambda d: max(d, default=0))  # an iteration that drafted nothing has no depths
    rich = sub[(sub.nodes >= min_nodes) & (sub.root_breadth + widest > 2)]
    pick = (rich if len(rich) else sub).sort_values(["accepted", "nodes", "position"], ascending=[False, False, True])
    r = pick.iloc[0]
    return r.prompt_id, int(r.position)


def side_by_side(trees: pd.DataFrame, methods: list[str], prompt_id: str, position: int, tok=None):
    """The trees of several methods for the same prompt at (or right after) the same position."""
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods), 4.2))
    for ax, m in zip(np.atleast_1d(axes), methods):
        sub = trees[(trees.method == m) & (trees.prompt_id == prompt_id) & (trees.position >= position)]
        if len(sub):
            r = sub.sort_values("position").iloc[0]
            draw_tree(ax, r.tree, tok, f"{r.label}  @{r.position}  conf {r.root_conf:.2f}")
    fig.tight_layout()
    return fig


def strip(trees: pd.DataFrame, method: str, prompt_id: str, start: int = 0, n: int = 6, *, tok=None):
    """Consecutive iterations of one method on one prompt: the shape follows the draft's confidence."""
    sub = trees[(trees.method == method) & (trees.prompt_id == prompt_id)].sort_values("position")
    sub = sub[sub.position >= start].head(n)
    fig, axes = plt.subplots(1, len(sub), figsize=(2.6 * len(sub), 3.6))
    for ax, (_, r) in zip(np.atleast_1d(axes), sub.iterrows()):
        draw_tree(ax, r.tree, tok)
    fig.suptitle(f"{label_of(trees, method)}: {n} consecutive iterations", fontsize=9)
    fig.tight_layout()
    return fig


def scatter_accepted_vs_size(trees: pd.DataFrame):
    """Accepted length against tree size, per method (jittered)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.5, 3.4))
    rng = np.random.default_rng(0)
    for m, g in trees.groupby("method", sort=False):
        lab = label_of(trees, m)
        a.scatter(g.nodes + rng.uniform(-0.3, 0.3, len(g)), g.accepted + rng.uniform(-0.2, 0.2, len(g)), s=6,
                  alpha=0.4, label=lab)
        c = by_confidence(g).reset_index()
        c = c.assign(mid=[iv.mid for iv in c.conf]).sort_values("mid")
        b.plot(c.mid, c.depth, "o-", label=lab)
    a.set_xlabel("drafted nodes")
    a.set_ylabel("accepted tokens")
    a.legend(fontsize=7)
    b.set_xlabel("draft confidence at the root (bin centre)")
    b.set_ylabel("mean tree depth")
    b.legend(fontsize=7)
    fig.tight_layout()
    return fig


WHY = {"start": "the method's own budget, to start", "best": "the most tokens per ms expected",
       "climb": "the last tree was accepted whole: the method's own budget",
       "ar_step": "no tree is expected to beat a plain AR step", "probe": "a probe: drafting may pay again"}


def format_decision(d: dict) -> str:
    """What the controller chose for one tree (``GenerationResult.decisions``), for ``show-tree``."""
    what = "an AR step (no tree)" if d["budget"] == 0 else f"a budget of {d['budget']} nodes"
    return f"controller: {what}: {WHY[d['why']]} ({d['rate']:.3f} tokens per modelled ms)"
