"""Notebook 12's vLLM rows (issue 79): vLLM's CPU build on the same target and our EAGLE-3 head, beside our engine.

- ``vllm_tuning``: on the tuning prompts, our chain on the head (its tuning candidates) and vLLM's EAGLE-3 mode
  with ``num_speculative_tokens`` set to each candidate's K (the same number of candidates), greedy.
- ``vllm``: on the sealed test prompts of Spec-Bench and WikiText-2, each replicate in a fresh process, interleaved
  prompt by prompt: our AR, our chain on the head alone (tuned), vLLM's AR, its EAGLE-3 with the head (tuned K),
  its n-gram prompt lookup and its suffix decoding (at its documentation's settings), greedy at batch 1. vLLM's
  worker is paused (SIGSTOP) while our engine runs, and every row logs what it spent meanwhile.
- ``vllm_throughput`` (a one-document report): vLLM's aggregate tokens/s at 1, 4 and 16 concurrent requests, AR and
  EAGLE-3 interleaved, what vLLM is for; our engine decodes one sequence, so it has no such row.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
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
from .catalog import CountsOwnPrompts, Document, Experiment, PicksSettings, PromptSettings, experiment, get

VLLM, VLLM_TUNING, VLLM_THROUGHPUT = "vllm", "vllm_tuning", "vllm_throughput"
VLLM_WORKLOADS = (SPEC_BENCH, WIKITEXT2)
CONCURRENCY = (1, 4, 16)
THROUGHPUT_TOKENS = 128  # per request, EOS ignored: every request decodes the same length
THROUGHPUT_REPEATS = 3


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


# ---- throughput at several concurrent requests ------------------------------------------------------------------

def run_vllm_throughput(profile: Profile, rerun: bool = False, root: Path | None = None,
                        render_only: bool = False) -> Path:
    """``vllm_throughput.json``: vLLM AR and EAGLE-3 (its Spec-Bench tuned K) at ``CONCURRENCY`` concurrent requests
    of the first Spec-Bench test questions, ``THROUGHPUT_TOKENS`` each, ``THROUGHPUT_REPEATS`` rounds, the two modes
    alternating. Without the vLLM environment the committed file stays and nothing is measured."""
    from ..measure.store import needs_run, results_path, write_report

    path = results_path(VLLM_THROUGHPUT, profile, root)
    if not runs_vllm(profile) or not needs_run(path, rerun, render_only, profile):
        return path
    if (why := P.unavailable()) is not None:
        print(f"{VLLM_THROUGHPUT}: not measured on this machine: {why}")
        return path
    doc = throughput_record(vllm_profile(profile), root)
    write_report(path, doc, replace=rerun)
    return path


def throughput_prompts(p: Profile, n: int) -> list:
    """The first ``n`` Spec-Bench test questions (through the chat template), in the split's order."""
    from ..setup.prompts import load_prompts
    from ..setup.splits import CATEGORIES
    from ..setup.models import load_tokenizer

    per = -(-n // len(set(CATEGORIES.values())))
    return load_prompts(SPEC_BENCH, load_tokenizer(p.models.target), n=per, split="test",
                        seed=p.prompt_seed("test"))[:n]


def throughput_record(p: Profile, root=None) -> dict:
    from tqdm.auto import tqdm

    from ..measure.environment import environment
    from ..setup.weights import record_weights

    prompts = throughput_prompts(p, max(CONCURRENCY))
    modes = {P.AR_MODE: P.AR_PEER.config, P.EAGLE3_MODE: settings(p, SPEC_BENCH, root)[1]}
    workers = {name: P.worker(cfg) for name, cfg in modes.items()}
    rows = []
    with tqdm(total=THROUGHPUT_REPEATS * len(CONCURRENCY) * len(modes), desc=VLLM_THROUGHPUT, unit="batch") as bar:
        for rep in range(THROUGHPUT_REPEATS):
            for c in CONCURRENCY:
                for name, w in workers.items():
                    reply = w.generate([q.ids.tolist() for q in prompts[:c]], THROUGHPUT_TOKENS, ignore_eos=True)
                    tokens = sum(map(len, reply["outputs"]))
                    rows.append({"mode": name, "concurrency": c, "repeat": rep, "tokens": tokens,
                                 "wall_s": reply["wall_s"], "tps": tokens / reply["wall_s"], "spec": reply["spec"],
                                 "idle_cpu_s": reply["idle_cpu_s"]})
                    bar.update(1)
    return {"what": "vLLM's aggregate throughput at 1, 4 and 16 concurrent greedy requests, AR and EAGLE-3 with "
                    "our head; our engine decodes one sequence at a time",
            "experiment": VLLM_THROUGHPUT, "modes": {k: {"config": vars(c) | {"type": "VllmConfig"},
                                                         "engine_info": P.describe(c)} for k, c in modes.items()},
            "settings": {"concurrency": list(CONCURRENCY), "tokens_per_request": THROUGHPUT_TOKENS,
                         "ignore_eos": True, "repeats": THROUGHPUT_REPEATS, "order": "repeat, concurrency, mode"},
            "prompt_ids": [q.id for q in prompts], "rows": rows, "weights": record_weights(p, None),
            "environment": environment(p.models.device), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}


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


@experiment
class VllmThroughput(Document):
    """vLLM's aggregate throughput at several concurrent requests."""
    name = VLLM_THROUGHPUT
    notebook = "12_peers"
    make = run_vllm_throughput
