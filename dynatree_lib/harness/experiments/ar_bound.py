"""AR against its bandwidth bound on the main experiment's prompts (issue 91, notebook 00).

AR alone, in the timed precision, on every main workload's sealed test prompts (as many as the main experiment
measures), each replicate in a fresh process. The bandwidth is probed right before and right after each generation
(``measure.cell``), so each generation's time per token meets the bound of its own moment: weight bytes over its
probes, where they agree (``reporting.records.steady``). The main experiment's AR rows carry the same probes; this
experiment measures them apart so that an engine change is checked against its bound without rerunning every method.
"""
from __future__ import annotations

from pathlib import Path

from ... import methods as registry
from ..measure.cell import Cell
from ..setup.profiles import Profile
from .catalog import Experiment, experiment

AR_BOUND = "ar_bound"  # the experiment's name (its JSON file)


@experiment
class ArBound(Experiment):
    name = AR_BOUND
    notebook = "00_setup"
    in_process = True

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        """AR on each main workload, per replicate; none off the CPU (the probe reads host memory)."""
        if p.models.device != "cpu":
            return []
        return [Cell(dataset=ws, method=registry.AR, config=None, T=p.protocol.T, L_max=p.L_max(ws),
                     dtype=p.models.dtype, tags={"role": AR_BOUND, "replicate": r})
                for r in range(p.protocol.replicates) for ws in p.workloads]
