"""One measured generation per row: the cell, the run, the row's metrics and agreement with AR, the record."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass

import torch

from ...core.drafts.lookup import LookupRunner
from ...core.policies.base import Session
from ...core.engines.hf import as_runner
from ...core.engines.kernels import CallClock
from ...core.engines.static import FUSED
from ...core.sampling import Sampling
from ...methods import REGISTRY, generate
from .environment import BandwidthProbe, environment
from .metrics import aggregate, loop_share, periodic_tail, prompt_metrics
from ..setup.prompts import Prompt
from ..setup import variants
from .store import config_dict
from ..setup.variants import MAIN

GREEDY = Sampling()


def tokens_hash(tokens: list[int]) -> str:
    return hashlib.sha1(json.dumps(tokens).encode()).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One benchmark cell: a method in one of its variants on a workload at one (T, L_max), precision and sampling
    law.

    ``variant``: which of the method's ways to run it (``variants.VARIANTS``: its main setting, the paper's settings,
    an ablation step, ...); with the configuration and tags it tells cells of one method apart, and it names what
    tables show (``label``). ``lookup=False``: the draft network alone, without its context lookup (a control row);
    ``split``: which prompts (``prompts.SPLITS``); ``tags``: sweep coordinates and roles ("timed", "exact",
    "memory", ...); ``control``: the controller that sizes its trees (None: none); ``draft``: a feature head of its own (``<kind>:<folder>``, a Medusa or Hydra head beside the
    profile's EAGLE-3 head), loaded over the same target; None: the profile's draft."""

    dataset: str
    method: str          # a registered method's name
    variant: str = MAIN
    config: object       # the method's configuration dataclass, None for AR
    T: int
    L_max: int           # prompt tokens of a continuation workload; 0 for a question workload
    dtype: str
    tags: dict = dataclasses.field(default_factory=dict)
    sampling: Sampling = GREEDY
    lookup: bool = True
    split: str = "test"
    draft: str | None = None
    control: object = None  # a ``ControlConfig``: each tree's budget chosen by the controller (``variants.CONTROLLED``)

    @property
    def label(self) -> str:
        """What tables call this cell, e.g. "DynaTree (paper settings)" or "fixed D=5 B=2 tau=0.1"."""
        return variants.label(self.method, self.variant, config_dict(self.config), self.tags)


def drafter(cell: Cell, draft):
    """The draft a cell decodes with: the network alone where the cell says so."""
    return draft.inner if not cell.lookup and isinstance(draft, LookupRunner) else draft


@dataclass
class CellRun:
    """What every generation of one cell shares: the cell, the models, the KV mode, the workload's EOS and the
    cell's state across its generations (``session``, warm-ups included)."""
    cell: Cell
    target: object
    draft: object
    kv_mode: str
    eos: int | None
    session: Session | None = None
    warmed: bool = False

    def generate(self, prompt: Prompt, seed: int, record_trees: int = 0):
        """One generation on ``prompt``; a sampled cell's draws come from a generator seeded by ``seed``."""
        s, cell = self.cell.sampling, self.cell
        dev = next(as_runner(self.target).model.parameters()).device
        gen = None if s.greedy else torch.Generator(dev).manual_seed(seed)
        return generate(self.target, prompt.ids, cell.T, draft=drafter(cell, self.draft), method=cell.config,
                        kv_mode=self.kv_mode, eos_token_id=self.eos, record_trees=record_trees,
                        sampling=s, generator=gen, session=self.session, control=cell.control)

    def warm_up(self, prompts: list[Prompt], n: int) -> None:
        """``n`` discarded generations (on the first prompts, cycled)."""
        for i in range(n):
            self.generate(prompts[i % len(prompts)], seed=i)
        self.warmed = True


def agreement(ref: list[int] | None, tokens: list[int]) -> dict:
    """How a generation compares with AR's tokens for the same prompt and precision."""
    if ref is None:
        return {"equals_ar": None, "ar_agreement": None, "first_divergence": None}
    first = next((i for i, (a, b) in enumerate(zip(ref, tokens)) if a != b), min(len(ref), len(tokens)))
    return {"equals_ar": ref == tokens, "ar_agreement": sum(a == b for a, b in zip(ref, tokens)) / max(len(ref), 1),
            "first_divergence": first}


@torch.no_grad()
def divergence_gap(target, prompt_ids: torch.Tensor, ref: list[int], at: int) -> float:
    """The target's top-1 minus top-2 logit where a generation first left AR's path, recomputed by the target's
    runner (which holds its weights: ``core.engines.ownership``) in one forward from an empty cache over the prompt and
    AR's tokens before it. A gap of ~1e-5 in fp32 is a numerical near-tie (reduction order differs between a k-token
    verification and a 1-token step); a decoder bug shows up as a divergence with a wide gap."""
    runner = as_runner(target)
    dev = next(runner.model.parameters()).device
    ids = torch.cat([prompt_ids.cpu(), torch.tensor(ref[:at], dtype=torch.long)]).to(dev)
    runner.reset()
    logits = runner.forward(ids, torch.arange(ids.numel(), device=dev), last_only=True)
    runner.reset()
    top2 = logits[-1].float().topk(2).values
    return float(top2[0] - top2[1])


def measure(run: CellRun, prompt: Prompt, ar_tokens: list[int] | None, probe: BandwidthProbe | None, seed: int,
            *, record_trees: int = 0) -> dict:
    """One measured generation -> one row: metrics, agreement with AR's tokens (greedy cells), and for AR rows
    their tokens (``output_ids``: later or resumed cells compare with them), how much of their output copies
    earlier text (``loop_share``, ``periodic_tail``) and the memory bandwidth ``probe``d right before and right after
    them (a VM's bandwidth flips between phases within seconds: two probes that agree say the phase held)."""
    cell, target = run.cell, run.target
    before = probe.read_gbs() if probe is not None and cell.config is None else None
    clock = CallClock.seconds
    res = run.generate(prompt, seed=seed, record_trees=record_trees)
    in_calls = CallClock.seconds - clock  # seconds inside the fused engine's calls
    greedy = cell.sampling.greedy
    ref = res.tokens if cell.config is None else ar_tokens
    row = {"prompt_id": prompt.id, "prompt_len": int(prompt.ids.numel()), **prompt_metrics(res),
           "tokens_sha": tokens_hash(res.tokens), **agreement(ref if greedy else None, res.tokens)}
    if prompt.category is not None:
        row["category"] = prompt.category
    if res.engine == FUSED:  # the host's share of the wall time (metrics: host_s)
        row["host_s"] = res.wall_s - in_calls
    if cell.config is None:
        row |= {"output_ids": res.tokens, "loop_share": loop_share(prompt.ids.tolist(), res.tokens),
                "periodic_tail": periodic_tail(res.tokens)}
        if probe is not None:
            row |= {"read_bandwidth_before_gbs": round(before, 2),  # AR's bound, probed on both sides of it
                    "read_bandwidth_gbs": round(probe.read_gbs(), 2)}
    elif greedy and row["equals_ar"] is False:
        row["divergence_gap"] = divergence_gap(target, prompt.ids, ref, row["first_divergence"])
    if res.trees:
        row["trees"] = res.trees
    if res.decisions is not None and cell.tags.get("record_decisions"):  # the controller's budget per iteration
        row |= {"budgets": [d["budget"] for d in res.decisions], "accepted_per_iteration": res.log.accepted}
    return row


def engine_info(cell: Cell) -> dict:
    """What a record of another engine's method logs about that engine (``Method.describe``); nothing for ours."""
    m = REGISTRY[cell.method]
    return {"engine_info": m.describe(cell.config)} if m.describe else {}


def ran_on(rows: list[dict], profile_engine: str) -> str:
    """The engine a record's generations report (transformers' loop, llama.cpp's server, ours as it ran), else the
    profile's: a record names the engine that really ran, never only the one the profile asked for."""
    engines = {r["engine"] for r in rows if r.get("engine")}
    return engines.pop() if len(engines) == 1 else profile_engine


def make_record(cell: Cell, key: str, profile, prompts, rows: list[dict], *, extra: dict, replicate: int) -> dict:
    mo, s = profile.models, cell.sampling
    return {"key": key, "dataset": cell.dataset, "method": cell.method, "variant": cell.variant, "label": cell.label,
            "config": config_dict(cell.config), "T": cell.T, "L_max": cell.L_max, "dtype": cell.dtype,
            "tags": cell.tags, "temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p,
            "lookup": cell.lookup, "split": cell.split, "replicate": replicate, "kv_mode": profile.protocol.kv_mode,
            "profile": profile.name, "engine": ran_on(rows, str(mo.engine)), "target": mo.target,
            "draft": cell.draft or mo.draft,
            "draft_vocab": cell.tags.get("draft_vocab", mo.draft_vocab), "draft_lookup": mo.draft_lookup and cell.lookup,
            "context_override": mo.context_override, "warmup": profile.protocol.warmup,
            "seed": profile.protocol.seed, "prompt_ids": [p.id for p in prompts], "rows": rows,
            "aggregate": aggregate(rows), "environment": environment(mo.device), **extra, **engine_info(cell),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
