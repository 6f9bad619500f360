"""Notebook 10: sampling at each of the protocol's temperatures, every method of the main table."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...core.sampling import Sampling
from ..measure.cell import Cell
from ..setup.profiles import Profile
from ..setup.workloads import count
from .catalog import Experiment, Settings, experiment
from .cells import extension_cells, main_methods, paper_settings, replicate_tag, tuned_cell
from .costs import costs_first
from .main import slow_share


@dataclass(frozen=True)
class SamplingSettings(Settings):
    """At least ``min_prompts`` per workload without categories and ``min_questions`` per Spec-Bench category (the
    protocol's slow share of its prompts where that is more), and ``replicates``, each in a process of its own."""

    min_prompts: int = 0
    min_questions: int = 0
    replicates: int = 1
    part: ClassVar[str] = "sampling"
    positive: ClassVar[tuple] = ("replicates",)


@experiment
class SamplingExperiment(Experiment):
    name = "sampling"
    notebook = "10_sampling"
    in_process = True
    tuning = "tuning"
    settings = SamplingSettings

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        """Every method (tuned at that temperature where the tuning ran at it, else greedy-tuned), DynaTree with the
        paper's settings and the extension, on the test prompts, per replicate (replicate 0 untagged)."""
        cells = []
        for r, t in ((r, t) for r in range(self.settings_of(p).replicates) for t in p.protocol.temperatures):
            s, tags = Sampling(t), {"temperature": t, **replicate_tag(r)}
            for ws in p.workloads:
                cells += [tuned_cell(p, ws, m, tags=tags, root=root, sampling=s) for m in main_methods()]
                cells += paper_settings(p, ws, p.models.dtype, tags, s)
                cells += extension_cells(p, ws, dtype=p.models.dtype, tags=tags, root=root, sampling=s,
                                         variants=False)
        return cells

    def prompts(self, p: Profile, cell: Cell) -> int:
        own = self.settings_of(p)
        share = slow_share(p, count(cell.dataset, p.protocol.n_prompts, p.protocol.n_questions))
        return max(share, count(cell.dataset, own.min_prompts, own.min_questions))

    def before(self, p: Profile, *, rerun: bool, root: Path | None, render_only: bool) -> None:
        costs_first(p, rerun=False, root=root, render_only=render_only)
