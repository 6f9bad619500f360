"""Notebook 12's rows of llama.cpp (``peers.llamacpp``) beside ours, and notebook 14's record of llama.cpp's EAGLE-3
mode on our head (``peers.llamacpp_eagle3``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ... import methods as registry
from ..measure.cell import Cell
from ..peers import llamacpp
from ..peers.llamacpp_eagle3 import run_llamacpp_eagle3
from ..setup.profiles import Profile
from .catalog import CountsOwnPrompts, Document, PromptSettings, experiment
from .cells import extension_cells, replicate_tag, tuned_cell


@dataclass(frozen=True)
class PeersSettings(PromptSettings):
    """``n_prompts`` of the main table's test prompts per continuation workload (0: no peers experiment) and
    ``n_questions`` per Spec-Bench category."""

    part: ClassVar[str] = "peers"


@experiment
class Peers(CountsOwnPrompts):
    name = "peers"
    notebook = "12_peers"
    in_process = True
    tuning = "tuning"
    settings = PeersSettings

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        """llama.cpp's modes (``llamacpp.PEERS``) beside our AR, DynaTree and the extension (without its variants),
        greedy on the main table's first prompts in the timed precision, each replicate in a fresh process; none
        where the profile runs no peers. Whether llama.cpp is built decides what ``run`` measures, not the cells."""
        if not self.settings_of(p).n_prompts:
            return []
        cells = []
        for r in range(p.protocol.replicates):
            tags = {"role": "peer", **replicate_tag(r)}
            for ws in p.workloads:
                cells += [tuned_cell(p, ws, m, tags=tags, root=root) for m in (registry.AR, registry.DYNATREE)]
                cells += extension_cells(p, ws, dtype=p.models.dtype, tags=tags, root=root, variants=False)
                cells += [Cell(dataset=ws, method=llamacpp.METHOD, variant=mode.variant, config=mode.config,
                               T=p.protocol.T, L_max=p.L_max(ws), dtype=p.models.dtype,
                               tags={**tags, "own_ar": mode is llamacpp.PEERS[0]})
                          for mode in llamacpp.PEERS]
        return cells


@experiment
class LlamaCppEagle3(Document):
    """llama.cpp's EAGLE-3 mode with our head, beside our own chain on it."""
    name = "llamacpp_eagle3"
    notebook = "14_talon"
    make = run_llamacpp_eagle3
