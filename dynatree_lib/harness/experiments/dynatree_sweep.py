"""Notebook 06: DynaTree's sensitivity to its thresholds, breadths and depths."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ... import methods as registry
from ..measure.cell import Cell
from ..setup import variants as v
from ..setup.profiles import Profile
from .catalog import experiment
from .cells import SweepExperiment
from .tuning import tuned


@experiment
class DynaTreeSweep(SweepExperiment):
    name = "dynatree_sweep"
    notebook = "06_sweeps"

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        """DynaTree's tuned setting with other thresholds, breadths and depths, beside the tuned fixed tree."""
        ws = p.sweeps.workload
        at = dict(dataset=ws, T=p.protocol.T, L_max=p.L_max(ws), dtype=p.models.dtype)
        dt = dict(method=registry.DYNATREE, **at)
        base = tuned(p, registry.DYNATREE, ws, root)
        cells = [Cell(method=registry.AR, config=None, **at),
                 Cell(method=registry.FIXED_TREE, config=tuned(p, registry.FIXED_TREE, ws, root),
                      tags={"sweep": "reference"}, **at)]
        for th, tl in p.sweeps.threshold_pairs:
            cells.append(Cell(variant=v.SWEEP_THRESHOLDS, config=dataclasses.replace(base, tau_h=th, tau_l=tl),
                              tags={"sweep": "thresholds", "tau_h": th, "tau_l": tl}, **dt))
        for b in p.sweeps.breadth_list:
            cfg = dataclasses.replace(base, B_min=b[0], B_mid=b[1], B_max=b[2])
            cells.append(Cell(variant=v.SWEEP_BREADTH, config=cfg, tags={"sweep": "breadth", "B": list(b)}, **dt))
        for d0, dmax in p.sweeps.depth_list:
            cells.append(Cell(variant=v.SWEEP_DEPTH, config=dataclasses.replace(base, D0=d0, D_max=dmax),
                              tags={"sweep": "depth", "D0": d0, "D_max": dmax}, **dt))
        return cells
