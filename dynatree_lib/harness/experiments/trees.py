"""Notebook 09: the trees the tree methods draft, recorded on dev prompts (the drawings show them)."""
from __future__ import annotations

from pathlib import Path

from ... import methods as registry
from ..measure.cell import Cell
from ..setup.profiles import Profile
from ..setup.workloads import count
from .catalog import Experiment, experiment
from .cells import tuned_cell


@experiment
class Trees(Experiment):
    name = "trees"
    notebook = "09_tree_shapes"
    tuning = "tuning"

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        """AR and the methods that draft trees (``Study.trees``) of the paper and the seed systems, with their trees
        recorded (``trees_per_prompt`` iterations each), on dev prompts."""
        methods = (registry.AR,) + tuple(m for m in registry.names("paper") + registry.names("seed")
                                         if registry.REGISTRY[m].study.trees)
        return [tuned_cell(p, ws, m, tags={"record_trees": p.extras.trees_per_prompt}, root=root, split="dev")
                for ws in p.workloads for m in methods]

    def prompts(self, p: Profile, cell: Cell) -> int:
        return count(cell.dataset, p.extras.trees_n_prompts, 1)
