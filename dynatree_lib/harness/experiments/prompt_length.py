"""Notebook 07: the paper's four methods at each prompt length of ``sweeps.L_max_list``."""
from __future__ import annotations

from pathlib import Path

from ..measure.cell import Cell
from ..setup.profiles import Profile
from .catalog import experiment
from .cells import SweepExperiment, paper_four


@experiment
class PromptLength(SweepExperiment):
    name = "prompt_length"
    notebook = "07_prompt_length"

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        return [c for L in p.sweeps.L_max_list
                for c in paper_four(p, p.sweeps.workload, T=p.protocol.T, L=L, tags={"L_max": L}, root=root)]
