"""Notebook 06: the fixed tree's grid."""
from __future__ import annotations

from pathlib import Path

from ... import methods as registry
from ...core.policies.static import FixedTreeConfig
from ..measure.cell import Cell
from ..setup import variants as v
from ..setup.profiles import Profile
from .catalog import experiment
from .cells import SweepExperiment


@experiment
class FixedSweep(SweepExperiment):
    name = "fixed_sweep"
    notebook = "06_sweeps"

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        """The fixed tree's grid, plus the paper's main-table setting (D=8, B=3, tau=0.1) if the grid lacks it."""
        ws, g = p.sweeps.workload, p.sweeps.fixed_grid
        at = dict(dataset=ws, T=p.protocol.T, L_max=p.L_max(ws), dtype=p.models.dtype)
        grid = [(D, B, tau) for D in g["D"] for B in g["B"] for tau in g["tau"]]
        paper = (p.paper.fixed.D, p.paper.fixed.B, p.paper.fixed.tau)
        cells = [Cell(method=registry.AR, config=None, **at)]
        for D, B, tau in grid + ([paper] if paper not in grid else []):
            cfg = FixedTreeConfig(D=D, B=B, tau=tau, n_max=p.paper.fixed.n_max)
            cells.append(Cell(method=registry.FIXED_TREE, variant=v.FIXED_GRID, config=cfg,
                              tags={"D": D, "B": B, "tau": tau}, **at))
        return cells
