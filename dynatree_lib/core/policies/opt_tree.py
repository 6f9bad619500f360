"""OPT-Tree (Wang et al., 2024, "OPT-Tree: Speculative Decoding with Adaptive Draft Tree Structure"): per step, the
draft tree of ``n`` nodes that maximizes the expected acceptance length E[A], the sum over its nodes of their path
probabilities (the product of the draft's probabilities along the path: the chance the target accepts that node,
where the draft's probabilities are calibrated).

Since a path's probability only falls along it, the ``n`` most probable nodes of all those drafted form a tree
(``Tree.most_probable``), and that tree maximizes E[A] over the drafted nodes. OPT-Tree drafts greedily, layer by
layer: the root's top-n children, then at each level the top-n by path probability among the children of the
current tree's nodes on the newest layer. Drafting stops when the newest layer raised E[A] (the sum of the top-n
path probabilities drafted so far) by ``delta`` or less (the paper's threshold), or at depth ``D``; the tree
verified is the top-n of every drafted node. With ``delta = 0`` it stops exactly when no node of the new layer
enters the top n, where no deeper node could either: the tree is then the best n-node tree of depth <= D.

One departure from the authors' code (``Jikai0Wang/OPT-Tree``, ``opt_classic/tree.py``), which leaves every tree
unchanged: it feeds the draft all n nodes of each layer; we feed only those among the top n drafted so far (the
current tree), since a node outside it can never re-enter it, nor can its descendants, which are less probable
still. The draft then runs on fewer nodes, and no layer is drafted after the stop: the authors' code checks a
layer's gain one forward late and drops the layer that forward drafted, so its ``max_depth`` = 10 keeps at most
9 levels (our ``D = 9``). The draft's cache holds at most n nodes per level (``(D - 1) * n`` per tree, the runners
reserving 320 slots by default), usually far fewer.

Verification: children are the draft's top ones, chosen, not drawn, and the tree is cut by its nodes'
probabilities (``sampled = False``), so when sampling they are verified by the rule for chosen children
(``sampling``: SpecInfer's).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from .base import DraftPolicy, Session
from ..tree import Tree
from ..validate import check_field_types, is_int, require


@dataclass(frozen=True)
class OptTreeConfig:
    """OPT-Tree (see module docstring): ``n`` drafted nodes verified (root excluded), ``delta`` the least gain in
    E[A] (tokens) for which a layer is expanded further, ``D`` the deepest level. Defaults: the authors' evaluation
    scripts (``--nodes 50 --threshold 0.5 --max_depth 10``, whose trees keep at most 9 levels)."""

    method: ClassVar[str] = "opt_tree"

    n: int = 50
    delta: float = 0.5
    D: int = 9

    def __post_init__(self) -> None:
        check_field_types(self)
        require(is_int(self.n) and self.n >= 1, f"OPT-Tree node budget n must be an integer >= 1, got {self.n!r}")
        require(self.delta >= 0.0, f"OPT-Tree threshold delta must be >= 0, got {self.delta!r}")
        require(is_int(self.D) and self.D >= 1, f"OPT-Tree depth D must be an integer >= 1, got {self.D!r}")

    def policy(self, session: Session | None = None) -> "OptTreePolicy":
        return OptTreePolicy(self)


class OptTreePolicy(DraftPolicy):
    """OPT-Tree's layer-wise greedy search (stateless across iterations)."""

    sampled = False  # ``trim`` cuts by the nodes' probabilities: top children, verified as chosen

    def __init__(self, cfg: OptTreeConfig):
        self.cfg = cfg

    @property
    def n_max(self) -> int:  # at most n new nodes a level
        return self.cfg.n * self.cfg.D

    @property
    def max_depth(self) -> int:
        return self.cfg.D

    @property
    def max_breadth(self) -> int:  # a layer's top n may all hang under one node
        return self.cfg.n

    def select(self, top_lp: list[list[float]], child_cum: list[list[float]], depth: list[int]) -> list[list[bool]]:
        """The layer: the n most probable children of all the frontier's (ties: the first drafted)."""
        ranked = sorted(((c, r, j) for r, row in enumerate(child_cum) for j, c in enumerate(row) if c > -math.inf),
                        key=lambda x: -x[0])
        best = {(r, j) for _, r, j in ranked[:self.cfg.n]}
        return [[(r, j) in best for j in range(len(row))] for r, row in enumerate(child_cum)]

    def expand(self, nodes: list[int], depth: list[int], cum_logp: list[float]) -> list[int]:
        """None once the new layer (``nodes``: every node grows, so they are the whole layer) raised E[A] by
        ``delta`` or less; else its nodes among the n most probable drafted so far (the current tree)."""
        drafted, layer = range(1, len(cum_logp)), set(nodes)
        tree = top_nodes(cum_logp, drafted, self.cfg.n)
        before = top_nodes(cum_logp, [u for u in drafted if u not in layer], self.cfg.n)
        if expected_accepted(cum_logp, tree) - expected_accepted(cum_logp, before) <= self.cfg.delta:
            return []
        kept = set(tree)
        return [u for u in nodes if u in kept]

    def trim(self, tree: Tree, draft_forwards: int) -> Tree:
        return tree.most_probable(self.cfg.n)


def top_nodes(cum_logp: list[float], nodes, n: int) -> list[int]:
    """The ``n`` of ``nodes`` (ascending) with the highest path log-prob (ties: the first)."""
    return sorted(nodes, key=lambda u: -cum_logp[u])[:n]


def expected_accepted(cum_logp: list[float], nodes: list[int]) -> float:
    """E[A] of a tree of ``nodes``: the sum of their path probabilities."""
    return sum(math.exp(cum_logp[u]) for u in nodes)
