"""The drafting policy's contract: how a draft tree is shaped, level by level, and how it adapts.

Every tree method (linear chain and fixed tree in ``static``, DynaTree, TALON, EAGLE-3's tree, OPT-Tree) is a frozen
configuration dataclass whose ``policy()`` returns a fresh ``DraftPolicy`` for one generation. The drafter
(``drafter.draft_tree``) asks the policy, for a whole level at once, which candidate children to keep (``select``),
which new nodes grow (``expand``) and how the next level comes (``next_level``: drafted, copied from the context
lookup, or not at all); after each verification the loop tells the policy what was accepted (``observe``). A level
has a few nodes, so the policy sees plain Python lists and numbers (tensor ops cost more than the rule here).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ..tree import Tree


DRAFT, COPY, STOP = "draft", "copy", "stop"  # how the next level comes (``DraftPolicy.next_level``)


@dataclass
class Level:
    """What the drafter knows before a level: ``cum_logp``, the path log-probs of every node so far (root first);
    ``frontier``, the nodes the level would expand; ``draft_forwards``, the draft forwards so far; ``copies()``, each
    frontier node's context-lookup copy (token, weight), or None where it has none (looked up on demand; None
    altogether where the draft has no lookup). A policy that takes copies lists those it counts strong in
    ``strong`` (node, token): the loop then tells it how often the target took them (``Outcome``)."""

    cum_logp: list[float]
    frontier: list[int]
    draft_forwards: int
    copies: Callable[[], list[tuple[int, float] | None] | None]
    strong: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class Outcome:
    """A verification, as the loop tells the policy: ``accepted`` draft tokens of a tree ``tree_depth`` deep were
    committed; of the strong copies (``Level.strong``) on the accepted path, ``copies_met``, after ``copies_taken``
    of which the target's next token was the copy."""

    accepted: int
    tree_depth: int
    copies_met: int = 0
    copies_taken: int = 0


class DraftPolicy:
    """Shapes one generation's draft trees (the drafter grows each tree one level per draft forward).

    A policy defines ``n_max`` (drafted-node budget per tree, root excluded), ``max_depth`` (no node deeper)
    and ``max_breadth`` (the most children any node can get: the drafter computes this many top-k
    candidates), and the two rules of growth: ``select`` (which candidates become nodes) and ``expand`` (which new
    nodes get children). The other hooks have defaults that leave the drafter and the loop as they are.
    """

    n_max: int
    max_depth: int
    max_breadth: int
    #: when sampling (temperature > 0): the children the policy gives a node (at levels the network drafts) are
    #: drawn without replacement from the draft's law there; False: its top-k children. Either is verified
    #: losslessly (``sampling``); a policy whose ``trim`` cuts a tree by its nodes' own probabilities needs False
    sampled: bool = True

    def begin(self) -> None:
        """Before each tree, before the drafter reads ``n_max`` and ``max_depth`` (a controller sets them here; a
        depth of 0 makes the tree the root alone: a plain AR step)."""

    def select(self, top_logp: list[list[float]], child_cum_logp: list[list[float]],
               depth: list[int]) -> list[list[bool]]:
        """Which candidate children to keep: ``top_logp[r]`` are the draft's sorted top-k log-probs under the
        r-th frontier node (at ``depth[r]``), ``child_cum_logp[r]`` those children's path log-probs. Returns
        one list of booleans per frontier node, parallel to its candidates."""
        raise NotImplementedError

    def expand(self, nodes: list[int], depth: list[int], cum_logp: list[float]) -> list[int]:
        """Which of a level's new nodes (``nodes``, ascending) get children next level; ``depth`` and ``cum_logp``
        hold every node of the tree so far (root first)."""
        raise NotImplementedError

    def next_level(self, level: Level) -> str:
        """How the next level comes: ``DRAFT`` (a draft forward), ``COPY`` (each frontier node's lookup copy, no
        forward; only where ``level.copies()`` has one for every node) or ``STOP``."""
        return DRAFT

    def observe(self, outcome: Outcome) -> None:
        """After each verification (``Outcome``)."""

    def finish(self, tokens: int, iterations: int) -> None:
        """After a generation: ``tokens`` committed in ``iterations`` verifications."""

    def trim(self, tree: Tree, draft_forwards: int) -> Tree:
        """The tree to verify, cut from the drafted one."""
        return tree

    def trace(self) -> list[dict] | None:
        """What the policy decided, one entry per tree, for the generation's result (None: nothing to log)."""
        return None


def keep_top(k: int, tau: float, child_cum: list[float]) -> list[bool]:
    """Keep a parent's top-k children (``child_cum`` sorted) whose cumulative probability is at least tau."""
    log_tau = math.log(tau) if tau > 0 else -math.inf
    return [j < k and c >= log_tau for j, c in enumerate(child_cum)]


class Session:
    """What a run keeps across its generations, for a policy that adapts across prompts (DynaTree's authors' history
    controller, ``history_scope="prompt"``): one state per configuration, made by ``make`` at its first generation."""

    def __init__(self) -> None:
        self.states: dict = {}

    def state(self, cfg, make):
        """``cfg``'s state in this run (``make(cfg)`` at its first generation)."""
        if cfg not in self.states:
            self.states[cfg] = make(cfg)
        return self.states[cfg]
