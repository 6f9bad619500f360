"""DynaTree: confidence-aware breadth and depth (Section 3.3), with History Adaptation per iteration or, as the
authors' code, per prompt across a run (``AuthorsHistory``)."""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from math import log
from typing import ClassVar

from .base import DraftPolicy, Outcome, Session, keep_top
from ..validate import check_field_types, is_int, require


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
            return DynaTreePolicy(self, (session or Session()).state(self, AuthorsHistory))
        return DynaTreePolicy(self)


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

    def expand(self, nodes: list[int], depth: list[int], cum_logp: list[float]) -> list[int]:
        return [u for u in nodes if self.grows(depth[u], cum_logp[u])]

    def grows(self, depth: int, cum_logp: float) -> bool:
        """Whether a node at ``depth`` with path log-prob ``cum_logp`` gets children: dynamic depth (Eq. stop/deep)."""
        c = self.cfg
        if c.tau_on_parent and c.tau > 0 and cum_logp < log(c.tau):
            return False
        if not c.dynamic_depth:
            return depth < self.D0
        p = math.exp(cum_logp)
        return depth < c.D_max and p >= c.rho_stop and (depth < self.D0 or p > self.rho_deep)

    def observe(self, outcome: Outcome) -> None:
        """History Adaptation: a_r = accepted path length / tree depth, proportional control around a*.

        High recent acceptance deepens the base depth and lowers tau_h (more nodes count as confident
        and get B_min children, so budget goes to depth); low acceptance does the opposite. D0 stays in
        [1, D_max - 1] and tau_h in [tau_l, 1) so the breadth rule stays well ordered.
        """
        c = self.cfg
        if not c.history or outcome.tree_depth == 0 or self.session is not None:
            return
        self.window.append(outcome.accepted / outcome.tree_depth)
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
