"""The paper's Table 4 (notebook 04) on the sweeps' workload."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

from ... import methods as registry
from ...core.policies.static import FixedTreeConfig
from ..measure.cell import Cell
from ..setup import variants as v
from ..setup.profiles import Profile
from .catalog import Settings, experiment
from .cells import SweepExperiment, replicate_tag
from .tuning import tuned


@dataclasses.dataclass(frozen=True)
class AblationSettings(Settings):
    """``min_prompts`` at least (the sweeps' ``n_prompts`` where that is more) and ``replicates``, each in a process
    of its own."""

    min_prompts: int = 0
    replicates: int = 1
    part: ClassVar[str] = "ablation"
    positive: ClassVar[tuple] = ("replicates",)


@experiment
class Ablation(SweepExperiment):
    name = "ablation"
    notebook = "04_ablation"
    in_process = True
    settings = AblationSettings

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        """The fixed tree D=5, B=2 (the paper's baseline), the fixed tree that the tuned DynaTree reduces to (D = D0,
        B = B_mid), + dynamic breadth & depth, + history adaptation; per replicate (replicate 0 untagged)."""
        return [c for r in range(self.settings_of(p).replicates) for c in self.steps(p, r, root)]

    def steps(self, p: Profile, r: int, root: Path | None) -> list[Cell]:
        """The ablation's cells in replicate ``r``."""
        ws, rep = p.sweeps.workload, replicate_tag(r)
        full = tuned(p, registry.DYNATREE, ws, root)
        at = dict(dataset=ws, T=p.protocol.T, L_max=p.L_max(ws), dtype=p.models.dtype)
        fixed = dict(method=registry.FIXED_TREE, **at)
        paper = FixedTreeConfig(D=5, B=2, tau=full.tau, n_max=full.n_max)
        matched = FixedTreeConfig(D=full.D0, B=full.B_mid, tau=full.tau, n_max=full.n_max)
        return [Cell(method=registry.AR, config=None, tags=rep, **at),
                Cell(variant=v.ABLATION_FIXED, config=paper, tags={"step": 0, **rep}, **fixed),
                Cell(variant=v.ABLATION_MATCHED, config=matched, tags={"step": 0.5, **rep}, **fixed),
                Cell(method=registry.DYNATREE, variant=v.ABLATION_DYNAMIC,
                     config=dataclasses.replace(full, history=False), tags={"step": 1, **rep}, **at),
                Cell(method=registry.DYNATREE, variant=v.ABLATION_HISTORY, config=full, tags={"step": 2, **rep}, **at)]

    def prompts(self, p: Profile, cell: Cell) -> int:
        return max(p.sweeps.n_prompts, self.settings_of(p).min_prompts)
