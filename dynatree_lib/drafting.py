"""Drafting policies and the level-batched tree drafter.

A policy answers three questions for a whole frontier at once (tensors in, tensors out):
how many children each node gets (``breadth``), which new nodes may be expanded further
(``expandable``), and how to adapt after a verification (``observe``). ``draft_tree`` runs the draft
model once per tree level over all nodes being expanded, with a tree mask over the draft's cache.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .cache import truncate
from .models import forward
from .tree import Tree, attention_mask


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


@dataclass(frozen=True)
class LinearConfig:
    """Linear speculative decoding: a chain of K draft tokens (Leviathan et al.)."""

    K: int = 8

    def __post_init__(self) -> None:
        _check(isinstance(self.K, int) and self.K >= 1, f"K must be an integer >= 1, got {self.K!r}")

    @property
    def n_max(self) -> int:
        return self.K

    def policy(self) -> "StaticPolicy":
        return StaticPolicy(breadth_=1, depth=self.K, tau=0.0, n_max=self.K)


@dataclass(frozen=True)
class FixedTreeConfig:
    """Static tree: every node above depth D gets its top-B children; children whose cumulative draft
    probability falls below tau are pruned; at most n_max drafted nodes (best cumulative first)."""

    D: int = 8
    B: int = 3
    tau: float = 0.1
    n_max: int = 256

    def __post_init__(self) -> None:
        _check(isinstance(self.D, int) and self.D >= 1, f"fixed tree depth D must be >= 1, got {self.D!r}")
        _check(isinstance(self.B, int) and self.B >= 1, f"fixed tree branching B must be >= 1, got {self.B!r}")
        _check(0.0 <= self.tau < 1.0, f"pruning threshold tau must be in [0, 1), got {self.tau!r}")
        _check(isinstance(self.n_max, int) and self.n_max >= 1, f"node budget n_max must be >= 1, got {self.n_max!r}")

    def policy(self) -> "StaticPolicy":
        return StaticPolicy(breadth_=self.B, depth=self.D, tau=self.tau, n_max=self.n_max)


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
        _check(isinstance(self.D0, int) and isinstance(self.D_max, int) and 1 <= self.D0 < self.D_max,
               f"need integers 1 <= D0 < D_max, got D0={self.D0!r}, D_max={self.D_max!r}")
        _check(all(isinstance(b, int) for b in (self.B_min, self.B_mid, self.B_max))
               and 1 <= self.B_min <= self.B_mid <= self.B_max,
               f"need integers 1 <= B_min <= B_mid <= B_max, got ({self.B_min}, {self.B_mid}, {self.B_max})")
        _check(0.0 < self.tau_l < self.tau_h < 1.0,
               f"need confidence thresholds 0 < tau_l < tau_h < 1, got tau_l={self.tau_l}, tau_h={self.tau_h}")
        _check(0.0 < self.rho_stop < self.rho_deep < 1.0,
               f"need 0 < rho_stop < rho_deep < 1, got rho_stop={self.rho_stop}, rho_deep={self.rho_deep}")
        _check(0.0 <= self.tau < 1.0, f"pruning threshold tau must be in [0, 1), got {self.tau!r}")
        _check(isinstance(self.n_max, int) and self.n_max >= 1, f"node budget n_max must be >= 1, got {self.n_max!r}")
        _check(isinstance(self.W, int) and self.W >= 1, f"history window W must be >= 1, got {self.W!r}")
        _check(0.0 < self.a_star < 1.0, f"target acceptance a_star must be in (0, 1), got {self.a_star}")
        _check(self.eta_D >= 0 and self.eta_h >= 0, "step sizes eta_D, eta_h must be >= 0")

    def policy(self) -> "DynaTreePolicy":
        return DynaTreePolicy(self)


@dataclass
class StaticPolicy:
    """Constant breadth, fixed depth limit: linear chains and fixed trees."""

    breadth_: int
    depth: int
    tau: float
    n_max: int

    @property
    def max_breadth(self) -> int:
        return self.breadth_

    @property
    def max_depth(self) -> int:
        return self.depth

    def breadth(self, conf: Tensor, depth: Tensor) -> Tensor:
        return torch.full_like(depth, self.breadth_)

    def select(self, top_lp: Tensor, child_cum: Tensor, depth: Tensor) -> Tensor:
        return _breadth_and_tau(self, top_lp, child_cum, depth)

    def expandable(self, depth: Tensor, cum_logp: Tensor) -> Tensor:
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
    def tau(self) -> float:
        return self.cfg.tau

    @property
    def n_max(self) -> int:
        return self.cfg.n_max

    @property
    def max_breadth(self) -> int:
        return self.cfg.B_max if self.cfg.dynamic_breadth else self.cfg.B_mid

    @property
    def max_depth(self) -> int:
        return self.cfg.D_max if self.cfg.dynamic_depth else math.ceil(self.D0)

    def breadth(self, conf: Tensor, depth: Tensor) -> Tensor:
        c = self.cfg
        if not c.dynamic_breadth:
            return torch.full_like(depth, c.B_mid)
        mid = torch.full_like(depth, c.B_mid)
        return torch.where(conf >= self.tau_h, c.B_min, torch.where(conf < c.tau_l, c.B_max, mid))

    def select(self, top_lp: Tensor, child_cum: Tensor, depth: Tensor) -> Tensor:
        return _breadth_and_tau(self, top_lp, child_cum, depth)

    def expandable(self, depth: Tensor, cum_logp: Tensor) -> Tensor:
        c = self.cfg
        if not c.dynamic_depth:
            return depth < self.D0
        p = cum_logp.exp()
        return (depth < c.D_max) & (p >= c.rho_stop) & ((depth < self.D0) | (p > c.rho_deep))

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


def _breadth_and_tau(policy, top_lp: Tensor, child_cum: Tensor, depth: Tensor) -> Tensor:
    """Keep each parent's top-B(u) children (B from the policy's breadth rule, confidence = top-1 prob)
    whose cumulative probability is at least tau."""
    k = policy.breadth(top_lp[:, 0].exp(), depth)
    log_tau = math.log(policy.tau) if policy.tau > 0 else -math.inf
    rank = torch.arange(top_lp.shape[1], device=top_lp.device)[None, :]
    return (rank < k[:, None]) & (child_cum >= log_tau)


@dataclass(frozen=True)
class TalonConfig:
    """TALON (Section 5 of the TALON paper): budget-driven tree growth. The root gets its top-K children;
    at every later level the candidate pool is all children of all current leaves, and a candidate is
    kept when its path probability is at least mu times the level's best; growth stops when the budget
    of N drafted nodes is spent (or no candidate passes). Every kept node is expanded at the next level.
    Budget N counts drafted nodes, root excluded."""

    mu: float = 0.03
    N: int = 60
    K: int = 10

    def __post_init__(self) -> None:
        _check(0.0 < self.mu <= 1.0, f"TALON threshold mu must be in (0, 1], got {self.mu!r}")
        _check(isinstance(self.N, int) and self.N >= 1, f"TALON budget N must be >= 1, got {self.N!r}")
        _check(isinstance(self.K, int) and self.K >= 1, f"TALON root width K must be >= 1, got {self.K!r}")

    @property
    def n_max(self) -> int:
        return self.N

    def policy(self) -> "TalonPolicy":
        return TalonPolicy(self)


@dataclass
class TalonPolicy:
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

    def select(self, top_lp: Tensor, child_cum: Tensor, depth: Tensor) -> Tensor:
        rank = torch.arange(top_lp.shape[1], device=top_lp.device)[None, :]
        if bool(depth[0] == 0):  # robust top-K initialization at the root
            return rank < self.cfg.K
        return child_cum >= child_cum.max() + math.log(self.cfg.mu)

    def expandable(self, depth: Tensor, cum_logp: Tensor) -> Tensor:
        return torch.ones_like(depth, dtype=torch.bool)

    def observe(self, accepted: int, tree_depth: int) -> None:
        pass


DraftConfig = LinearConfig | FixedTreeConfig | DynaTreeConfig | TalonConfig


@dataclass
class DraftState:
    """The draft model's cache, how many committed tokens it has consumed, and how many of those were
    evicted from the front (StreamingLLM; positions are cache-relative, so they shift by ``evicted``)."""

    cache: object
    n_cached: int = 0
    evicted: int = 0


@torch.no_grad()
def draft_tree(model, state: DraftState, ids: Tensor, policy, max_depth: int) -> tuple[Tree, int]:
    """Grow a draft tree rooted at the last committed token ``ids[-1]``.

    Level 0 feeds the committed tokens the draft has not cached yet (causal, one forward); every later
    level feeds all nodes chosen for expansion at once, each attending to the committed prefix plus its
    own ancestors. Leaves are never fed to the draft. Returns the tree and the number of draft forwards.
    The draft cache is rolled back to the committed prefix on return.
    """
    L = ids.numel()
    device = ids.device
    tree = Tree.new(ids[-1], policy.n_max + 1, device)
    max_depth = min(max_depth, policy.max_depth)
    if max_depth <= 0:
        return tree, 0

    off = state.evicted
    logits = forward(model, ids[state.n_cached:], state.cache,
                     torch.arange(state.n_cached - off, L - off, device=device), last_only=True)
    n_fwd = 1
    frontier = torch.zeros(1, dtype=torch.long, device=device)  # tree indices whose next-token logits we hold
    processed: Tensor = frontier[:0]                              # drafted nodes in the draft cache, in cache order
    Bmax = min(policy.max_breadth, logits.shape[-1])
    while True:
        logp = torch.log_softmax(logits.float(), dim=-1)
        top_lp, top_tok = logp.topk(Bmax, dim=-1)                  # [f, Bmax], sorted
        child_cum = tree.cum_logp[frontier, None] + top_lp
        keep = policy.select(top_lp, child_cum, tree.depth[frontier])
        rows, cols = keep.nonzero(as_tuple=True)
        room = policy.n_max - tree.n_drafted
        if rows.numel() > room:  # budget: keep the most probable children, in BFS order
            best = child_cum[rows, cols].topk(room).indices.sort().values
            rows, cols = rows[best], cols[best]
        if rows.numel() == 0:
            break
        new = tree.add(frontier[rows], top_tok[rows, cols], top_lp[rows, cols])
        if tree.n_drafted >= policy.n_max:
            break
        depth = tree.depth[new]
        grow = policy.expandable(depth, tree.cum_logp[new]) & (depth < max_depth)
        frontier = new[grow]
        if frontier.numel() == 0:
            break
        cols_idx = torch.cat([processed, frontier])
        # A chain is plain causal attention over the draft cache: skip the mask (faster SDPA path).
        mask = None if tree.is_chain else attention_mask(tree.anc[frontier][:, cols_idx], L - off, model.dtype)
        logits = forward(model, tree.tokens[frontier], state.cache, L - off - 1 + tree.depth[frontier], mask)
        processed = cols_idx
        n_fwd += 1
    truncate(state.cache, L - off)
    state.n_cached = L
    return tree, n_fwd
