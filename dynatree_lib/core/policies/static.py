"""Static drafting: a linear chain of K tokens (``LinearConfig``) and a fixed tree (``FixedTreeConfig``), both
``StaticPolicy``: constant breadth under a depth limit."""
from __future__ import annotations

from dataclasses import dataclass
from math import log
from typing import ClassVar

from .base import DraftPolicy, Session, keep_top
from ..validate import check_field_types, is_int, require


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

    def grows(self, depth: int, cum_logp: float) -> bool:
        """Whether a node at ``depth`` with path log-prob ``cum_logp`` gets children."""
        return depth < self.depth and not (self.tau_on_parent and self.tau > 0 and cum_logp < log(self.tau))

    def expand(self, nodes: list[int], depth: list[int], cum_logp: list[float]) -> list[int]:
        return [u for u in nodes if self.grows(depth[u], cum_logp[u])]
