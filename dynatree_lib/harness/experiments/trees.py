"""Notebook 09: the trees the tree methods draft, recorded on dev prompts (the drawings show them)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ... import methods as registry
from ..measure.cell import Cell
from ..setup.profiles import Profile
from ..setup.workloads import count
from .catalog import Experiment, Settings, experiment
from .cells import tuned_cell


@dataclass(frozen=True)
class TreesSettings(Settings):
    """``n_prompts`` dev prompts per workload, each recording its first ``per_prompt`` trees."""

    n_prompts: int = 2
    per_prompt: int = 64
    part: ClassVar[str] = "trees"
    positive: ClassVar[tuple] = ("per_prompt",)


@experiment
class Trees(Experiment):
    name = "trees"
    notebook = "09_tree_shapes"
    tuning = "tuning"
    settings = TreesSettings

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        """AR and the methods that draft trees (``Study.trees``) of the paper and the seed systems, with their trees
        recorded (``trees.per_prompt`` iterations each), on dev prompts."""
        methods = (registry.AR,) + tuple(m for m in registry.names("paper") + registry.names("seed")
                                         if registry.REGISTRY[m].study.trees)
        per = self.settings_of(p).per_prompt
        return [tuned_cell(p, ws, m, tags={"record_trees": per}, root=root, split="dev")
                for ws in p.workloads for m in methods]

    def prompts(self, p: Profile, cell: Cell) -> int:
        return count(cell.dataset, self.settings_of(p).n_prompts, 1)
