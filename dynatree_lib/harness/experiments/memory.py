"""Table 5 (notebook 08): peak memory, each cell in a process of its own; and the head's memory target (issue 56)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ... import methods as registry
from ..measure.cell import Cell
from ..measure.memory import run_memory
from ..measure.store import ResultStore, archive_for_rerun, record_key, results_path
from ..setup.profiles import Profile
from ..setup.workloads import WIKITEXT2
from .catalog import Document, Experiment, Settings, check_machine, experiment, key_parts
from .cells import main_methods, tuned_cell
from .head_reports import with_head

MEMORY_HEAD_WORKLOAD, MEMORY_HEAD_REPEATS = WIKITEXT2, 3


@dataclass(frozen=True)
class MemorySettings(Settings):
    """``n_prompts`` per workload (Spec-Bench's the first questions of its test split), each in a process of its own,
    one replicate: memory is bytes, not a timing."""

    n_prompts: int = 1
    part: ClassVar[str] = "memory"
    positive: ClassVar[tuple] = ("n_prompts",)


@experiment
class Memory(Experiment):
    name = "memory"
    notebook = "08_memory"
    tuning = "tuning"
    settings = MemorySettings

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        return [tuned_cell(p, ws, m, tags={"role": "memory"}, root=root) for ws in p.workloads for m in main_methods()]

    def prompts(self, p: Profile, cell: Cell) -> int:
        return self.settings_of(p).n_prompts

    def measure(self, p: Profile, todo: list, path: Path) -> None:
        run_memory(p, todo, path, {k: self.prompts(p, c) for c, k in todo})  # each row in a fresh process


def run_memory_head(profile: Profile, rerun: bool = False, root: Path | None = None,
                    render_only: bool = False) -> Path:
    """AR and DynaTree on v4, DynaTree on the head, as notebook 08 measures memory (each cell in
    ``MEMORY_HEAD_REPEATS`` fresh processes, one row each) on the first WikiText-2 test prompt (keyed as a memory cell
    of one prompt)."""

    path = results_path("memory_head", profile, root)
    archive_for_rerun(path, rerun, render_only)
    store, todo = ResultStore(path), []
    for p, methods in ((profile, (registry.AR, registry.DYNATREE)), (with_head(profile), (registry.DYNATREE,))):
        cells = [(c, record_key(**key_parts(1, p, c))) for c in Memory().cells(p)
                 if c.dataset == MEMORY_HEAD_WORKLOAD and c.method in methods]
        todo.append((p, [(c, k) for c, k in cells if store.get(k) is None]))
    if any(cells for _, cells in todo) and render_only:
        raise FileNotFoundError(f"render-only: cells of 'memory_head' are missing from {path}; run without --render")
    for p, cells in todo:
        if cells:
            check_machine(p)
            run_memory(p, cells, path, {k: 1 for _, k in cells}, repeats=MEMORY_HEAD_REPEATS)
    return path


@experiment
class MemoryHead(Document):
    """Issue 56's memory target: the head's memory beside v4's."""
    name = "memory_head"
    notebook = "13_heads"
    make = run_memory_head
