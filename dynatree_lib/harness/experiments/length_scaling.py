"""Notebook 05: the paper's four methods at each generation length of ``sweeps.T_list``."""
from __future__ import annotations

from pathlib import Path

from ..measure.cell import Cell
from ..setup.profiles import Profile
from .catalog import experiment
from .cells import SweepExperiment, paper_four


@experiment
class LengthScaling(SweepExperiment):
    name = "length_scaling"
    notebook = "05_length_scaling"

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        ws = p.sweeps.workload
        return [c for T in p.sweeps.T_list for c in paper_four(p, ws, T=T, L=p.L_max(ws), tags={"T": T}, root=root)]
