"""EAGLE-3's dynamic draft tree: EAGLE-2's algorithm (Li et al., 2024, "EAGLE-2: Faster Inference of Language
Models with Dynamic Draft Trees"), as SafeAILab/EAGLE drafts it for its EAGLE-3 heads (``Model.topK_genrate`` in
``eagle/model/cnets.py``).

Expand: the root gets its ``top_k`` most probable children, all of which grow; then, ``depth`` times, the grown
nodes are fed to the draft at once and each gets its own top-k children, of which only the top-k of the whole
level by path probability (cumulative draft log-probability) grow further. Every level after the first thus holds
k * k nodes and feeds k to the draft. Rerank: of every drafted node, the ``total_tokens - 1`` of highest path
probability are verified with the root (``Tree.most_probable``: closed under ancestors, since a path's probability
only falls along it; ties: the node drafted first, where EAGLE's ``topk`` leaves them unspecified).

Defaults are EAGLE-3's (``EaModel.from_pretrained``: ``total_token=60, depth=7, top_k=10``): 8 draft forwards,
10 + 7 * 100 = 710 drafted nodes, 60 verified tokens (the root included, as EAGLE counts them), trees up to 8
deep. EAGLE's ``total_token=-1`` (the size that times fastest on the GPU at hand) is not reproduced: tuning picks
the budget instead.

Verification: children are the draft's top-k, chosen, not drawn, and the tree is cut by its nodes' probabilities
(``sampled = False``), so when sampling they are verified by the rule for chosen children (``sampling``:
SpecInfer's; in law the same as EAGLE's ``evaluate_posterior``, which accepts each candidate with the target's
residual probability, q = 1).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from .base import DraftPolicy, Session
from ..tree import Tree
from ..validate import check_field_types, is_int, require


@dataclass(frozen=True)
class Eagle3TreeConfig:
    """EAGLE-3's dynamic tree (see module docstring): ``depth`` draft forwards after the first (trees reach
    ``depth + 1`` levels), ``top_k`` children per grown node and grown nodes per level, ``total_tokens`` verified
    (the root, i.e. the pending token, included: ``total_tokens - 1`` drafted nodes)."""

    method: ClassVar[str] = "eagle3_tree"

    depth: int = 7
    top_k: int = 10
    total_tokens: int = 60

    def __post_init__(self) -> None:
        check_field_types(self)
        require(is_int(self.depth) and self.depth >= 0, f"EAGLE depth must be an integer >= 0, got {self.depth!r}")
        require(is_int(self.top_k) and self.top_k >= 1, f"EAGLE top_k must be an integer >= 1, got {self.top_k!r}")
        require(is_int(self.total_tokens) and self.total_tokens >= 2,
                f"EAGLE total_tokens (the root included) must be an integer >= 2, got {self.total_tokens!r}")

    def policy(self, session: Session | None = None) -> "Eagle3TreePolicy":
        return Eagle3TreePolicy(self)


class Eagle3TreePolicy(DraftPolicy):
    """EAGLE-2's expansion and reranking (stateless across iterations)."""

    sampled = False  # ``trim`` cuts by the nodes' probabilities: top-k children, verified as chosen

    def __init__(self, cfg: Eagle3TreeConfig):
        self.cfg = cfg

    @property
    def n_max(self) -> int:  # every node EAGLE drafts: k at the root's level, k * k at each later one
        return self.cfg.top_k + self.cfg.depth * self.cfg.top_k ** 2

    @property
    def max_depth(self) -> int:
        return self.cfg.depth + 1

    @property
    def max_breadth(self) -> int:
        return self.cfg.top_k

    def select(self, top_lp: list[list[float]], child_cum: list[list[float]], depth: list[int]) -> list[list[bool]]:
        """Each grown node keeps its top-k children (any the draft gives probability)."""
        return [[c > -math.inf for c in row] for row in child_cum]

    def expand(self, nodes: list[int], depth: list[int], cum_logp: list[float]) -> list[int]:
        """The level's top-k nodes by path probability (ties: the node drafted first)."""
        return sorted(sorted(nodes, key=lambda u: -cum_logp[u])[:self.cfg.top_k])

    def trim(self, tree: Tree, draft_forwards: int) -> Tree:
        return tree.most_probable(self.cfg.total_tokens - 1)
