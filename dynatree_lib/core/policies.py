"""Drafting policies: how a draft tree is shaped, level by level, and how it adapts.

Every tree method (linear chain, fixed tree, DynaTree, TALON here; EAGLE-3's tree in ``eagle_tree``, OPT-Tree in
``opt_tree``) is a frozen configuration dataclass whose ``policy()`` returns a fresh ``DraftPolicy`` for one
generation. The drafter (``drafting.draft_tree``) asks the policy, for a whole level at once, which candidate
children to keep and, node by node, which kept nodes may expand further (a policy that ranks a level's nodes against
each other narrows them, level by level, in ``to_expand``); after each verification the loop tells the policy what
was accepted. A level has a few nodes, so the policy sees plain Python lists and numbers (tensor ops cost more than
the rule here).
"""
from __future__ import annotations

import math
from collections import deque
from math import log
from dataclasses import dataclass, field
from typing import ClassVar

from .tree import Tree
from .validate import check_field_types, is_int, require


class DraftPolicy:
    """Shapes one generation's draft trees (the drafter grows each tree one level per draft forward).

    A policy defines ``n_max`` (drafted-node budget per tree, root excluded), ``max_depth`` (no node deeper)
    and ``max_breadth`` (the most children any node can get: the drafter computes this many top-k
    candidates), and the two rules ``select`` and ``expandable``. Every other method is an optional hook:
    the default written here leaves the drafter and the loop as they are (``extensions.cost_aware`` overrides
    them all).
    """

    n_max: int
    max_depth: int
    max_breadth: int
    #: with a draft that has a context lookup: the copy weight at which a level is drafted without a draft
    #: forward (``drafting``); None: every level runs the draft
    lookup_skip: float | None = None
    #: when sampling (temperature > 0): the children the policy gives a node (at levels the network drafts) are
    #: drawn without replacement from the draft's law there; False: its top-k children. Either is verified
    #: losslessly (``sampling``); a policy whose ``trim`` cuts a tree by its nodes' own probabilities needs False
    sampled: bool = True

    def select(self, top_logp: list[list[float]], child_cum_logp: list[list[float]], depth: list[int]) -> list[list[bool]]:
        """Which candidate children to keep: ``top_logp[r]`` are the draft's sorted top-k log-probs under the
        r-th frontier node (at ``depth[r]``), ``child_cum_logp[r]`` those children's path log-probs. Returns
        one list of booleans per frontier node, parallel to its candidates."""
        raise NotImplementedError

    def expandable(self, depth: int, cum_logp: float) -> bool:
        """Whether a newly added node (at ``depth``, path log-prob ``cum_logp``) gets children next level."""
        raise NotImplementedError

    def to_expand(self, cum_logp: list[float], nodes: list[int]) -> list[int]:
        """Which of a level's new nodes that ``expandable`` lets grow (``nodes``, ascending) get children next
        level: ``cum_logp`` holds the path log-probs of every node of the tree so far (root first)."""
        return nodes

    def observe(self, accepted: int, tree_depth: int) -> None:
        """After verification: ``accepted`` draft tokens of a tree ``tree_depth`` deep were committed."""

    def finish(self, tokens: int, iterations: int) -> None:
        """After a generation: ``tokens`` committed in ``iterations`` verifications."""

    def more(self, cum_logp: list[float], frontier: list[int], draft_forwards: int) -> bool:
        """Before each further level: draft it? (``cum_logp`` of the tree's nodes, the ``frontier`` to expand,
        after ``draft_forwards``)."""
        return True

    def trim(self, tree: Tree, draft_forwards: int) -> Tree:
        """The tree to verify, cut from the drafted one."""
        return tree

    def copies_trusted(self) -> bool:
        """Whether a level may be skipped on the lookup's copies now (asked only with ``lookup_skip``)."""
        return True

    def observe_copies(self, met: int, taken: int) -> None:
        """After verification: ``met`` strong-copy nodes lay on the accepted path, after ``taken`` of which the
        target's next token was the copy (``Tree.copies``)."""


@dataclass(frozen=True)
class LinearConfig:
    """Linear speculative decoding: a chain of K draft tokens (Leviathan et al.); when sampling, each drawn from
    the draft's law and verified by the speculative-sampling rule (``sampling``)."""

    method: ClassVar[str] = "linear"

    K: int = 8

    def __post_init__(self) -> None:
        check_field_types(self)
        require(is_int(self.K) and self.K >= 1, f"K must be an integer >= 1, got {self.K!r}")

    def policy(self, session: Session | None = None) -> "StaticPolicy":
        return StaticPolicy(breadth=1, depth=self.K, tau=0.0, n_max=self.K)


@dataclass(frozen=True)
class FixedTreeConfig:
    """Static tree: every node above depth D gets its top-B children; children whose cumulative draft
    probability falls below tau are pruned; at most n_max drafted nodes (best cumulative first).
    ``root_siblings=False`` and ``tau_on_parent=True`` follow the authors' code (``DynaTreeConfig``)."""

    method: ClassVar[str] = "fixed_tree"

    D: int = 8
    B: int = 3
    tau: float = 0.1
    n_max: int = 256
    root_siblings: bool = True
    tau_on_parent: bool = False

    def __post_init__(self) -> None:
        check_field_types(self)
        require(is_int(self.D) and self.D >= 1, f"fixed tree depth D must be >= 1, got {self.D!r}")
        require(is_int(self.B) and self.B >= 1, f"fixed tree branching B must be >= 1, got {self.B!r}")
        require(0.0 <= self.tau < 1.0, f"pruning threshold tau must be in [0, 1), got {self.tau!r}")
        require(is_int(self.n_max) and self.n_max >= 1, f"node budget n_max must be >= 1, got {self.n_max!r}")

    def policy(self, session: Session | None = None) -> "StaticPolicy":
        return StaticPolicy(breadth=self.B, depth=self.D, tau=self.tau, n_max=self.n_max,
                            root_siblings=self.root_siblings, tau_on_parent=self.tau_on_parent)


@dataclass(frozen=True)
class DynaTreeConfig:
    """DynaTree (Section 3.3, Appendix A defaults). Each mechanism can be switched off on its own:

    - ``dynamic_breadth=False``: every node gets B_mid children.
    - ``dynamic_depth=False``: plain depth limit D0 (no early stop, no deep expansion).
    - ``history=False``: D0 and tau_h stay fixed.
    All three off is the fixed tree (D=D0, B=B_mid, tau, n_max): the ablation's starting point.

    Choices the paper leaves open (ours): rho_stop=0.05, rho_deep=0.5, tau=0.02, W=8, a*=0.6,
    eta_D=2.0, eta_h=0.2. The acceptance statistic fed to History Adaptation is the accepted path length
    divided by the tree's depth (see ``DynaTreePolicy.observe``).

    Where the authors' code departs from the paper's text (``docs/fidelity.md``), three switches follow it:
    ``root_siblings=False``: the first drafted level is the draft's top-1 token alone (the code, and Algorithm 1);
    ``tau_on_parent=True``: a node whose path probability is below tau is not expanded, and an expanded node gets
    all B(u) children (the code, Fig. 3c; §3.3 prunes the children instead); ``history_scope="prompt"``: the
    code's controller, once per generation over the last W generations (kept in the run's ``session``),
    bang-bang with a dead band of 0.1 around a*, stepping D0 by 1 and tau_h and rho_deep by 0.05
    (``AuthorsHistory``)."""

    method: ClassVar[str] = "dynatree"

    D0: int = 5
    D_max: int = 8
    B_min: int = 1
    B_mid: int = 2
    B_max: int = 3
    tau_h: float = 0.9
    tau_l: float = 0.4
    rho_stop: float = 0.05
    rho_deep: float = 0.5
    tau: float = 0.02
    n_max: int = 256
    dynamic_breadth: bool = True
    dynamic_depth: bool = True
    history: bool = True
    W: int = 8
    a_star: float = 0.6
    eta_D: float = 2.0
    eta_h: float = 0.2
    root_siblings: bool = True
    tau_on_parent: bool = False
    history_scope: str = "iteration"

    def __post_init__(self) -> None:
        check_field_types(self)
        require(is_int(self.D0) and is_int(self.D_max) and 1 <= self.D0 < self.D_max,
               f"need integers 1 <= D0 < D_max, got D0={self.D0!r}, D_max={self.D_max!r}")
        require(all(is_int(b) for b in (self.B_min, self.B_mid, self.B_max))
               and 1 <= self.B_min <= self.B_mid <= self.B_max,
               f"need integers 1 <= B_min <= B_mid <= B_max, got ({self.B_min}, {self.B_mid}, {self.B_max})")
        require(0.0 < self.tau_l < self.tau_h < 1.0,
               f"need confidence thresholds 0 < tau_l < tau_h < 1, got tau_l={self.tau_l}, tau_h={self.tau_h}")
        require(0.0 < self.rho_stop < self.rho_deep < 1.0,
               f"need 0 < rho_stop < rho_deep < 1, got rho_stop={self.rho_stop}, rho_deep={self.rho_deep}")
        require(0.0 <= self.tau < 1.0, f"pruning threshold tau must be in [0, 1), got {self.tau!r}")
        require(is_int(self.n_max) and self.n_max >= 1, f"node budget n_max must be >= 1, got {self.n_max!r}")
        require(is_int(self.W) and self.W >= 1, f"history window W must be >= 1, got {self.W!r}")
        require(0.0 < self.a_star < 1.0, f"target acceptance a_star must be in (0, 1), got {self.a_star}")
        require(self.eta_D >= 0 and self.eta_h >= 0, "step sizes eta_D, eta_h must be >= 0")
        require(self.history_scope in ("iteration", "prompt"),
                f"history_scope must be 'iteration' or 'prompt', got {self.history_scope!r}")

    def policy(self, session: Session | None = None) -> "DynaTreePolicy":
        """A policy for one generation; ``session`` (kept across a run's generations) holds the history of
        ``history_scope="prompt"``, which without one starts afresh."""
        if self.history_scope == "prompt":
            return DynaTreePolicy(self, (session or Session()).history(self))
        return DynaTreePolicy(self)


@dataclass
class StaticPolicy(DraftPolicy):
    """Constant breadth, fixed depth limit: linear chains and fixed trees."""

    breadth: int
    depth: int
    tau: float
    n_max: int
    root_siblings: bool = True
    tau_on_parent: bool = False

    @property
    def max_breadth(self) -> int:
        return self.breadth

    @property
    def max_depth(self) -> int:
        return self.depth

    def select(self, top_lp: list[list[float]], child_cum: list[list[float]], depth: list[int]) -> list[list[bool]]:
        tau = 0.0 if self.tau_on_parent else self.tau
        return [keep_top(1 if d == 0 and not self.root_siblings else self.breadth, tau, cc)
                for d, cc in zip(depth, child_cum)]

    def expandable(self, depth: int, cum_logp: float) -> bool:
        return depth < self.depth and not (self.tau_on_parent and self.tau > 0 and cum_logp < log(self.tau))


@dataclass
class DynaTreePolicy(DraftPolicy):
    """DynaTree's confidence rules plus the History Adaptation state of one generation."""

    cfg: DynaTreeConfig
    session: "AuthorsHistory | None" = None  # history_scope="prompt": the run's controller
    D0: float = field(init=False)
    tau_h: float = field(init=False)
    rho_deep: float = field(init=False)
    window: deque = field(init=False)

    def __post_init__(self) -> None:
        src = self.session or self.cfg
        self.D0, self.tau_h, self.rho_deep = float(src.D0), src.tau_h, src.rho_deep
        self.window = deque(maxlen=self.cfg.W)

    @property
    def n_max(self) -> int:
        return self.cfg.n_max

    @property
    def max_breadth(self) -> int:
        return self.cfg.B_max if self.cfg.dynamic_breadth else self.cfg.B_mid

    @property
    def max_depth(self) -> int:
        return self.cfg.D_max if self.cfg.dynamic_depth else math.ceil(self.D0)

    def breadth(self, conf: float) -> int:
        """B(u) from the confidence (top-1 draft probability) at a node: Eq. (dynamic breadth)."""
        c = self.cfg
        if not c.dynamic_breadth:
            return c.B_mid
        return c.B_min if conf >= self.tau_h else c.B_max if conf < c.tau_l else c.B_mid

    def select(self, top_lp: list[list[float]], child_cum: list[list[float]], depth: list[int]) -> list[list[bool]]:
        c = self.cfg
        tau = 0.0 if c.tau_on_parent else c.tau
        return [keep_top(1 if d == 0 and not c.root_siblings else self.breadth(math.exp(lp[0])), tau, cc)
                for lp, cc, d in zip(top_lp, child_cum, depth)]

    def expandable(self, depth: int, cum_logp: float) -> bool:
        c = self.cfg
        if c.tau_on_parent and c.tau > 0 and cum_logp < log(c.tau):
            return False
        if not c.dynamic_depth:
            return depth < self.D0
        p = math.exp(cum_logp)
        return depth < c.D_max and p >= c.rho_stop and (depth < self.D0 or p > self.rho_deep)

    def observe(self, accepted: int, tree_depth: int) -> None:
        """History Adaptation: a_r = accepted path length / tree depth, proportional control around a*.

        High recent acceptance deepens the base depth and lowers tau_h (more nodes count as confident
        and get B_min children, so budget goes to depth); low acceptance does the opposite. D0 stays in
        [1, D_max - 1] and tau_h in [tau_l, 1) so the breadth rule stays well ordered.
        """
        c = self.cfg
        if not c.history or tree_depth == 0 or self.session is not None:
            return
        self.window.append(accepted / tree_depth)
        err = sum(self.window) / len(self.window) - c.a_star
        self.D0 = min(max(self.D0 + c.eta_D * err, 1.0), c.D_max - 1.0)
        self.tau_h = min(max(self.tau_h - c.eta_h * err, c.tau_l + 1e-6), 1.0 - 1e-6)


    def finish(self, tokens: int, iterations: int) -> None:
        if self.session is not None and self.cfg.history:
            self.session.observe(tokens, iterations)


@dataclass
class AuthorsHistory:
    """The authors' history controller (``history_scope="prompt"``; their ``tree_speculative_generator_adaptive``):
    after each generation, committed tokens / (verifications x (the initial D0 + 2)) joins a window of the last
    W generations; from 5 entries on, a mean above a* + 0.1 deepens (D0 + 1 up to D_max - 1, tau_h - 0.05 down to
    0.5, rho_deep - 0.05 down to 0.3), below a* - 0.1 the opposite (D0 - 1 down to 2, tau_h + 0.05 up to 0.95,
    rho_deep + 0.05 up to 0.8), in between nothing changes."""

    cfg: DynaTreeConfig
    D0: int = field(init=False)
    tau_h: float = field(init=False)
    rho_deep: float = field(init=False)
    window: deque = field(init=False)

    def __post_init__(self) -> None:
        self.D0, self.tau_h, self.rho_deep = self.cfg.D0, self.cfg.tau_h, self.cfg.rho_deep
        self.window = deque(maxlen=self.cfg.W)

    def observe(self, tokens: int, iterations: int) -> None:
        c = self.cfg
        self.window.append(tokens / (max(iterations, 1) * (c.D0 + 2)))
        if len(self.window) < 5:
            return
        mean = sum(self.window) / len(self.window)
        if mean > c.a_star + 0.1:
            self.D0, self.tau_h, self.rho_deep = min(self.D0 + 1, c.D_max - 1), max(self.tau_h - 0.05, 0.5), \
                max(self.rho_deep - 0.05, 0.3)
        elif mean < c.a_star - 0.1:
            self.D0, self.tau_h, self.rho_deep = max(self.D0 - 1, 2), min(self.tau_h + 0.05, 0.95), \
                min(self.rho_deep + 0.05, 0.8)


def keep_top(k: int, tau: float, child_cum: list[float]) -> list[bool]:
    """Keep a parent's top-k children (``child_cum`` sorted) whose cumulative probability is at least tau."""
    log_tau = math.log(tau) if tau > 0 else -math.inf
    return [j < k and c >= log_tau for j, c in enumerate(child_cum)]


@dataclass(frozen=True)
class TalonConfig:
    """TALON (Section 5 of the TALON paper): budget-driven tree growth. The root gets its top-K children;
    at every later level the candidate pool is all children of all current leaves, and a candidate is
    kept when its path probability is at least mu times the level's best; growth stops when the budget
    of N drafted nodes is spent (or no candidate passes). Every kept node is expanded at the next level.
    Budget N counts drafted nodes, root excluded."""

    method: ClassVar[str] = "talon"

    mu: float = 0.03
    N: int = 60
    K: int = 10

    def __post_init__(self) -> None:
        check_field_types(self)
        require(0.0 < self.mu <= 1.0, f"TALON threshold mu must be in (0, 1], got {self.mu!r}")
        require(is_int(self.N) and self.N >= 1, f"TALON budget N must be >= 1, got {self.N!r}")
        require(is_int(self.K) and self.K >= 1, f"TALON root width K must be >= 1, got {self.K!r}")

    def policy(self, session: Session | None = None) -> "TalonPolicy":
        return TalonPolicy(self)


@dataclass
class TalonPolicy(DraftPolicy):
    """TALON's level-wise gating (stateless across iterations)."""

    cfg: TalonConfig

    @property
    def n_max(self) -> int:
        return self.cfg.N

    @property
    def max_breadth(self) -> int:  # a gated level can keep up to the whole budget under one parent
        return max(self.cfg.K, self.cfg.N)

    @property
    def max_depth(self) -> int:
        return self.cfg.N

    def select(self, top_lp: list[list[float]], child_cum: list[list[float]], depth: list[int]) -> list[list[bool]]:
        if depth[0] == 0:  # robust top-K initialization at the root
            return [[j < self.cfg.K for j in range(len(cc))] for cc in child_cum]
        gate = max(map(max, child_cum)) + math.log(self.cfg.mu)
        return [[c >= gate for c in cc] for cc in child_cum]

    def expandable(self, depth: int, cum_logp: float) -> bool:
        return True


class Session:
    """What a run keeps across its generations, for a policy that adapts across prompts: the authors' history
    controller of each DynaTree setting that runs with ``history_scope="prompt"``."""

    def __init__(self) -> None:
        self.histories: dict[DynaTreeConfig, AuthorsHistory] = {}

    def history(self, cfg: DynaTreeConfig) -> AuthorsHistory:
        """``cfg``'s controller in this run (a fresh one at its first generation)."""
        if cfg not in self.histories:
            self.histories[cfg] = AuthorsHistory(cfg)
        return self.histories[cfg]
