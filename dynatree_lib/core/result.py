"""What a decoder returns: the new tokens, timings, counts and (speculative loop) a per-iteration log."""
from __future__ import annotations

from dataclasses import dataclass, field

from .tree import Tree


@dataclass(frozen=True)
class Totals:
    """Counts over one generation. ``iterations``: target verification forwards (AR: one per token)."""

    iterations: int = 0
    accepted: int = 0        # draft tokens accepted, bonus tokens excluded
    drafted_nodes: int = 0
    drafted_depth: int = 0   # sum over iterations of the deepest drafted node
    draft_forwards: int = 0


@dataclass
class IterationLog:
    """Per-iteration statistics of the speculative loop (one entry per target verification forward)."""

    nodes: list[int] = field(default_factory=list)           # drafted nodes in the tree (root excluded)
    depth: list[int] = field(default_factory=list)           # depth of the deepest drafted node
    accepted: list[int] = field(default_factory=list)        # accepted draft tokens before the bonus
    committed: list[int] = field(default_factory=list)       # tokens committed (after the T / EOS cut)
    draft_forwards: list[int] = field(default_factory=list)  # draft-model forwards spent drafting
    draft_s: list[float] = field(default_factory=list)       # seconds: drafting (draft forwards + tree growth)
    verify_s: list[float] = field(default_factory=list)      # seconds: the target forward over the tree
    commit_s: list[float] = field(default_factory=list)      # seconds: path selection, KV commit, bookkeeping

    def add(self, tree: Tree, accepted: int, committed: int, draft_forwards: int, times: list[float]) -> None:
        """One iteration; ``times``: clock readings before drafting, verifying, committing, and after."""
        for xs, v in ((self.nodes, tree.n_drafted), (self.depth, tree.levels), (self.accepted, accepted),
                      (self.committed, committed), (self.draft_forwards, draft_forwards),
                      (self.draft_s, times[1] - times[0]), (self.verify_s, times[2] - times[1]),
                      (self.commit_s, times[3] - times[2])):
            xs.append(v)

    def totals(self) -> Totals:
        return Totals(len(self.nodes), sum(self.accepted), sum(self.nodes), sum(self.depth), sum(self.draft_forwards))


@dataclass
class GenerationResult:
    """New tokens, timings and counts (``totals``); the speculative loop adds its per-iteration ``log``."""

    tokens: list[int]
    wall_s: float = 0.0           # whole generation, prefill included
    ttft_s: float = float("nan")  # call -> first new token known
    prefill_s: float = 0.0
    target_forwards: int = 0      # every target forward: prefill, iterations, rebuilds
    engine: str = ""              # how the target ran: "eager", "static", "static+fused", "hf-generate", ...
    log: IterationLog | None = None
    counted: Totals | None = None  # a decoder without a log reports its counts here (HF assisted)
    trees: list[dict] = field(default_factory=list)  # recorded trees (``record_trees``)
    extra: dict = field(default_factory=dict)  # per-prompt metrics only another engine reports (its row keeps them)
    decisions: list[dict] | None = None  # per iteration, what the policy decided (a controller: budget and why)

    @property
    def totals(self) -> Totals:
        """Summed from the log where there is one, else as counted (AR: one iteration per token)."""
        if self.log is not None:
            return self.log.totals()
        return self.counted or Totals(iterations=len(self.tokens))

    iterations = property(lambda self: self.totals.iterations)
    accepted = property(lambda self: self.totals.accepted)
    drafted_nodes = property(lambda self: self.totals.drafted_nodes)
    drafted_depth = property(lambda self: self.totals.drafted_depth)
    draft_forwards = property(lambda self: self.totals.draft_forwards)
