"""Notebook 12's vLLM rows (issue 79): vLLM's CPU build on the same target and our EAGLE-3 head, beside our engine.

- ``vllm_tuning``: on the tuning prompts, our chain on the head (its tuning candidates) and vLLM's EAGLE-3 mode
  with ``num_speculative_tokens`` set to each candidate's K (the same number of candidates), greedy.
- ``vllm``: on the sealed test prompts of Spec-Bench and WikiText-2, each replicate in a fresh process, interleaved
  prompt by prompt: our AR, our chain on the head alone (tuned), vLLM's AR, its EAGLE-3 with the head (tuned K),
  its n-gram prompt lookup and its suffix decoding (at its documentation's settings), greedy at batch 1. vLLM's
  worker is paused (SIGSTOP) while our engine runs, and every row logs what it spent meanwhile.
- ``vllm_throughput`` (``vllm_throughput.py``): vLLM's aggregate tokens/s under load.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ... import methods as registry
from ...core.policies.static import LinearConfig
from ..setup import variants as v
from ..peers import vllm as P
from ..measure.cell import Cell
from ..setup.profiles import Profile
from .talon import head_profile
from .tuning import fastest
from ..setup.workloads import SPEC_BENCH, WIKITEXT2
from .catalog import CountsOwnPrompts, Experiment, PicksSettings, PromptSettings, experiment, get

VLLM, VLLM_TUNING = "vllm", "vllm_tuning"
VLLM_WORKLOADS = (SPEC_BENCH, WIKITEXT2)


@dataclass(frozen=True)
class VllmSettings(PromptSettings):
    """``n_prompts`` test prompts per continuation workload (0: no vLLM rows) and ``n_questions`` per Spec-Bench
    category; the tuning decodes ``tuning_T`` tokens."""

    tuning_T: int = 128
    part: ClassVar[str] = VLLM
    positive: ClassVar[tuple] = ("tuning_T",)


def vllm_settings(p: Profile) -> VllmSettings:
    return get(VLLM).settings_of(p)


def runs_vllm(p: Profile) -> bool:
    return bool(p.extras.head and vllm_settings(p).n_prompts)


def chain_candidates(p: Profile) -> tuple:
    return tuple(p.tuning.candidates[registry.LINEAR]) if p.tuning.candidates else ()


def eagle3_candidates(p: Profile) -> tuple:
    """vLLM's EAGLE-3 mode at each of our chain's candidate K."""
    return tuple(P.VllmConfig(P.EAGLE3_MODE, k=c.K) for c in chain_candidates(p))


def vllm_tuning_cells(p: Profile, root=None) -> list[Cell]:
    """AR, our chain's candidates on the head alone and vLLM's EAGLE-3 candidates on the tuning prompts of
    ``VLLM_WORKLOADS`` (``Tuning.n`` per continuation set, ``n_questions`` per Spec-Bench category), greedy, to
    ``vllm.tuning_T``; none where the profile does not tune or runs no vLLM rows."""
    if not runs_vllm(p) or p.tuning.candidates is None:
        return []
    cells = []
    for ws in VLLM_WORKLOADS:
        at = dict(dataset=ws, T=vllm_settings(p).tuning_T, L_max=p.L_max(ws), dtype=p.models.dtype, split="tuning",
                  lookup=False)
        cells.append(Cell(method=registry.AR, config=None, tags={}, **at))
        cells += [Cell(method=registry.LINEAR, variant=v.CANDIDATE, config=cfg, tags={"candidate": i}, **at)
                  for i, cfg in enumerate(chain_candidates(p))]
        cells += [Cell(method=P.METHOD, variant=P.EAGLE3_VARIANT, config=cfg, tags={"candidate": i}, **at)
                  for i, cfg in enumerate(eagle3_candidates(p))]
    return cells


def settings(p: Profile, ws: str, root=None) -> tuple:
    """Our chain's and vLLM's EAGLE-3 settings on ``ws``: the fastest of each one's ``vllm_tuning`` records, else
    (a profile that does not tune) a chain of 3, vLLM's documented example."""
    if p.tuning.candidates is None:
        return LinearConfig(3), P.VllmConfig(P.EAGLE3_MODE, k=3)
    head = p.extras.head
    return (fastest(p, registry.LINEAR, ws, chain_candidates(p), root, experiment=VLLM_TUNING, draft=head),
            fastest(p, P.METHOD, ws, eagle3_candidates(p), root, experiment=VLLM_TUNING, draft=head))


def vllm_cells(p: Profile, root=None) -> list[Cell]:
    """The ``vllm`` experiment's cells (module docstring): ``vllm.n_prompts`` test prompts per continuation
    set and ``vllm.n_questions`` per Spec-Bench category, to ``protocol.T`` (Spec-Bench: or EOS), every replicate."""
    if not runs_vllm(p):
        return []
    tuned = {ws: settings(p, ws, root) for ws in VLLM_WORKLOADS}
    cells = []
    for r in range(p.protocol.replicates):
        tags = {"role": VLLM, "replicate": r}
        for ws in VLLM_WORKLOADS:
            chain, eagle3 = tuned[ws]
            at = dict(dataset=ws, T=p.protocol.T, L_max=p.L_max(ws), dtype=p.models.dtype)
            cells += [Cell(method=registry.AR, config=None, tags=tags, **at),
                      Cell(method=registry.LINEAR, config=chain, lookup=False, tags=tags, **at)]
            peers = [P.AR_PEER, P.Peer(variant=P.EAGLE3_VARIANT, label=P.EAGLE3_LABEL, config=eagle3), *P.LOOKUP_PEERS]
            cells += [Cell(method=P.METHOD, variant=peer.variant, config=peer.config,
                           tags=tags | {"own_ar": peer is P.AR_PEER}, **at) for peer in peers]
    return cells


def vllm_profile(p: Profile) -> Profile:
    """The profile the vLLM experiments measure with: drafting with the feature head."""
    return head_profile(p) if p.extras.head else p


class OnTheHead(Experiment):
    """vLLM's experiments draft with the feature head (``vllm_profile``)."""

    def profile(self, p: Profile) -> Profile:
        return vllm_profile(p)


@experiment
class Vllm(OnTheHead, CountsOwnPrompts):
    name = VLLM
    notebook = "12_peers"
    in_process = True
    tuning = VLLM_TUNING
    settings = VllmSettings

    def cells(self, p: Profile, root=None) -> list[Cell]:
        return vllm_cells(p, root)


@experiment
class VllmTuning(OnTheHead, PicksSettings):
    name = VLLM_TUNING

    def cells(self, p: Profile, root=None) -> list[Cell]:
        return vllm_tuning_cells(p, root)
