"""Notebook 10: sampling at each of the protocol's temperatures, every method of the main table."""
from __future__ import annotations

from pathlib import Path

from ...core.sampling import Sampling
from ..measure.cell import Cell
from ..setup.profiles import Profile
from ..setup.workloads import count
from .catalog import Experiment, experiment
from .cells import extension_cells, main_methods, paper_settings, tuned_cell
from .costs import costs_first
from .main import slow_share


@experiment
class SamplingExperiment(Experiment):
    name = "sampling"
    notebook = "10_sampling"
    tuning = "tuning"

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        """Every method (tuned at that temperature where the tuning ran at it, else greedy-tuned), DynaTree with the
        paper's settings and the extension, on the test prompts."""
        cells = []
        for t in p.protocol.temperatures:
            s, tags = Sampling(t), {"temperature": t}
            for ws in p.workloads:
                cells += [tuned_cell(p, ws, m, tags=tags, root=root, sampling=s) for m in main_methods()]
                cells += paper_settings(p, ws, p.models.dtype, tags, s)
                cells += extension_cells(p, ws, dtype=p.models.dtype, tags=tags, root=root, sampling=s,
                                         variants=False)
        return cells

    def prompts(self, p: Profile, cell: Cell) -> int:
        return slow_share(p, count(cell.dataset, p.protocol.n_prompts, p.protocol.n_questions))

    def before(self, p: Profile, *, rerun: bool, root: Path | None, render_only: bool) -> None:
        costs_first(p, rerun=False, root=root, render_only=render_only)
