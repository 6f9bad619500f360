"""Notebook 16's experiment (issue 94): the controller (``extensions.control``) on the tree methods that draft, each
beside its tuned uncontrolled setting and AR, on the draft model and on the profile's feature head, greedy and at
the first sampling temperature, on continuations and instructions, every replicate in a process of its own.

Settings: each method's tuned one (as tuned with the profile's own draft; an instruction workload without a tuning of
its own takes Spec-Bench's); the controller is priced by the profile's measured costs for the draft that drafts
(``tuning.control_config``). A controlled cell's prompts keep the budgets it chose and the tokens it accepted, per
iteration, for the figure of a generation. Its own settings (``ControlSettings``, a profile's
``settings=experiment_settings(control=...)`` or ``--set control.n_prompts=...``): how many prompts.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ... import methods as registry
from ...core.sampling import Sampling
from ..measure.cell import Cell
from ..setup import variants as v
from ..setup.profiles import Profile
from ..setup.weights import head_kind
from ..setup.workloads import HUMANEVAL, PG19, SPEC_BENCH, WIKITEXT2, workload
from .catalog import CountsOwnPrompts, PromptSettings, experiment, get
from .tuning import control_config, tuned, tuned_families

CONTROL = "control"  # the experiment's name (its JSON file)
CONTROL_WORKLOADS = (WIKITEXT2, PG19, SPEC_BENCH, HUMANEVAL)
CONTROLLED_METHODS = (registry.LINEAR, registry.FIXED_TREE, registry.DYNATREE)


def setting_workload(p: Profile, ws: str) -> str:
    """Where ``ws``'s tuned settings come from: itself where the profile tunes on it (its workloads), else
    Spec-Bench's (an instruction workload) or WikiText-2's (a continuation)."""
    if ws in p.workloads:
        return ws
    return WIKITEXT2 if workload(ws).continuation else SPEC_BENCH


@dataclass(frozen=True)
class ControlSettings(PromptSettings):
    """``n_prompts`` sealed test prompts per workload without categories (0: no controller experiment),
    ``n_questions`` per Spec-Bench category."""

    part: ClassVar[str] = CONTROL


def control_cells(p: Profile, root=None) -> list[Cell]:
    """AR and every ``CONTROLLED_METHODS`` method, uncontrolled (its tuned setting) and controlled, on the draft
    model and on the feature head (``extras.head``, where the profile has one), per replicate, workload and
    sampling law; none where ``control.n_prompts`` is 0."""
    if not get(CONTROL).settings_of(p).n_prompts:
        return []
    drafts = [None] + ([p.extras.head] if p.extras.head else [])
    cells = []
    for r in range(p.protocol.replicates):
        for ws in CONTROL_WORKLOADS:
            for s in (Sampling(), *map(Sampling, p.protocol.temperatures[:1])):
                tags = {"role": CONTROL, "replicate": r, "temperature": s.temperature}
                at = dict(dataset=ws, T=p.protocol.T, L_max=p.L_max(ws), dtype=p.models.dtype, sampling=s)
                cells.append(Cell(method=registry.AR, config=None, tags=dict(tags), **at))
                for draft in drafts:
                    cells += method_cells(p, s, draft=draft, tags=tags, at=at, root=root)
    return cells


def method_cells(p: Profile, s: Sampling, *, draft: str | None, tags: dict, at: dict, root) -> list[Cell]:
    """Each controlled method's tuned setting, alone and under the controller, drafting with ``draft`` (None: the
    profile's draft model), on the workload and lengths of ``at``."""
    own = {"heads": head_kind(draft)} if draft else {}
    control = control_config(p, p.models.dtype, head=draft is not None, root=root)
    tuned_on = setting_workload(p, at["dataset"])
    out = []
    for m in CONTROLLED_METHODS:
        cfg = tuned(p, m, tuned_on, root, s) if m in tuned_families() else p.method(m, tuned_on)
        base = Cell(method=m, variant=v.OWN_HEADS if draft else v.MAIN, config=cfg, draft=draft,
                    tags={**tags, **own, "setting_from": tuned_on}, **at)
        out += [base, dataclasses.replace(base, variant=v.CONTROLLED, control=control,
                                          tags={**base.tags, "record_decisions": True})]
    return out


@experiment
class Control(CountsOwnPrompts):
    name = CONTROL
    notebook = "16_control"
    in_process = True
    tuning = "tuning"
    settings = ControlSettings

    def cells(self, p: Profile, root=None) -> list[Cell]:
        return control_cells(p, root)
