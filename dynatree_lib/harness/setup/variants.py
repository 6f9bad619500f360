"""Every variant a cell can run a method in, declared once with what tables call it.

A cell is a method in a variant (``measure.Cell.variant``): its main setting, the paper's settings, the draft
network alone, an ablation step, a sweep point, a tuning candidate, an extension's variant, a peer engine's mode. A
record's key holds the method and the variant, never a label: the label is computed here, from the method's label
(``methods.Display.label``), the cell's configuration as logged (``store.config_dict``) and its tags, each time a
table is rendered, so renaming a label changes what tables show and orphans no record.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ... import methods as registry
from ...core.drafts.heads.kinds import HEAD_KINDS


@dataclass(frozen=True, kw_only=True)
class Variant:
    """``label(method label, config, tags)``: what tables call a cell of this variant (``config``: as logged,
    ``tags``: the cell's); ``rank``: how far after its method's main row its rows come in tables."""

    name: str
    label: Callable[[str, dict, dict], str]
    rank: float = 0.0


VARIANTS: dict[str, Variant] = {}


def register(v: Variant) -> Variant:
    if v.name in VARIANTS:
        raise ValueError(f"variant {v.name!r} is already registered")
    VARIANTS[v.name] = v
    return v


def fixed(text: str) -> Callable[[str, dict, dict], str]:
    """A variant whose cells all carry one label."""
    return lambda method, config, tags: text


SHORT_SKIPS = ("type", "dynamic_breadth", "dynamic_depth", "history", "W", "a_star", "eta_D", "eta_h")


def short(config: dict) -> str:
    """A tuning candidate's setting in a few words: its fields, less the rules every candidate shares (of the
    DynaTree setting under a cost-aware one)."""
    config = config.get("base", config)
    return " ".join(f"{k}={v}" for k, v in config.items() if k not in SHORT_SKIPS)


def own(method: str, tags: dict) -> str:
    """A method's label, naming the draft of its own it drafts with where it has one: a head (``tags["heads"]``, its
    kind) or a draft model (``tags["draft_model"]``, its reference)."""
    if "heads" in tags:
        return f"{HEAD_KINDS[tags['heads']].label} ({method} over its heads)"
    return f"{method} on the draft model {tags['draft_model']}" if "draft_model" in tags else method


MAIN, PAPER_SETTINGS, NETWORK_ALONE, CANDIDATE = "main", "paper_settings", "network_alone", "candidate"
EVERY_LEVEL_DRAFTED, NO_COPY_RECORD, OWN_HEADS = "every_level_drafted", "no_copy_record", "own_heads"
BUDGET, CONTROLLED = "budget", "controlled"
ABLATION_FIXED, ABLATION_MATCHED, ABLATION_DYNAMIC, ABLATION_HISTORY = (
    "ablation_fixed", "ablation_matched", "ablation_dynamic", "ablation_history")
FIXED_GRID, SWEEP_THRESHOLDS, SWEEP_BREADTH, SWEEP_DEPTH = "fixed_grid", "sweep_thresholds", "sweep_breadth", "sweep_depth"

for _v in (
    Variant(name=MAIN, label=lambda m, c, t: m),
    Variant(name=PAPER_SETTINGS, label=lambda m, c, t: f"{m} (paper settings)", rank=0.5),
    Variant(name=NETWORK_ALONE, label=lambda m, c, t: f"{m} · network alone", rank=0.25),  # the draft, no lookup
    Variant(name=CANDIDATE, label=lambda m, c, t: f"{own(m, t)} #{t['candidate']}: {short(c)}"),
    # a tree over a Medusa or Hydra head of the cell's own (``Cell.draft``; its kind in the tags), TALON's rows
    Variant(name=OWN_HEADS, label=lambda m, c, t: own(m, t), rank=0.75),
    # the budget frontier: a method at one budget of verified draft nodes (its own knob, ``Study.budget``)
    Variant(name=BUDGET, label=lambda m, c, t: f"{own(m, t)} @ {t['budget']} nodes"),
    # the controller (extensions.control) sizing each tree of the method's tuned setting, down to a plain AR step
    Variant(name=CONTROLLED, label=lambda m, c, t: f"{own(m, t)} · controlled", rank=0.1),
    # the cost-aware extension without its lookup skip, and skipping on the copy's weight alone (no record of copies)
    Variant(name=EVERY_LEVEL_DRAFTED, label=fixed("DynaTree + cost budget, every level drafted (ext.)")),
    Variant(name=NO_COPY_RECORD, label=fixed("DynaTree + cost budget, no copy record (ext.)")),
    # the paper's Table 4, step by step
    Variant(name=ABLATION_FIXED, label=lambda m, c, t: f"{m} (D={c['D']}, B={c['B']})"),
    Variant(name=ABLATION_MATCHED, label=lambda m, c, t: f"{m} (D={c['D']}, B={c['B']}: tuned DynaTree's D0, B_mid)"),
    Variant(name=ABLATION_DYNAMIC, label=fixed("+ Dynamic Breadth & Depth")),
    Variant(name=ABLATION_HISTORY, label=fixed("+ History Adaptation")),
    # notebook 06's sweeps: each point named by its coordinates
    Variant(name=FIXED_GRID, label=lambda m, c, t: f"fixed D={t['D']} B={t['B']} tau={t['tau']}"),
    Variant(name=SWEEP_THRESHOLDS, label=lambda m, c, t: f"dynatree tau_h={t['tau_h']} tau_l={t['tau_l']}"),
    Variant(name=SWEEP_BREADTH, label=lambda m, c, t: f"dynatree B={tuple(t['B'])}"),
    Variant(name=SWEEP_DEPTH, label=lambda m, c, t: f"dynatree D0={t['D0']} D_max={t['D_max']}"),
):
    register(_v)


def variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; choose one of {tuple(VARIANTS)}")
    return VARIANTS[name]


def label(method: str, name: str, config: dict, tags: dict) -> str:
    """What tables call a cell of ``method`` in variant ``name`` (``config`` as logged, the cell's ``tags``)."""
    m = registry.REGISTRY.get(method)
    return variant(name).label(m.display.label if m else method, config, tags)


def rank(method: str, name: str) -> float:
    """A row's place in tables: the method's registry position, then its variant's rank."""
    order = {m: i for i, m in enumerate(registry.REGISTRY)}
    return order.get(method, 99) + variant(name).rank
