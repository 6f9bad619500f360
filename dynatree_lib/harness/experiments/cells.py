"""Cell builders that several experiments share: a method at its tuned setting, the paper's four methods, DynaTree
with the paper's settings, the cost-aware extension and its variants, and the draft network alone beside a method.

Tuning (profiles with candidates): every method family gets the same number of candidate settings, measured on the
tuning prompts, greedy and at the sampling experiment's temperature; ``tuning.tuned`` picks each family's fastest
candidate from ``tuning.json`` and every other experiment uses it. Design and diagnosis use the dev prompts (the pair
report, the tree drawings); the test prompts appear only in measured JSON.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ... import methods as registry
from ...core.sampling import Sampling
from ..measure.cell import Cell
from ..setup import variants as v
from ..setup.profiles import Profile
from .catalog import Experiment
from .tuning import cost_aware, tuned

GREEDY = Sampling()


def main_methods() -> tuple[str, ...]:
    """The methods of the main and memory tables: the paper's, the other seed systems, and any extension with a
    default setting (the cost-aware extension is built from the measured costs instead)."""
    ext = tuple(n for n in registry.names("extension") if registry.REGISTRY[n].study.paper is not None)
    return registry.names("paper") + registry.names("seed") + ext


def tuned_cell(p: Profile, ws: str, method: str, *, T: int | None = None, L: int | None = None,
               tags: dict | None = None, dtype: str | None = None, root: Path | None = None,
               sampling: Sampling = GREEDY, split: str = "test") -> Cell:
    """``method``'s cell on ``ws``: its tuned setting (the paper's where the profile does not tune it), the
    protocol's lengths and precision unless given."""
    return Cell(dataset=ws, method=method, config=tuned(p, method, ws, root, sampling), T=T or p.protocol.T,
                L_max=p.L_max(ws) if L is None else L, dtype=dtype or p.models.dtype, tags=dict(tags or {}),
                sampling=sampling, split=split)


def paper_four(p: Profile, ws: str, *, T: int, L: int, tags: dict, root: Path | None) -> list[Cell]:
    """The paper's Table 1 methods (``methods.names("paper")``)."""
    return [tuned_cell(p, ws, m, T=T, L=L, tags=tags, root=root) for m in registry.names("paper")]


def paper_settings(p: Profile, ws: str, dtype: str, tags: dict, sampling: Sampling = GREEDY) -> list[Cell]:
    """DynaTree with the paper's own settings, where the profile tunes (else its main cell has them)."""
    if p.tuning.candidates is None:
        return []
    return [Cell(dataset=ws, method=registry.DYNATREE, variant=v.PAPER_SETTINGS, config=p.method(registry.DYNATREE, ws),
                 T=p.protocol.T, L_max=p.L_max(ws), dtype=dtype, tags={**tags, "paper_settings": True},
                 sampling=sampling)]


def extension_cells(p: Profile, ws: str, *, dtype: str, tags: dict, root, sampling: Sampling = GREEDY,
                    variants: bool = True) -> list[Cell]:
    """The cost-aware extension (built from the measured costs), and where the draft has a lookup, the same
    without its lookup skip (what the skipped forwards add) and skipping without the record of its copies."""
    if not p.extras.cost_aware:
        return []
    ext = cost_aware(p, ws, dtype, root, sampling)
    tags = {**tags, "extension": True}
    at = dict(dataset=ws, method=registry.DYNATREE_COST, T=p.protocol.T, L_max=p.L_max(ws), dtype=dtype,
              sampling=sampling)
    cells = [Cell(config=ext, tags=tags, **at)]
    if variants and p.models.draft_lookup:
        cells.append(Cell(variant=v.EVERY_LEVEL_DRAFTED, config=dataclasses.replace(ext, lookup_skip=1.0),
                          tags={**tags, "lookup_skip": False}, **at))
        cells.append(Cell(variant=v.NO_COPY_RECORD, config=dataclasses.replace(ext, skip_window=0),
                          tags={**tags, "skip_window": 0}, **at))
    return cells


def replicate_tag(r: int) -> dict:
    """A cell's tag for replicate ``r``: none for replicate 0, which reads as 0, so that a profile measuring one
    replicate keeps the keys it had before it measured more."""
    return {"replicate": r} if r else {}


def network_alone(cells: list[Cell]) -> list[Cell]:
    """The same cells drafting with the network alone, for the methods that declare ``controls`` (their main rows
    only)."""
    return [dataclasses.replace(c, variant=v.NETWORK_ALONE, lookup=False, tags={**c.tags, "control": True})
            for c in cells if registry.REGISTRY[c.method].study.controls and c.variant == v.MAIN]



class SweepExperiment(Experiment):
    """An experiment on the sweeps' workload (``Sweeps``): the ablation, the length sweeps and the grids, each
    cell on ``sweeps.n_prompts`` prompts."""

    tuning = "tuning"

    def prompts(self, p: Profile, cell: Cell) -> int:
        return p.sweeps.n_prompts
