"""Notebook 15's experiment (issue 77): the budget frontier, each tree and chain method's own numbers apart from the
machine's. Every method that declares a budget knob (``Study.budget``) drafts with the profile's feature head at
``BUDGETS`` verified draft nodes, its knob turned from its published setting, on ``FRONTIER_WORKLOADS``, greedy and
at T = 1; the records give τ (tokens per verification), δ (draft forwards per verification) and the nodes verified.

Greedy these are counts of AR's own tokens, so they hold on every machine whose engine computes the same bits (a
near-tie may fall the other way on another kernel path: the records name theirs). Wall time is logged, and compares
no method here: the cost model (``reporting.frontier_tables``) prices these counts on each machine's curves, and
fits what its curves leave out of an iteration to these records' times.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ... import methods as registry
from ...core.sampling import Sampling
from ..setup import variants as v
from ..measure.cell import Cell
from ..setup.profiles import Profile
from .talon import MEDUSA_TREE, head_profile
from ..setup.weights import head_kind
from ..setup.workloads import HUMANEVAL, SPEC_BENCH, TALON_TEMPERATURES, WIKITEXT2
from .catalog import CountsOwnPrompts, PromptSettings, experiment, get

FRONTIER = "frontier"
BUDGETS = (4, 8, 16, 32, 60)  # verified draft nodes; 60 is TALON's published N (EAGLE-3's 60 tokens are 59 nodes)
FRONTIER_WORKLOADS = (SPEC_BENCH, HUMANEVAL, WIKITEXT2)  # two instruction sets and a continuation


@dataclass(frozen=True)
class FrontierSettings(PromptSettings):
    """``n_prompts`` test prompts per workload without categories (0: no frontier) and ``n_questions`` per Spec-Bench
    category, ``T`` new tokens at most; Medusa's and Hydra's heads beside the head (``heads``); DynaTree on a draft
    model as the reference line (``draft``, scoring its ``draft_vocab`` most frequent tokens where set)."""

    T: int = 64
    heads: tuple = ()
    draft: str = ""
    draft_vocab: int | None = None
    part: ClassVar[str] = FRONTIER
    positive: ClassVar[tuple] = ("T", "draft_vocab")


def frontier_settings(p: Profile) -> FrontierSettings:
    return get(FRONTIER).settings_of(p)


def frontier_methods() -> tuple[str, ...]:
    """The methods of our loop that declare a budget knob (``Study.budget``; the extension declares none: its cut
    prices each tree on the machine's measured curves, so its counts are the machine's, not the method's alone)."""
    return tuple(n for n, m in registry.REGISTRY.items() if m.study.budget is not None and m.impl == "ours")


def frontier_profile(p: Profile) -> Profile:
    """``p`` drafting with its head (``head_profile``) on the frontier's workloads, decoding ``frontier.T``
    tokens, with no warm-up generation (no method's time is compared with another's here)."""
    protocol = dataclasses.replace(p.protocol, workloads=FRONTIER_WORKLOADS, T=frontier_settings(p).T, warmup=0)
    return dataclasses.replace(head_profile(p), protocol=protocol)


def frontier_cells(p: Profile, root=None) -> list[Cell]:
    """AR and every ``frontier_methods`` method at each of ``BUDGETS`` on each ``FRONTIER_WORKLOADS`` workload, greedy
    and at T = 1, the head drafting alone (as in TALON), with Medusa's and Hydra's heads (``frontier.heads``)
    drafting ``MEDUSA_TREE`` at the same budgets, and DynaTree on a draft model (``reference_cells``);
    ``frontier.n_prompts`` test prompts per workload without categories, ``frontier.n_questions`` per
    Spec-Bench category; none where the profile has no head or sets no prompts."""
    if not p.extras.head or not frontier_settings(p).n_prompts:
        return []
    eagle = registry.REGISTRY[registry.EAGLE3_TREE].study.budget
    cells = []
    for ws in FRONTIER_WORKLOADS:
        for s in map(Sampling, TALON_TEMPERATURES):
            tags = {"role": FRONTIER, "temperature": s.temperature}
            at = dict(dataset=ws, T=frontier_settings(p).T, L_max=p.L_max(ws), dtype=p.models.dtype, sampling=s,
                      lookup=False)
            cells.append(Cell(method=registry.AR, config=None, tags=tags, **at))
            for m in frontier_methods():
                knob = registry.REGISTRY[m].study.budget
                cells += [Cell(method=m, variant=v.BUDGET, config=knob(p.method(m, ws), n), tags=tags | {"budget": n},
                               **at) for n in BUDGETS]
            for ref in frontier_settings(p).heads:
                cells += [Cell(method=registry.EAGLE3_TREE, variant=v.BUDGET, config=eagle(MEDUSA_TREE, n), draft=ref,
                               tags=tags | {"budget": n, "heads": head_kind(ref)}, **at) for n in BUDGETS]
            cells += reference_cells(p, ws, tags, at)
    return cells


def reference_cells(p: Profile, ws: str, tags: dict, at: dict) -> list[Cell]:
    """DynaTree drafting with the profile's draft model (``frontier.draft``, its ``frontier.draft_vocab``
    most frequent tokens, without its lookup) at each of ``BUDGETS``: the reference line of the method as its paper
    runs it, a draft model beside the target; none where the profile names no such draft."""
    ref = frontier_settings(p).draft
    if not ref:
        return []
    knob, vocab = registry.REGISTRY[registry.DYNATREE].study.budget, frontier_settings(p).draft_vocab
    model = {"draft_model": ref} | ({"draft_vocab": vocab} if vocab else {})
    return [Cell(method=registry.DYNATREE, variant=v.BUDGET, config=knob(p.method(registry.DYNATREE, ws), n),
                 draft=ref, tags=tags | {"budget": n} | model, **at) for n in BUDGETS]


@experiment
class Frontier(CountsOwnPrompts):
    """Measured by ``bench --experiment frontier`` (or notebook 15's rerun); notebook 15 renders it."""
    name = FRONTIER
    settings = FrontierSettings

    def cells(self, p: Profile, root=None) -> list[Cell]:
        return frontier_cells(p, root)

    def profile(self, p: Profile) -> Profile:
        return frontier_profile(p) if p.extras.head else p
