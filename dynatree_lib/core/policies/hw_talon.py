"""TALON with a budget the machine chooses (CAST's and Sequoia's point: size the tree for the hardware that verifies
it): the most drafted nodes whose verification, by the machine's measured curve, costs at most ``1 + overhead``
one-token forwards. TALON's own rule grows the tree within that budget (``talon.TalonPolicy``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..validate import check_field_types, is_int, is_real, require
from .base import Session
from .talon import TalonConfig, TalonPolicy


@dataclass(frozen=True)
class HardwareTalonConfig:
    """``verify_ms``: the target's verification curve fwd(k) as (k, ms) pairs, k from 1 ascending (the profile's
    ``costs.json``; linear in between, flat past the last); ``overhead``: how much more than a one-token forward a
    verification may cost; ``mu`` and ``K``: TALON's gate and root width."""

    method: ClassVar[str] = "talon_hw"

    verify_ms: tuple = ((1, 1.0), (64, 1.0))
    overhead: float = 0.25
    mu: float = 0.03
    K: int = 10

    def __post_init__(self) -> None:
        check_field_types(self)
        curve = self.verify_ms
        ok = len(curve) >= 2 and all(len(p) == 2 and is_int(p[0]) and is_real(p[1]) and p[1] > 0 for p in curve)
        require(ok and curve[0][0] == 1 and all(a[0] < b[0] for a, b in zip(curve, curve[1:])),
                f"verify_ms must be (k, ms) pairs from k = 1, ascending, ms > 0, got {curve!r}")
        require(is_real(self.overhead) and self.overhead >= 0, f"overhead must be >= 0, got {self.overhead!r}")

    def budget(self) -> int:
        """The most drafted nodes N (at least 1) whose verification of N + 1 tokens the curve prices within the
        overhead (the curve's last k bounds N)."""
        limit, curve = (1.0 + self.overhead) * self.verify_ms[0][1], self.verify_ms
        best = 1
        for (k0, m0), (k1, m1) in zip(curve, curve[1:]):
            for k in range(k0, k1 + 1):
                if m0 + (m1 - m0) * (k - k0) / (k1 - k0) <= limit:
                    best = max(best, k - 1)
        return best

    def policy(self, session: Session | None = None) -> TalonPolicy:
        return TalonPolicy(TalonConfig(mu=self.mu, N=self.budget(), K=self.K))
