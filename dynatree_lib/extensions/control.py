"""The controller (our extension): each tree's node budget chosen from the acceptance seen so far and the machine's
costs, down to budget 0, a plain AR step; it wraps any drafting policy.

Before each tree it picks the budget ("arm") with the most expected committed tokens per modelled ms. An arm's
tokens per verification are a shared model's prediction (the acceptance seen at every depth, across all arms) at
the depth its trees reach, times how far its own recent trees beat or missed their predictions; its ms are notebook
03's cost model of an iteration (``CostAwareConfig``'s terms) at the nodes and draft forwards its trees recently
used, plus the controller's own step. A tree accepted whole sends the next one to the method's own budget. AR's tokens per
verification are exactly 1, so AR is the arm to beat. While AR leads it probes the best tree now and then, as
long as what probes lost against AR stays within a share (``explore``) of the modelled time so far: text where
drafting pays again is found, a probe that costs little comes back soon, and the loss to AR is bounded.

Every choice depends only on verifications already done, never on the one to come: greedy output stays AR's
and sampling keeps the target's law (``tests/methods/test_control.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.policies.base import DraftPolicy, Level, Outcome
from ..core.tree import Tree
from ..core.validate import check_field_types, is_int, require
from .cost_aware import CPU_BF16_DRAFT, CPU_BF16_FIXED, CPU_BF16_VERIFY, check_verify_curve, verify_cost

# why a budget was chosen (``ControlledPolicy.trace``)
PROBE, START, BEST, AR_BEST, CLIMB = "probe", "start", "best", "ar_step", "climb"


@dataclass(frozen=True)
class ControlConfig:
    """How the controller prices and explores; the cost terms are in ms (or in one-token forwards: only ratios
    count), as ``CostAwareConfig``'s: ``verify_ms`` the target's k-token forward as (k, ms) pairs, ``draft_ms`` one
    further drafting level, ``fixed_ms`` the rest of a drafted iteration (its first level and the commit),
    ``step_ms`` the rest of an AR step in the loop, ``decide_ms`` the controller's own decision (measured:
    ``decision_ms``). ``budgets``: the tree budgets it tries below the method's own ``n_max`` (which is the largest
    arm and the first); ``decay``: the weight an arm's past keeps per new verification of it; ``prior``: the weight,
    in verifications, of the acceptance-model prediction in an arm's estimate; ``explore``: the most that probes
    may lose against AR, as a share of the modelled time; ``warmup``: the first trees, at the method's own budget,
    before any choice."""

    verify_ms: tuple = CPU_BF16_VERIFY
    draft_ms: float = CPU_BF16_DRAFT
    fixed_ms: float = CPU_BF16_FIXED
    step_ms: float = 0.015
    decide_ms: float = 0.005
    budgets: tuple = (1, 2, 4, 8, 16, 32)
    decay: float = 0.85
    prior: float = 1.0
    explore: float = 0.03
    warmup: int = 2

    def __post_init__(self) -> None:
        check_field_types(self)
        check_verify_curve(self.verify_ms, least=1)
        for name in ("draft_ms", "fixed_ms", "step_ms", "decide_ms"):
            require(getattr(self, name) >= 0, f"{name} must be >= 0 ms, got {getattr(self, name)!r}")
        require(isinstance(self.budgets, tuple) and all(is_int(b) and b >= 1 for b in self.budgets)
                and list(self.budgets) == sorted(set(self.budgets)),
                f"budgets must be ascending distinct node counts >= 1, got {self.budgets!r}")
        require(0.0 <= self.decay < 1.0, f"decay must be in [0, 1), got {self.decay!r}")
        require(self.prior > 0, f"prior must be > 0 verifications, got {self.prior!r}")
        require(is_int(self.warmup) and self.warmup >= 1, f"warmup must be an integer >= 1, got {self.warmup!r}")
        require(0.0 <= self.explore < 1.0, f"explore must be a share in [0, 1), got {self.explore!r}")

    def wrap(self, policy: DraftPolicy) -> "ControlledPolicy":
        """``policy`` with each tree's budget chosen by this controller."""
        return ControlledPolicy(self, policy)


class Arm:
    """One budget's recent trees, decayed: their weight, and sums of committed tokens over what the shared acceptance
    model predicted for them (``ratio``), of their depth, verified nodes and draft forwards."""

    __slots__ = ("budget", "w", "ratio", "depth", "nodes", "forwards")

    def __init__(self, budget: int):
        self.budget, self.w, self.ratio, self.depth, self.nodes, self.forwards = budget, 0.0, 0.0, 0.0, 0.0, 0.0

    def add(self, decay: float, ratio: float, depth: int, nodes: int, forwards: int) -> None:
        self.w, self.ratio, self.depth = self.w * decay + 1.0, self.ratio * decay + ratio, self.depth * decay + depth
        self.nodes, self.forwards = self.nodes * decay + nodes, self.forwards * decay + forwards

    def mean(self, total: float, prior: float, weight: float) -> float:
        """A decayed sum's mean, shrunk towards ``prior`` by ``weight`` verifications."""
        return (total + weight * prior) / (self.w + weight)


class ControlledPolicy(DraftPolicy):
    """The wrapped policy shapes every tree; this chooses its budget (``n_max``, and a depth no deeper) first.

    An arm's expected tokens are the shared model's prediction at the depth its trees reach (``predicted``), times
    how far its own trees beat or missed the prediction made for them: every tree informs every arm through the
    shared model, and an arm's own trees correct it for its breadth."""

    def __init__(self, cfg: ControlConfig, base: DraftPolicy):
        self.cfg, self.base = cfg, base
        self.sampled, self.max_breadth = base.sampled, base.max_breadth
        top = base.n_max
        self.arms = [Arm(b) for b in cfg.budgets if b < top] + [Arm(top)]
        self.pooled = Arm(top)  # every tree, whatever its arm
        self.passed: list[float] = []  # per depth d >= 1 (index d - 1): decayed verifications reaching d ...
        self.tried: list[float] = []   # ... out of those that could (the parent accepted, the tree that deep)
        self.chosen: Arm | None = None
        self.expected = 1.0  # the shared model's tokens for the chosen arm's tree, when chosen
        self.best: tuple[float, Arm] | None = None  # the best tree and its rate, until the next drafted tree
        self.spent = self.lost = 0.0  # modelled ms of every iteration so far; of those, what probes lost against AR
        self.probing = self.saturated = False
        self.last = (0, 0)  # the verified tree's drafted nodes and draft forwards (``trim``)
        self.log: list[tuple[int, str, float]] = []  # (budget, why, expected tokens per ms) per tree
        self.n_max, self.max_depth = top, base.max_depth
        # an AR step commits one token at the one-token forward plus the loop's step: the rate to beat, fixed
        self.ar_rate = 1.0 / (verify_cost(cfg.verify_ms, 1) + cfg.step_ms + cfg.decide_ms)

    # ---- the choice, before each tree ----------------------------------------------------------------------------

    def begin(self) -> None:
        budget, why, rate = self.choose()
        self.n_max = max(budget, 1)
        self.max_depth = min(self.base.max_depth, budget)
        if self.chosen is not None:
            self.expected = self.predicted(self.depth_of(self.chosen))
        self.log.append((budget, why, rate))

    def choose(self) -> tuple[int, str, float]:
        ar_rate = self.ar_rate
        if len(self.log) < self.cfg.warmup:
            self.chosen = self.arms[-1]
            return self.chosen.budget, START, self.rate(self.chosen)
        if self.best is None:  # the rates change only when a drafted tree was observed
            rate, i = max((self.rate(a), -i) for i, a in enumerate(self.arms))
            self.best = (rate, self.arms[-i])
        rate, arm = self.best
        if rate > ar_rate:
            if (up := self.climb(arm)) is not None:
                self.chosen = up
                return up.budget, CLIMB, self.rate(up)
            self.chosen = arm
            return arm.budget, BEST, rate
        if self.lost + self.cost_of(arm) - self.tokens_of(arm) / ar_rate <= self.cfg.explore * self.spent:
            self.chosen, self.probing = arm, True  # what it may lose fits the budget (an adaptive method's trees
            return arm.budget, PROBE, rate         # are small where its draft is unsure: its probes cost little)
        self.chosen, self.spent = None, self.spent + 1.0 / ar_rate
        return 0, AR_BEST, ar_rate

    def climb(self, best: Arm) -> Arm | None:
        """The method's own budget (the largest arm), where the last tree was accepted whole: it was too small to
        tell how deep the draft is right now, and the method sizes its own trees; else None."""
        return self.arms[-1] if self.saturated and best is not self.arms[-1] else None

    def depth_of(self, arm: Arm) -> float:
        """The depth ``arm``'s trees reach: its own, shrunk towards every tree's capped by its budget (before any
        tree: as deep as its budget and the method allow)."""
        return arm.mean(arm.depth, min(arm.budget, self.pooled.depth / self.pooled.w if self.pooled.w else
                                       self.base.max_depth), self.cfg.prior)

    def rate(self, arm: Arm) -> float:
        """Expected committed tokens per ms of a tree of ``arm``'s budget."""
        return self.tokens_of(arm) / self.cost_of(arm)

    def tokens_of(self, arm: Arm) -> float:
        """Expected committed tokens of a tree of ``arm``'s budget."""
        return arm.mean(arm.ratio, 1.0, self.cfg.prior) * self.predicted(self.depth_of(arm))

    def cost_of(self, arm: Arm) -> float:
        """Modelled ms of a tree of ``arm``'s budget: its nodes and draft forwards are its own trees', shrunk towards
        every tree's capped by its budget (an adaptive method's trees are smaller than their budget, and more so
        where its draft is unsure)."""
        prior, pool, depth = self.cfg.prior, self.pooled, self.depth_of(arm)
        nodes = arm.mean(arm.nodes, min(arm.budget, pool.nodes / pool.w) if pool.w else arm.budget, prior)
        forwards = arm.mean(arm.forwards, min(depth, pool.forwards / pool.w) if pool.w else depth, prior)
        return self.cost(nodes, forwards)

    def cost(self, nodes: float, forwards: float) -> float:
        """Modelled ms of a drafted iteration: ``forwards`` draft forwards, ``nodes`` verified beside the root."""
        c = self.cfg
        return c.fixed_ms + max(forwards - 1.0, 0.0) * c.draft_ms + verify_cost(c.verify_ms, nodes + 1) + c.decide_ms

    def predicted(self, depth: float) -> float:
        """Committed tokens per verification of a tree ``depth`` deep (between whole depths, interpolated): the bonus
        plus the chance of reaching each depth. A depth's acceptance is what was seen there, shrunk by one
        verification towards the depth above's (the first depth's towards 1/2): a depth never tried is taken to
        accept as the one above it."""
        total, reach, rate = 1.0, 1.0, 0.5
        for d in range(int(math.ceil(depth))):
            passed, tried = (self.passed[d], self.tried[d]) if d < len(self.tried) else (0.0, 0.0)
            rate = (passed + rate) / (tried + 1.0)
            reach *= rate
            total += reach * min(depth - d, 1.0)
        return total

    # ---- the drafting rules: the wrapped policy's ------------------------------------------------------------------

    def select(self, top_logp, child_cum_logp, depth):
        return self.base.select(top_logp, child_cum_logp, depth)

    def expand(self, nodes, depth, cum_logp):
        return self.base.expand(nodes, depth, cum_logp)

    def next_level(self, level: Level) -> str:
        return self.base.next_level(level)

    def trim(self, tree: Tree, draft_forwards: int) -> Tree:
        tree = self.base.trim(tree, draft_forwards) if self.chosen is not None else tree
        self.last = (tree.n_drafted, draft_forwards)
        return tree

    # ---- after each verification -----------------------------------------------------------------------------------

    def observe(self, outcome: Outcome) -> None:
        arm = self.chosen
        if arm is None:  # an AR step: nothing drafted, nothing learned about drafting
            return
        self.base.observe(outcome)
        if self.last[0] == 0:  # the last token's tree is the root alone (no room to draft): nothing learned
            return
        for a in (arm, self.pooled):
            a.add(self.cfg.decay, (outcome.accepted + 1) / self.expected, outcome.tree_depth, *self.last)
        self.best, self.saturated = None, outcome.accepted == outcome.tree_depth
        self.learn_depths(outcome.accepted, outcome.tree_depth)
        ms = self.cost(*self.last)
        self.spent += ms
        if self.probing:  # what it lost against AR steps committing as many tokens (a gain counts back)
            self.lost += ms - (outcome.accepted + 1) / self.ar_rate
            self.probing = False

    def learn_depths(self, accepted: int, tree_depth: int) -> None:
        """Depth d was tried when the path reached d - 1 and the tree had depth d; passed when accepted. Only the
        depths tried decay: what was seen deeper holds until a tree reaches there again."""
        d_tried = min(accepted + 1, tree_depth)
        while len(self.tried) < d_tried:
            self.tried.append(0.0), self.passed.append(0.0)
        keep = self.cfg.decay
        for d in range(d_tried):
            self.tried[d] = self.tried[d] * keep + 1.0
            self.passed[d] = self.passed[d] * keep + (1.0 if d < accepted else 0.0)

    def finish(self, tokens: int, iterations: int) -> None:
        self.base.finish(tokens, iterations)

    def trace(self) -> list[dict]:
        """Per tree: the budget chosen (0: an AR step), why (start, best, climb, ar_step, probe) and its expected tokens per
        ms."""
        return [{"budget": b, "why": why, "rate": round(rate, 4)} for b, why, rate in self.log]


def decision_ms(n: int = 2000) -> float:
    """The controller's decision plus its bookkeeping, in ms per tree, timed on a synthetic generation (what
    ``ControlConfig.decide_ms`` prices; a benchmark, not a test)."""
    import time

    class Base(DraftPolicy):
        n_max, max_depth, max_breadth = 24, 8, 3

    policy = ControlConfig().wrap(Base())
    t0 = time.perf_counter()
    for i in range(n):
        policy.begin()
        policy.last = (min(policy.n_max, 24), min(policy.max_depth, 8))
        policy.observe(Outcome(i % 4, min(policy.max_depth, 8)))
    return (time.perf_counter() - t0) * 1e3 / n
