"""DynaTree + cost budget: DynaTree's rules with every step priced by measured forward costs (our extension)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..core.policies.dynatree import DynaTreeConfig, DynaTreePolicy
from ..core.policies.base import COPY, DRAFT, STOP, Level, Outcome, Session
from ..core.tree import Tree
from ..core.validate import check_field_types, is_int, is_real, require

# Defaults, in units of one one-token target forward: the relative costs of a memory-bound pair whose draft
# is a few percent of its target (verifying k tokens; one further drafting level; the rest of an iteration).
# The harness never uses them: it passes the curves its profile measured (results/<profile>/costs.json).
CPU_BF16_VERIFY = ((1, 1.0), (2, 1.06), (4, 1.18), (8, 1.54), (16, 2.52), (32, 4.35), (64, 8.17))
CPU_BF16_DRAFT = 0.109
CPU_BF16_FIXED = 0.247


@dataclass(frozen=True)
class CostAwareConfig:
    """Our extension, not the paper's method: DynaTree's tree cut before verification to the node count that
    maximizes expected committed tokens per ms (as Sequoia and OPT-Tree size trees for their hardware).

    Keeping the j most probable nodes (always a subtree) commits 1 + the sum of their path probabilities in
    expectation and costs ``fixed_ms + (f - 1) * draft_ms + fwd_target(j + 1)`` for f draft forwards: notebook
    03's cost model of an iteration. ``level_stop`` and ``lookup_skip`` save draft forwards the model says cannot
    pay (docs/design.md, "The cost-aware extension")."""

    method: ClassVar[str] = "dynatree_cost"

    base: DynaTreeConfig = DynaTreeConfig()  # the tree it cuts
    verify_ms: tuple = CPU_BF16_VERIFY  # fwd_target(k) as (k, ms) pairs, k ascending; linear between, extrapolated
    draft_ms: float = CPU_BF16_DRAFT  # one further drafting level (draft forward and the drafter's work)
    fixed_ms: float = CPU_BF16_FIXED  # the rest of an iteration (first draft forward and level, the commit)
    level_stop: bool = True  # stop drafting when one more level cannot pay for its draft forward
    lookup_skip: float = 0.9  # a level whose every copy token weighs at least this skips the draft forward (1.0: never)
    skip_window: int = 8  # skip only while recent strong copies were right that often (decayed; 0: weight alone)

    def __post_init__(self) -> None:
        check_field_types(self)
        require(0.0 <= self.lookup_skip <= 1.0, f"lookup_skip must be a weight in [0, 1], got {self.lookup_skip!r}")
        require(self.skip_window >= 0, f"skip_window must be >= 0 (0: no record), got {self.skip_window!r}")
        require(isinstance(self.base, DynaTreeConfig), f"base must be a DynaTreeConfig, got {self.base!r}")
        check_verify_curve(self.verify_ms, least=2)
        require(self.draft_ms >= 0, f"draft_ms must be >= 0, got {self.draft_ms!r}")
        require(self.fixed_ms >= 0, f"fixed_ms must be >= 0, got {self.fixed_ms!r}")

    def policy(self, session: Session | None = None) -> "CostAwarePolicy":
        return CostAwarePolicy(self)


def check_verify_curve(verify_ms, least: int) -> None:
    """A measured verification curve, fwd_target(k): at least ``least`` (k, ms) pairs, k = 1 first, then ascending."""
    ok = (isinstance(verify_ms, tuple) and len(verify_ms) >= least
          and all(isinstance(x, tuple) and len(x) == 2 and is_int(x[0]) and is_real(x[1]) and x[1] > 0
                  for x in verify_ms))
    require(ok and verify_ms[0][0] == 1 and all(a[0] < b[0] for a, b in zip(verify_ms, verify_ms[1:])),
            f"verify_ms must be (k, ms) pairs with k = 1, then ascending, ms > 0, got {verify_ms!r}")


def verify_cost(curve: tuple, k: float) -> float:
    """fwd_target(k) from the (k, ms) pairs: linear between the measured points and beyond the last two (a curve of
    one point: proportional to k)."""
    if len(curve) == 1:
        return curve[0][1] * k
    i = next((i for i in range(1, len(curve)) if curve[i][0] >= k), len(curve) - 1)  # the segment holding k
    (k0, m0), (k1, m1) = curve[i - 1], curve[i]
    w = (k - k0) / (k1 - k0)
    return m0 + w * (m1 - m0)


class CostAwarePolicy(DynaTreePolicy):
    """DynaTree's policy plus ``more`` and ``trim``: depth and tree size chosen from the measured cost curves.
    ``trim`` keeps the most probable nodes, so when sampling the children are the top-k, not drawn."""

    sampled = False

    def __init__(self, cfg: CostAwareConfig):
        super().__init__(cfg.base)
        # verify[j] = fwd_target(j + 1): the root and j nodes (+ 1 past the budget: ``more``)
        self.verify = torch.tensor([verify_cost(cfg.verify_ms, k) for k in range(1, cfg.base.n_max + 3)])
        self.verify_list = self.verify.tolist()
        # cheapest verification of at least j + 1 tokens: a measured curve need not rise (an fp32 matmul
        # library may take longer for 2 tokens than for 8), and ``more`` must not stop short of a cheaper, larger tree
        self.verify_floor = self.verify.flip(0).cummin(0).values.flip(0).tolist()
        self.draft_ms, self.fixed_ms, self.level_stop = cfg.draft_ms, cfg.fixed_ms, cfg.level_stop
        self.lookup_skip = cfg.lookup_skip if cfg.lookup_skip < 1.0 else None  # None: every level is drafted
        # no record where nothing is skipped (lookup_skip 1.0) or the weight alone decides (skip_window 0)
        self.copy_decay = 1.0 - 1.0 / cfg.skip_window if cfg.skip_window and self.lookup_skip is not None else None
        self.copies_met = self.copies_taken = 0.0  # decayed counts of strong copies verified / taken

    def next_level(self, level: Level) -> str:
        """From the lookup (``COPY``) where every frontier node has a copy of weight >= ``lookup_skip`` and the
        copies are trusted (``copies_trusted``); else drafted while ``more`` says one more level pays (the root
        always is). Every strong copy goes into ``level.strong``, taken or not, so ``observe`` learns how often the
        target took them."""
        if self.lookup_skip is not None and (copies := level.copies()) is not None:
            strong = [(u, c[0]) for u, c in zip(level.frontier, copies) if c is not None and c[1] >= self.lookup_skip]
            level.strong.extend(strong)
            if len(strong) == len(level.frontier) and self.copies_trusted():
                return COPY
        if len(level.cum_logp) > 1 and not self.more(level.cum_logp, level.frontier, level.draft_forwards):
            return STOP
        return DRAFT

    def observe(self, outcome: Outcome) -> None:
        super().observe(outcome)
        self.observe_copies(outcome.copies_met, outcome.copies_taken)

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
