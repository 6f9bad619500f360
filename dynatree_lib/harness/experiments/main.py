"""The paper's Tables 1-3 (notebook 01): every method, tuned where the profile tunes, on every workload's sealed
test prompts, measured ``replicates`` times, each replicate in a process of its own; and once in the exact
precision on fewer prompts, where every exact method must equal AR."""
from __future__ import annotations

from pathlib import Path

from ... import methods as registry
from ..measure.cell import Cell
from ..setup.profiles import Profile
from ..setup.workloads import count
from .catalog import Experiment, experiment
from .cells import extension_cells, main_methods, network_alone, paper_settings, tuned_cell
from .costs import costs_first


def slow_share(p: Profile, n: int) -> int:
    """Prompts of a row that is slow to measure (a method outside our loop, or any sampled row)."""
    return max(1, round(n * p.protocol.slow_share))


@experiment
class Main(Experiment):
    name = "main"
    notebook = "01_main_results"
    in_process = True
    tuning = "tuning"

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        """Every method (tuned where the profile tunes), DynaTree with the paper's settings and the extension, with
        the draft network alone beside each drafting method where the draft has a lookup, in the timed precision,
        for every replicate; and once in ``exact_dtype`` (fewer prompts)."""
        cells = []
        for dtype, role in ((p.models.dtype, "timed"), (p.models.exact_dtype, "exact")):
            if dtype is None or (role == "exact" and dtype == p.models.dtype):
                continue
            for r in range(p.protocol.replicates if role == "timed" else 1):
                tags = {"role": role, "replicate": r}
                for ws in p.workloads:
                    row = [tuned_cell(p, ws, m, tags=tags, dtype=dtype, root=root) for m in main_methods()]
                    row += paper_settings(p, ws, dtype, tags)
                    row += extension_cells(p, ws, dtype=dtype, tags=tags, root=root)
                    cells += row + (network_alone(row) if p.models.draft_lookup else [])
        return cells

    def prompts(self, p: Profile, cell: Cell) -> int:
        if cell.tags.get("role") == "exact":
            return count(cell.dataset, p.protocol.n_exact, 1)
        n = count(cell.dataset, p.protocol.n_prompts, p.protocol.n_questions)
        return slow_share(p, n) if registry.REGISTRY[cell.method].impl != "ours" else n

    def before(self, p: Profile, *, rerun: bool, root: Path | None, render_only: bool) -> None:
        costs_first(p, rerun=False, root=root, render_only=render_only)
