"""Drafting policies: how a draft tree is shaped, level by level, and how it adapts.

Every tree method (linear chain, fixed tree, DynaTree, TALON) is a frozen configuration dataclass whose
``policy()`` returns a fresh ``DraftPolicy`` for one generation. The drafter (``drafting.draft_tree``)
asks the policy, for a whole level at once, which candidate children to keep and, node by node, which
kept nodes to expand further; after each verification it tells the policy what was accepted. A level has
a few nodes, so the policy sees plain Python lists and numbers (tensor ops cost more than the rule here).
Adding a policy means writing one small class with these three methods. A policy may also have
``more(cum_logp, frontier, draft_forwards) -> bool``, asked before every further level, and
``trim(tree, draft_forwards) -> Tree``, which cuts the drafted tree before verification (the cost-aware
extension below has both).
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import ClassVar, Protocol

import torch

from .tree import Tree


class DraftPolicy(Protocol):
    """Shapes one generation's draft trees (the drafter grows each tree one level per draft forward).

    ``n_max``: drafted-node budget per tree (root excluded). ``max_depth``: no node deeper than this.
    ``max_breadth``: the most children any node can get (the drafter computes this many top-k candidates).
    Optional, looked up by the drafter and the loop: ``more`` (draft one more level?), ``trim`` (cut the tree
    before verification), ``lookup_skip`` (a copy weight at which a level needs no draft forward) with
    ``copies_trusted`` (may a level be skipped now?) and ``observe_copies`` (how the strong copies on the
    accepted path fared); see ``CostAwarePolicy``.
    """

    n_max: int
    max_depth: int
    max_breadth: int

    def select(self, top_logp: list[list[float]], child_cum_logp: list[list[float]], depth: list[int]) -> list[list[bool]]:
        """Which candidate children to keep: ``top_logp[r]`` are the draft's sorted top-k log-probs under the
        r-th frontier node (at ``depth[r]``), ``child_cum_logp[r]`` those children's path log-probs. Returns
        one list of booleans per frontier node, parallel to its candidates."""
        ...

    def expandable(self, depth: int, cum_logp: float) -> bool:
        """Whether a newly added node (at ``depth``, path log-prob ``cum_logp``) gets children next level."""
        ...

    def observe(self, accepted: int, tree_depth: int) -> None:
        """After verification: ``accepted`` draft tokens of a tree ``tree_depth`` deep were committed."""
        ...


def require(cond: bool, msg: str) -> None:
    """Raise ValueError(msg) unless cond (configuration checks)."""
    if not cond:
        raise ValueError(msg)


def is_int(x) -> bool:
    """An integer that is not a bool (numpy integers count)."""
    return isinstance(x, Integral) and not isinstance(x, bool)


def is_real(x) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def check_field_types(cfg) -> None:
    """Every ``int`` / ``float`` / ``bool`` field of a config dataclass holds a value of that kind
    (numpy scalars count; a bool is not an int), so a typo fails here with the field's name."""
    ok = {"int": is_int, "float": is_real, "bool": lambda x: isinstance(x, bool)}
    for f in cfg.__dataclass_fields__.values():
        test = ok.get(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", ""))
        if test is not None and not test(getattr(cfg, f.name)):
            raise ValueError(f"{type(cfg).__name__}.{f.name} must be {'a' if f.type != 'int' else 'an'} {f.type}, "
                             f"got {getattr(cfg, f.name)!r}")


@dataclass(frozen=True)
class LinearConfig:
    """Linear speculative decoding: a chain of K draft tokens (Leviathan et al.)."""

    method: ClassVar[str] = "linear"

    K: int = 8

    def __post_init__(self) -> None:
        check_field_types(self)
        require(is_int(self.K) and self.K >= 1, f"K must be an integer >= 1, got {self.K!r}")

    def policy(self) -> "StaticPolicy":
        return StaticPolicy(breadth=1, depth=self.K, tau=0.0, n_max=self.K)


@dataclass(frozen=True)
class FixedTreeConfig:
    """Static tree: every node above depth D gets its top-B children; children whose cumulative draft
    probability falls below tau are pruned; at most n_max drafted nodes (best cumulative first)."""

    method: ClassVar[str] = "fixed_tree"

    D: int = 8
    B: int = 3
    tau: float = 0.1
    n_max: int = 256

    def __post_init__(self) -> None:
        check_field_types(self)
        require(is_int(self.D) and self.D >= 1, f"fixed tree depth D must be >= 1, got {self.D!r}")
        require(is_int(self.B) and self.B >= 1, f"fixed tree branching B must be >= 1, got {self.B!r}")
        require(0.0 <= self.tau < 1.0, f"pruning threshold tau must be in [0, 1), got {self.tau!r}")
        require(is_int(self.n_max) and self.n_max >= 1, f"node budget n_max must be >= 1, got {self.n_max!r}")

    def policy(self) -> "StaticPolicy":
        return StaticPolicy(breadth=self.B, depth=self.D, tau=self.tau, n_max=self.n_max)


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
    """

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

    def policy(self) -> "DynaTreePolicy":
        return DynaTreePolicy(self)


@dataclass
class StaticPolicy:
    """Constant breadth, fixed depth limit: linear chains and fixed trees."""

    breadth: int
    depth: int
    tau: float
    n_max: int

    @property
    def max_breadth(self) -> int:
        return self.breadth

    @property
    def max_depth(self) -> int:
        return self.depth

    def select(self, top_lp: list[list[float]], child_cum: list[list[float]], depth: list[int]) -> list[list[bool]]:
        return [_keep_top(self.breadth, self.tau, cc) for cc in child_cum]

    def expandable(self, depth: int, cum_logp: float) -> bool:
        return depth < self.depth

    def observe(self, accepted: int, tree_depth: int) -> None:
        pass


@dataclass
class DynaTreePolicy:
    """DynaTree's confidence rules plus the History Adaptation state of one generation."""

    cfg: DynaTreeConfig
    D0: float = field(init=False)
    tau_h: float = field(init=False)
    window: deque = field(init=False)

    def __post_init__(self) -> None:
        self.D0, self.tau_h = float(self.cfg.D0), self.cfg.tau_h
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
        return [_keep_top(self.breadth(math.exp(lp[0])), self.cfg.tau, cc) for lp, cc in zip(top_lp, child_cum)]

    def expandable(self, depth: int, cum_logp: float) -> bool:
        c = self.cfg
        if not c.dynamic_depth:
            return depth < self.D0
        p = math.exp(cum_logp)
        return depth < c.D_max and p >= c.rho_stop and (depth < self.D0 or p > c.rho_deep)

    def observe(self, accepted: int, tree_depth: int) -> None:
        """History Adaptation: a_r = accepted path length / tree depth, proportional control around a*.

        High recent acceptance deepens the base depth and lowers tau_h (more nodes count as confident
        and get B_min children, so budget goes to depth); low acceptance does the opposite. D0 stays in
        [1, D_max - 1] and tau_h in [tau_l, 1) so the breadth rule stays well ordered.
        """
        c = self.cfg
        if not c.history or tree_depth == 0:
            return
        self.window.append(accepted / tree_depth)
        err = sum(self.window) / len(self.window) - c.a_star
        self.D0 = min(max(self.D0 + c.eta_D * err, 1.0), c.D_max - 1.0)
        self.tau_h = min(max(self.tau_h - c.eta_h * err, c.tau_l + 1e-6), 1.0 - 1e-6)


def _keep_top(k: int, tau: float, child_cum: list[float]) -> list[bool]:
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

    def policy(self) -> "TalonPolicy":
        return TalonPolicy(self)


@dataclass
class TalonPolicy:
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

    def observe(self, accepted: int, tree_depth: int) -> None:
        pass


# Defaults: the cpu pair in bf16 per fwd_target(1) (results/cpu/costs.json as measured on 914b460, in the
# VM's fast memory phase): fwd_target(k); one further drafting level (a back-to-back draft forward plus the
# drafter's own work); the rest of an iteration (the first draft forward, colder after the target's, its
# level's work, the commit)
CPU_BF16_VERIFY = ((1, 1.0), (2, 1.06), (4, 1.18), (8, 1.54), (16, 2.52), (32, 4.35), (64, 8.17))
CPU_BF16_DRAFT = 0.109
CPU_BF16_FIXED = 0.247


@dataclass(frozen=True)
class CostAwareConfig:
    """A named extension, not the paper's method: DynaTree's tree cut, before verification, to the node
    count that maximizes expected committed tokens per unit of time (as Sequoia and OPT-Tree size trees
    for their hardware). With the draft's path probabilities p (calibrated: they estimate acceptance),
    keeping the j most probable nodes (always a subtree: a node is at most as probable as its parent)
    commits 1 + sum of their p in expectation and costs, drafted in f forwards,
    ``fixed_ms + (f - 1) * draft_ms + fwd_target(j + 1)``: notebook 03's cost model of an iteration.
    ``verify_ms``: the measured curve fwd_target(k) as (k, ms) pairs, k ascending (linear in between,
    extrapolated past the last); ``draft_ms``: one further drafting level (draft forward and the drafter's
    work); ``fixed_ms``: the rest of an iteration (first draft forward after the target's, its level,
    the commit). Only ratios matter.
    ``level_stop``: also stop drafting when one more level cannot pay for its draft forward. The next
    level's nodes are at most as probable, together, as the frontier nodes they would hang under, so the
    drafter stops when even that whole gain, bought for one draft level and the cheapest verification of
    one node more or any number more, would not raise the best expected tokens per ms of the tree so far
    (one level of lookahead: a run of later levels could only pay where probability does not fall with depth).
    ``lookup_skip``: with a draft that has a context lookup, a level whose every frontier node's copy token
    carries at least this mixture weight is drafted without a draft forward (one copy child per node; see
    ``drafting.draft_tree``): the forward would cost a drafting level for at most ``1 - weight`` of each
    node's next-token mass. At the root this leaves the committed tokens unfed until a level needs the draft
    (or the next tree), so a tree may cost no draft forward at all. 1.0 never skips (weights are below 1);
    the default, 0.9, skips on the cpu draft's longest matches only (12 tokens: weight 0.95, its copy the
    target's greedy token 97.5% of the time on the lookup's fitting data).
    ``skip_window``: skip only while the strong copies (weight >= ``lookup_skip``) that this generation's
    verifications met lately were the target's next token at least ``lookup_skip`` of the time (decayed counts,
    each iteration weighing ``1 - 1/skip_window`` of the one after it; one taken copy as the prior, so a
    generation starts by trusting them). Why: the weights are fitted on other text, and on some prompts
    their strongest copies were right far less often (the cpu run's PG-19 prompt pg19:10321@33506: 72% of
    176), where each wrong copy is a level without the draft's alternatives. 0: the weight alone decides."""

    method: ClassVar[str] = "dynatree_cost"

    base: DynaTreeConfig = DynaTreeConfig()
    verify_ms: tuple = CPU_BF16_VERIFY
    draft_ms: float = CPU_BF16_DRAFT
    fixed_ms: float = CPU_BF16_FIXED
    level_stop: bool = True
    lookup_skip: float = 0.9
    skip_window: int = 8

    def __post_init__(self) -> None:
        check_field_types(self)
        require(0.0 <= self.lookup_skip <= 1.0, f"lookup_skip must be a weight in [0, 1], got {self.lookup_skip!r}")
        require(self.skip_window >= 0, f"skip_window must be >= 0 (0: no record), got {self.skip_window!r}")
        require(isinstance(self.base, DynaTreeConfig), f"base must be a DynaTreeConfig, got {self.base!r}")
        ok = (isinstance(self.verify_ms, tuple) and len(self.verify_ms) >= 2
              and all(isinstance(x, tuple) and len(x) == 2 and is_int(x[0]) and is_real(x[1]) and x[1] > 0
                      for x in self.verify_ms))
        require(ok and self.verify_ms[0][0] == 1 and all(a[0] < b[0] for a, b in zip(self.verify_ms, self.verify_ms[1:])),
                f"verify_ms must be (k, ms) pairs with k = 1, then ascending, ms > 0, got {self.verify_ms!r}")
        require(self.draft_ms >= 0, f"draft_ms must be >= 0, got {self.draft_ms!r}")
        require(self.fixed_ms >= 0, f"fixed_ms must be >= 0, got {self.fixed_ms!r}")

    def policy(self) -> "CostAwarePolicy":
        return CostAwarePolicy(self)


class CostAwarePolicy(DynaTreePolicy):
    """DynaTree's policy plus ``more`` and ``trim``: depth and tree size chosen from the measured cost curves."""

    def __init__(self, cfg: CostAwareConfig):
        super().__init__(cfg.base)
        ks = torch.tensor([k for k, _ in cfg.verify_ms], dtype=torch.float64)
        ms = torch.tensor([m for _, m in cfg.verify_ms], dtype=torch.float64)
        k = torch.arange(1, cfg.base.n_max + 3, dtype=torch.float64)   # verified tokens: root + j nodes (+ 1: ``more``)
        i = torch.searchsorted(ks, k).clamp(1, len(ks) - 1)             # the segment [ks[i-1], ks[i]] holding k
        w = (k - ks[i - 1]) / (ks[i] - ks[i - 1])
        self.verify = (ms[i - 1] + w * (ms[i] - ms[i - 1])).float()     # verify[j] = fwd_target(j + 1)
        self.verify_list = self.verify.tolist()
        # cheapest verification of at least j + 1 tokens: a measured curve need not rise (fp32 MKL here: 2
        # tokens cost more than 8), and ``more`` must not stop short of a cheaper, larger tree
        self.verify_floor = self.verify.flip(0).cummin(0).values.flip(0).tolist()
        self.draft_ms, self.fixed_ms, self.level_stop = cfg.draft_ms, cfg.fixed_ms, cfg.level_stop
        self.lookup_skip = cfg.lookup_skip if cfg.lookup_skip < 1.0 else None  # read by ``drafting.draft_tree``
        # no record where nothing is skipped (lookup_skip 1.0) or the weight alone decides (skip_window 0)
        self.copy_decay = 1.0 - 1.0 / cfg.skip_window if cfg.skip_window and self.lookup_skip is not None else None
        self.copies_met = self.copies_taken = 0.0  # decayed counts of strong copies verified / taken

    def copies_trusted(self) -> bool:
        """Whether a level may be skipped now (``CostAwareConfig.skip_window``): the recent strong copies were
        taken at least ``lookup_skip`` of the time, counting one taken copy as the prior."""
        return self.copy_decay is None or self.copies_taken + 1.0 >= self.lookup_skip * (self.copies_met + 1.0)

    def observe_copies(self, met: int, taken: int) -> None:
        """After a verification: ``met`` strong-copy nodes on the accepted path, after ``taken`` of which the
        target's next token was the copy."""
        if self.copy_decay is not None:
            self.copies_met = self.copies_met * self.copy_decay + met
            self.copies_taken = self.copies_taken * self.copy_decay + taken

    def spent(self, draft_forwards: int) -> float:
        """Modelled ms of an iteration before verification, after ``draft_forwards`` (0: level 0 came from the
        lookup)."""
        return self.fixed_ms + max(draft_forwards - 1, 0) * self.draft_ms

    def more(self, cum_logp: list[float], frontier: list[int], draft_forwards: int) -> bool:
        """Whether to draft one more level (``CostAwareConfig.level_stop``): ``cum_logp`` of the tree's nodes
        (root first), ``frontier`` the nodes the next level would expand, after ``draft_forwards``. Any tree
        after that level keeps some j old nodes (at most the j most probable's mass) and some new ones (at
        most the frontier's mass, and at least one node to verify if they add anything, so at least the
        cheapest verification of j + 2 tokens). Plain Python: a tree has a few dozen nodes and this runs
        once a level."""
        if not self.level_stop:
            return True
        p = sorted((math.exp(c) for c in cum_logp[1:]), reverse=True)
        gain = sum(math.exp(cum_logp[u]) for u in frontier)
        v, floor = self.verify_list, self.verify_floor
        spent = self.spent(draft_forwards)
        now = nxt = 0.0
        s = 1.0
        for j in range(len(p) + 1):
            s += p[j - 1] if j else 0.0
            now = max(now, s / (spent + v[j]))
            nxt = max(nxt, (s + gain) / (spent + self.draft_ms + floor[j + 1]))
        return nxt > now

    def trim(self, tree: Tree, draft_forwards: int) -> Tree:
        n = tree.n_drafted
        if n <= 1:
            return tree
        p = tree.cum_logp[1:n + 1].exp()
        order = p.sort(descending=True, stable=True).indices  # ties: the ancestor (smaller index) first
        gain = torch.cat([p.new_ones(1), 1 + p[order].cumsum(0)])
        spent = self.spent(draft_forwards)
        j = int((gain / (spent + self.verify[:n + 1].to(p.device))).argmax())
        if j == n:
            return tree
        return tree.subset(torch.cat([order.new_zeros(1), order[:j].sort().values + 1]))


TreeConfig = LinearConfig | FixedTreeConfig | DynaTreeConfig | TalonConfig | CostAwareConfig
