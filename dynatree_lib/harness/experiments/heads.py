"""Notebook 13 (issue 56): every exact method of our loop that drafts, drafting with the profile's feature head."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ... import methods as registry
from ...core.sampling import Sampling
from ..measure.cell import Cell
from ..setup.profiles import Profile
from .catalog import CountsOwnPrompts, PromptSettings, experiment
from .cells import GREEDY, network_alone, tuned_cell
from .talon import head_profile


def head_methods() -> tuple[str, ...]:
    """The methods a feature head drafts for: every exact method of our loop that drafts, the extension aside
    (its cut is built from the forward costs measured with the profile's own draft), and the opt-in ones (measured
    only where an experiment names them)."""
    return tuple(n for n, m in registry.REGISTRY.items()
                 if m.drafts and m.impl == "ours" and m.exact and m.study.role not in ("extension", "opt_in"))


@dataclass(frozen=True)
class HeadsSettings(PromptSettings):
    """``n_prompts`` test prompts per continuation workload and ``n_questions`` per Spec-Bench category."""

    n_prompts: int = 4
    part: ClassVar[str] = "heads"


@experiment
class Heads(CountsOwnPrompts):
    name = "heads"
    notebook = "13_heads"
    in_process = True
    tuning = "tuning"
    settings = HeadsSettings

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        """AR and every ``head_methods`` method drafting with the profile's feature head, greedy (with the draft
        network alone beside the methods that declare ``controls``) and at each sampling temperature, each replicate
        in a fresh process. Settings: the profile's tuned ones, as tuned with its own draft (the head is not tuned
        separately)."""
        if not p.extras.head:
            return []
        cells = []
        for r in range(p.protocol.replicates):
            for ws in p.workloads:
                for s in (GREEDY, *map(Sampling, p.protocol.temperatures)):
                    tags = {"role": "head", "replicate": r, "temperature": s.temperature}
                    row = [tuned_cell(p, ws, m, tags=tags, root=root, sampling=s)
                           for m in (registry.AR, *head_methods())]
                    cells += row + (network_alone(row) if s is GREEDY else [])
        return cells

    def profile(self, p: Profile) -> Profile:
        return head_profile(p) if p.extras.head else p
