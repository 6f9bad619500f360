"""Notebook 14's experiments (issue 57): TALON's Tables 1 and 3 on the profile's feature head, with the rows of Table 1
that are heads of their own kind (Medusa, Hydra) and llama.cpp's EAGLE-3 mode as a peer (``Talon``), every drafting
row at the setting its own tuning on the heads picked (``TalonTuning``)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from ... import methods as registry
from ...core.policies.eagle_tree import Eagle3TreeConfig
from ...core.sampling import Sampling
from ...extensions.cost_aware import CostAwareConfig
from ..peers import llamacpp as peers
from ..setup import variants as v
from ..measure.cell import Cell
from ..setup.profiles import Profile
from .tuning import fastest, head_cost_curve
from ..setup.weights import head_kind
from ..setup.workloads import TALON_TEMPERATURES, TALON_WORKLOADS, workload
from .catalog import CountsOwnPrompts, PicksSettings, PromptSettings, experiment, get

TALON = "talon"  # the experiment's name (its JSON file, its cells' role)
TALON_TUNING = "talon_tuning"  # its tuning: every row's candidates on the heads, on the tuning prompts
# Medusa's tree over a Medusa or Hydra head's levels: EAGLE-2's expansion (each level's 10 most probable nodes grow
# their top-10 children) and rerank to the 63 drafted nodes of highest path probability (Medusa's default tree
# verifies 63 nodes over 4 heads' top-10; Hydra drafts Medusa's trees). Where it departs: Medusa's tree is a fixed
# list of top-k paths calibrated on its heads' accuracies (mc_sim_7b_63, for Vicuna-7B); none exists for these
# heads, so the same budget goes each step to the nodes the heads themselves rank most probable, at any depth
MEDUSA_TREE = Eagle3TreeConfig(depth=3, top_k=10, total_tokens=64)


@dataclass(frozen=True)
class TalonSettings(PromptSettings):
    """The talon experiment's own settings (and its tuning's): ``n_prompts`` test prompts per question workload
    without categories (HumanEval's, UltraChat's) and ``n_questions`` per Spec-Bench category, each decoded to EOS or
    TALON's limit capped at ``T_cap`` new tokens where above 0 (its tuning at ``tuning_T`` where above 0); Medusa's and
    Hydra's rows (``heads``: draft references ``medusa:<folder>``, ``hydra:<folder>``), llama.cpp's EAGLE-3 mode with
    the head beside llama.cpp's AR (``peers``) and our extension on the head (``extension``)."""

    n_prompts: int = 4
    T_cap: int = 0
    tuning_T: int = 0
    heads: tuple = ()
    peers: bool = False
    extension: bool = False
    part: ClassVar[str] = TALON


def talon_settings(p: Profile) -> TalonSettings:
    return get(TALON).settings_of(p)


def head_profile(p: Profile) -> Profile:
    """``p`` drafting with its feature head (``extras.head``: the head's own vocabulary, the lookup beside it)."""
    return dataclasses.replace(p, models=dataclasses.replace(p.models, draft=p.extras.head, draft_vocab=None))


def talon_T(p: Profile, ws: str, tuning: bool = False) -> int:
    """The talon experiment's new-token limit on workload ``ws``: TALON's (``Workload.talon_T``), capped at
    ``talon.T_cap`` where that is above 0 (cpu: 256, so that a run on 2 cores takes minutes, not hours); its
    tuning's (``tuning``), capped again at ``talon.tuning_T`` where above 0 (cpu: 128, so that 41 settings on 12
    prompts take under an hour)."""
    limit = workload(ws).talon_T
    if limit is None:
        raise ValueError(f"workload {ws!r} has no TALON generation limit (Workload.talon_T); TALON's are "
                         f"{TALON_WORKLOADS}")
    settings = talon_settings(p)
    for cap in (settings.T_cap, settings.tuning_T) if tuning else (settings.T_cap,):
        limit = min(limit, cap) if cap else limit
    return limit


def talon_profile(p: Profile) -> Profile:
    """``p`` drafting with its feature head (``head_profile``), its protocol set to TALON's workloads and its
    longest limit, so that its static caches hold the longest generation (cells and record keys read neither)."""
    T = max(p.protocol.T, *(talon_T(p, ws) for ws in TALON_WORKLOADS))
    protocol = dataclasses.replace(p.protocol, workloads=TALON_WORKLOADS, T=T)
    return dataclasses.replace(head_profile(p), protocol=protocol)


def talon_methods() -> tuple[str, ...]:
    """TALON's Table 1 rows that are drafting policies over one head: SD (a chain), EAGLE-3's tree, OPT-Tree and
    TALON, beside AR and DynaTree (Medusa and Hydra are heads of their own kind: ``talon_rows``)."""
    return (registry.AR, registry.LINEAR, registry.EAGLE3_TREE, registry.OPT_TREE, registry.TALON, registry.DYNATREE)


def talon_cells(p: Profile, root=None) -> list[Cell]:
    """Notebook 14 (issue 57): TALON's Tables 1 and 3 on the profile's feature head (``extras.head``; none without
    one). Every ``talon_methods`` method on each of TALON's workloads (``TALON_WORKLOADS``), greedy and at T = 1,
    each replicate in a fresh process, methods interleaved prompt by prompt; ``talon.n_prompts`` test prompts
    per workload without categories and ``talon.n_questions`` per Spec-Bench category, each to EOS or ``talon_T``.

    Temperatures: exactly 0 and 1 (``TALON_TEMPERATURES``), not the profile's sampling temperatures: TALON's Tables
    1 and 3 are measured at exactly these (no top-k or top-p), and a profile adding a temperature to notebook 10
    should not change this experiment. Rows (``talon_rows``): these methods, our extension on the head, Medusa's and
    Hydra's heads; each at its fastest candidate in ``talon_tuning_cells``' records where the profile tunes, else at
    its published setting (``row_setting``). The head drafts alone (``lookup=False``), as in TALON,
    where every method drafts with the same EAGLE-3 weights and nothing else (notebook 13 shows the head with our
    context lookup). Beside them, interleaved with them: ``peer_cells`` (llama.cpp's EAGLE-3 mode)."""
    if not p.extras.head:
        return []
    cells = []
    curve = head_cost_curve(p, p.models.dtype, root) if talon_settings(p).extension else None
    # each row's setting once per workload (it reads the tuning's JSON), shared by every replicate and temperature
    settings = {ws: [(row, row_setting(p, row, ws, root)) for row in talon_rows(p, ws, curve)]
                for ws in TALON_WORKLOADS}
    for r in range(p.protocol.replicates):
        for ws in TALON_WORKLOADS:
            for s in map(Sampling, TALON_TEMPERATURES):
                tags = {"role": TALON, "replicate": r, "temperature": s.temperature}
                at = dict(dataset=ws, T=talon_T(p, ws), L_max=p.L_max(ws), dtype=p.models.dtype, sampling=s)
                cells += [Cell(method=row.family, variant=v.OWN_HEADS if row.draft else v.MAIN, lookup=False,
                               config=cfg, tags=tags | row.tags, draft=row.draft, **at)
                          for row, cfg in settings[ws]]
                cells += peer_cells(p, ws, s, tags)
    return cells


class Row(NamedTuple):
    """A drafting row of TALON's tables on one workload: its method ``family``, the head of its own it drafts with
    (``draft``; None: the profile's head), its ``published`` setting, its tuning ``candidates`` (None: not tuned)
    and the ``tags`` that tell it apart."""

    family: str
    draft: str | None
    published: object
    candidates: tuple | None
    tags: dict


def talon_rows(p: Profile, ws: str, curve: tuple | None) -> list[Row]:
    """Every drafting row of TALON's tables on ``ws``: ``talon_methods`` on the head (published: ``Profile.method``,
    EAGLE-3's and OPT-Tree's authors' defaults, TALON's mu 0.03, N 60, K 10, the profile's paper settings for SD and
    DynaTree), our extension on the head where ``talon.extension`` (DynaTree's settings cut by ``curve``: the
    target's verification curve and the head's measured step per level, ``tuning.head_cost_curve``), and Medusa's
    and Hydra's rows (``talon.heads``: ``medusa:<folder>``, ``hydra:<folder>``, ``MEDUSA_TREE`` over their
    own levels). Candidates: the profile's tuning's, the same number each, published first (Medusa's and Hydra's:
    ``MEDUSA_TREE``, then EAGLE-3's tree's smaller ones, their depth capped by the heads' four levels); None where
    it does not tune, and AR's (it has no setting)."""
    cands, dyna = p.tuning.candidates, p.method(registry.DYNATREE, ws)
    rows = [Row(m, None, None if m == registry.AR else p.method(m, ws), cands and cands.get(m), {})
            for m in talon_methods()]
    if curve is not None:
        ext = cands and tuple(CostAwareConfig(base, *curve) for base in cands[registry.DYNATREE])
        rows.append(Row(registry.DYNATREE_COST, None, CostAwareConfig(dyna, *curve), ext, {"extension": True}))
    own = cands and (MEDUSA_TREE,) + tuple(cands[registry.EAGLE3_TREE][1:])
    rows += [Row(registry.EAGLE3_TREE, ref, MEDUSA_TREE, own, {"heads": head_kind(ref)})
             for ref in talon_settings(p).heads]
    return rows


def row_setting(p: Profile, row: Row, ws: str, root=None):
    """The setting ``row`` runs with on ``ws``: its fastest candidate among the ``talon_tuning`` records drafted with
    its head (greedy: they serve T = 1 too), or its published one where it is not tuned."""
    if row.candidates is None:
        return row.published
    return fastest(p, row.family, ws, row.candidates, root, experiment=TALON_TUNING, draft=row.draft or p.extras.head)


def talon_tuning_cells(p: Profile, root=None) -> list[Cell]:
    """Notebook 14's tuning: AR and every ``talon_rows`` row's candidates (the same number each) on the profile's
    tuning prompts of TALON's workloads (``Tuning.n`` per workload without categories, ``n_questions`` per Spec-Bench
    category), greedy, to TALON's limit capped for tuning (``talon_T``), every row drafting as in ``talon_cells``;
    none where the profile has no head or does not tune."""
    if not p.extras.head or p.tuning.candidates is None:
        return []
    curve = head_cost_curve(p, p.models.dtype, root) if talon_settings(p).extension else None
    cells = []
    for ws in TALON_WORKLOADS:
        at = dict(dataset=ws, T=talon_T(p, ws, tuning=True), L_max=p.L_max(ws), dtype=p.models.dtype, split="tuning",
                  lookup=False)
        cells.append(Cell(method=registry.AR, config=None, tags={}, **at))
        for row in talon_rows(p, ws, curve):
            cells += [Cell(method=row.family, variant=v.CANDIDATE, config=cfg, tags={"candidate": i, **row.tags},
                           draft=row.draft, **at)
                      for i, cfg in enumerate(row.candidates or ())]
    return cells


def peer_cells(p: Profile, ws: str, s: Sampling, tags: dict) -> list[Cell]:
    """llama.cpp's EAGLE-3 mode with the committed head and llama.cpp's own AR (``peers.EAGLE3_PEERS``), where
    ``talon.peers``; a machine without llama.cpp measures none of them (``Method.unavailable``)."""
    if not talon_settings(p).peers:
        return []
    return [Cell(dataset=ws, method=peers.METHOD, variant=mode.variant, config=mode.config, T=talon_T(p, ws),
                 L_max=p.L_max(ws), dtype=p.models.dtype, tags=tags | {"own_ar": mode is peers.EAGLE3_PEERS[0]},
                 sampling=s)
            for mode in peers.EAGLE3_PEERS]


@experiment
class Talon(CountsOwnPrompts):
    name = TALON
    notebook = "14_talon"
    in_process = True
    tuning = TALON_TUNING
    settings = TalonSettings

    def cells(self, p: Profile, root=None) -> list[Cell]:
        return talon_cells(p, root)

    def profile(self, p: Profile) -> Profile:
        return talon_profile(p) if p.extras.head else p


@experiment
class TalonTuning(PicksSettings):
    name = TALON_TUNING
    notebook = "14_talon"

    def cells(self, p: Profile, root=None) -> list[Cell]:
        return talon_tuning_cells(p, root)

    def profile(self, p: Profile) -> Profile:
        return talon_profile(p) if p.extras.head else p
