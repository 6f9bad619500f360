"""TALON's budget-driven tree (the TALON paper, Section 5)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from .base import DraftPolicy, Session
from ..validate import check_field_types, is_int, require


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

    def expand(self, nodes: list[int], depth: list[int], cum_logp: list[float]) -> list[int]:
        return nodes  # every kept node grows
