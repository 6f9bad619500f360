"""Notebook 14's experiment (issue 57): TALON's Tables 1 and 3 on the profile's feature head, with the rows of Table 1
that are heads of their own kind (Medusa, Hydra) and llama.cpp's EAGLE-3 mode as a peer, as lists of cells that
``experiments.run`` measures (``EXPERIMENTS[TALON]``)."""
from __future__ import annotations

import dataclasses

from .. import methods as registry
from ..core.policies import FixedTreeConfig
from ..core.sampling import Sampling
from ..core.validate import is_int
from ..extensions.cost_aware import CostAwareConfig
from . import peers, variants as v
from .measure import Cell
from .profiles import Profile
from .tuning import head_cost_curve
from .weights import head_kind
from .workloads import TALON_TEMPERATURES, TALON_WORKLOADS, workload

TALON = "talon"  # the experiment's name (its JSON file, its cells' role)
# Medusa's tree over a Medusa or Hydra head's levels: each node's top-10 children, the 63 of highest draft path
# probability kept (Medusa's default tree verifies 63 nodes over 4 heads' top-10; Hydra drafts Medusa's trees). Where
# it departs: Medusa's tree is a fixed list of top-k paths calibrated on its heads' accuracies (mc_sim_7b_63, for
# Vicuna-7B); none exists for these heads, so the same budget is cut each step by the heads' own path probabilities
MEDUSA_TREE = FixedTreeConfig(D=4, B=10, tau=0.0, n_max=63)


def head_profile(p: Profile) -> Profile:
    """``p`` drafting with its feature head (``extras.head``: the head's own vocabulary, the lookup beside it)."""
    return dataclasses.replace(p, models=dataclasses.replace(p.models, draft=p.extras.head, draft_vocab=None))


def talon_T(p: Profile, ws: str) -> int:
    """The talon experiment's new-token limit on workload ``ws``: TALON's (``Workload.talon_T``), capped at
    ``extras.talon_T_cap`` where that is above 0 (cpu: 256, so that a run on 2 cores takes minutes, not hours)."""
    cap, limit = p.extras.talon_T_cap, workload(ws).talon_T
    if not is_int(cap) or cap < 0:
        raise ValueError(f"extras.talon_T_cap must be an integer >= 0 (0: TALON's own limit), got {cap!r}")
    if limit is None:
        raise ValueError(f"workload {ws!r} has no TALON generation limit (Workload.talon_T); TALON's are "
                         f"{TALON_WORKLOADS}")
    return min(limit, cap) if cap else limit


def talon_profile(p: Profile) -> Profile:
    """``p`` drafting with its feature head (``head_profile``), its protocol set to TALON's workloads and its
    longest limit, so that its static caches hold the longest generation (cells and record keys read neither)."""
    T = max(p.protocol.T, *(talon_T(p, ws) for ws in TALON_WORKLOADS))
    protocol = dataclasses.replace(p.protocol, workloads=TALON_WORKLOADS, T=T)
    return dataclasses.replace(head_profile(p), protocol=protocol)


def talon_methods() -> tuple[str, ...]:
    """TALON's Table 1 rows that are drafting policies over one head: SD (a chain), EAGLE-3's tree, OPT-Tree and
    TALON, beside AR and DynaTree (Medusa and Hydra are heads of their own kind: ``own_head_cells``)."""
    return (registry.AR, registry.LINEAR, registry.EAGLE3_TREE, registry.OPT_TREE, registry.TALON, registry.DYNATREE)


def talon_cells(p: Profile, root=None) -> list[Cell]:
    """Notebook 14 (issue 57): TALON's Tables 1 and 3 on the profile's feature head (``extras.head``; none without
    one). Every ``talon_methods`` method on each of TALON's workloads (``TALON_WORKLOADS``), greedy and at T = 1,
    each replicate in a fresh process, methods interleaved prompt by prompt; ``extras.talon_n_prompts`` test prompts
    per workload without categories and ``talon_n_questions`` per Spec-Bench category, each to EOS or ``talon_T``.

    Temperatures: exactly 0 and 1 (``TALON_TEMPERATURES``), not the profile's sampling temperatures: TALON's Tables
    1 and 3 are measured at exactly these (no top-k or top-p), and a profile adding a temperature to notebook 10
    should not change this experiment. Settings: every method's published one (``Profile.method``: EAGLE-3's and
    OPT-Tree's authors' defaults, TALON's mu 0.03, N 60, K 10, the profile's paper settings for SD and DynaTree),
    never the profile's tuned ones, which were tuned with its own draft; tuning each method on the head, on the
    tuning split, is the next step. The head drafts alone (``lookup=False``), as in TALON, where every method
    drafts with the same EAGLE-3 weights and nothing else (notebook 13 shows the head with our context lookup).
    Beside them, interleaved with them: ``extension_cells`` (ours on the head), ``own_head_cells`` (Medusa's and
    Hydra's rows) and ``peer_cells`` (llama.cpp's EAGLE-3 mode)."""
    if not p.extras.head:
        return []
    cells = []
    curve = head_cost_curve(p, p.models.dtype, root) if p.extras.talon_extension else None
    for r in range(p.protocol.replicates):
        for ws in TALON_WORKLOADS:
            for s in map(Sampling, TALON_TEMPERATURES):
                tags = {"role": TALON, "replicate": r, "temperature": s.temperature}
                cells += [Cell(dataset=ws, method=m, config=p.method(m, ws), T=talon_T(p, ws), L_max=p.L_max(ws),
                               dtype=p.models.dtype, tags=dict(tags), sampling=s, lookup=False)
                          for m in talon_methods()]
                cells += extension_cells(p, ws, s, tags, curve) + own_head_cells(p, ws, s, tags)
                cells += peer_cells(p, ws, s, tags)
    return cells


def extension_cells(p: Profile, ws: str, s: Sampling, tags: dict, curve: tuple | None) -> list[Cell]:
    """Our extension on the head alone, where ``extras.talon_extension``: DynaTree's paper settings for ``ws`` cut
    by the target's measured verification curve, its drafting levels priced by the head's measured step (``curve``:
    ``tuning.head_cost_curve``; None: no extension)."""
    if curve is None:
        return []
    cfg = CostAwareConfig(p.method(registry.DYNATREE, ws), *curve)
    return [Cell(dataset=ws, method=registry.DYNATREE_COST, config=cfg, T=talon_T(p, ws), L_max=p.L_max(ws),
                 dtype=p.models.dtype, tags=tags | {"extension": True}, sampling=s, lookup=False)]


def own_head_cells(p: Profile, ws: str, s: Sampling, tags: dict) -> list[Cell]:
    """TALON's Medusa and Hydra rows: each head of ``extras.talon_heads`` (``medusa:<folder>``, ``hydra:<folder>``)
    drafting Medusa's tree (``MEDUSA_TREE``) over its own levels, alone (no lookup)."""
    return [Cell(dataset=ws, method=registry.FIXED_TREE, variant=v.OWN_HEADS, config=MEDUSA_TREE, T=talon_T(p, ws),
                 L_max=p.L_max(ws), dtype=p.models.dtype, tags=tags | {"heads": head_kind(ref)}, sampling=s,
                 lookup=False, draft=ref)
            for ref in p.extras.talon_heads]


def peer_cells(p: Profile, ws: str, s: Sampling, tags: dict) -> list[Cell]:
    """llama.cpp's EAGLE-3 mode with the committed head and llama.cpp's own AR (``peers.EAGLE3_PEERS``), where
    ``extras.talon_peers``; a machine without llama.cpp measures none of them (``Method.unavailable``)."""
    if not p.extras.talon_peers:
        return []
    peers.register()
    return [Cell(dataset=ws, method=peers.METHOD, variant=mode.variant, config=mode.config, T=talon_T(p, ws),
                 L_max=p.L_max(ws), dtype=p.models.dtype, tags=tags | {"own_ar": mode is peers.EAGLE3_PEERS[0]},
                 sampling=s)
            for mode in peers.EAGLE3_PEERS]
