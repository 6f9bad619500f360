"""One measured generation per row: the cell, the run, the row's metrics and agreement with AR, the record."""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass

import torch

from ..core.runners import as_runner
from ..methods import generate
from .data import Prompt
from .environment import BandwidthProbe, environment
from .memory import PeakMemory
from .metrics import aggregate, prompt_metrics
from .store import config_dict


def tokens_hash(tokens: list[int]) -> str:
    return hashlib.sha1(json.dumps(tokens).encode()).hexdigest()[:16]


@dataclass
class Cell:
    """One benchmark cell: a method on a dataset at one (T, L_max) and precision."""

    dataset: str
    method: str          # family: "ar", "linear", "fixed_tree", "dynatree", "talon", "hf_assisted", "streaming_spec"
    label: str           # what tables show, e.g. "DynaTree (paper settings)" or "fixed D=5 B=2 tau=0.1"
    config: object       # the method's configuration dataclass, None for AR
    T: int
    L_max: int
    dtype: str
    tags: dict = dataclasses.field(default_factory=dict)  # sweep coordinates, role ("timed", "exact", ...)


def run_cell(cell: Cell, target, draft, prompt: Prompt, kv_mode: str, record_trees: int = 0):
    return generate(target, prompt.ids, cell.T, draft=draft, method=cell.config, kv_mode=kv_mode,
                    record_trees=record_trees)


def warm_up(cell: Cell, target, draft, prompts: list[Prompt], warmup: int, kv_mode: str) -> None:
    """``warmup`` discarded runs of the cell (on the first prompts)."""
    for i in range(warmup):
        run_cell(cell, target, draft, prompts[i % len(prompts)], kv_mode)


def agreement(ref: list[int] | None, tokens: list[int]) -> dict:
    """How a generation compares with AR's tokens for the same prompt and precision."""
    if ref is None:
        return {"equals_ar": None, "ar_agreement": None, "first_divergence": None}
    first = next((i for i, (a, b) in enumerate(zip(ref, tokens)) if a != b), min(len(ref), len(tokens)))
    return {"equals_ar": ref == tokens, "ar_agreement": sum(a == b for a, b in zip(ref, tokens)) / len(ref),
            "first_divergence": first}


@torch.no_grad()
def divergence_gap(target, prompt_ids: torch.Tensor, ref: list[int], at: int) -> float:
    """The target's top-1 minus top-2 logit where a generation first left AR's path, recomputed in one
    uncached forward over the prompt and AR's tokens before it. A gap of ~1e-5 in fp32 is a numerical
    near-tie (reduction order differs between a k-token verification and a 1-token step); a decoder bug
    shows up as a divergence with a wide gap."""
    model = as_runner(target).model
    ids = torch.cat([prompt_ids.cpu(), torch.tensor(ref[:at], dtype=torch.long)])[None]
    top2 = model(input_ids=ids.to(model.device)).logits[0, -1].float().topk(2).values
    return float(top2[0] - top2[1])


def measure(cell: Cell, target, draft, prompt: Prompt, kv_mode: str, ar_tokens: list[int] | None,
            probe: BandwidthProbe, record_trees: int = 0, memory: bool = False) -> dict:
    """One measured generation -> one row: metrics and agreement with AR's tokens. AR rows keep their
    tokens (``output_ids``) so later or resumed cells can be compared with them, and the memory bandwidth
    ``probe``d right after them. ``memory``: the row also gets the generation's peak memory (``peak_mem_mb``),
    measured around the generation alone (the probe's tensor freed first; the probe and the divergence check,
    an uncached forward, come after it)."""
    dev = next(as_runner(target).model.parameters()).device
    if memory:
        probe.release()
    mem = PeakMemory(str(dev)) if memory else contextlib.nullcontext()
    with mem:
        res = run_cell(cell, target, draft, prompt, kv_mode, record_trees)
    ref = res.tokens if cell.config is None else ar_tokens
    row = {"prompt_id": prompt.id, "prompt_len": int(prompt.ids.numel()), **prompt_metrics(res),
           "tokens_sha": tokens_hash(res.tokens), **agreement(ref, res.tokens)}
    if memory:
        row["peak_mem_mb"] = mem.peak_mb
    if cell.config is None:
        row["output_ids"] = res.tokens
        row["read_bandwidth_gbs"] = round(probe.read_gbs(), 2)  # AR's bound, probed next to it
    elif row["equals_ar"] is False:
        row["divergence_gap"] = divergence_gap(target, prompt.ids, ref, row["first_divergence"])
    if res.trees:
        row["trees"] = res.trees
    return row


def make_record(cell: Cell, key: str, profile, prompts, rows: list[dict], extra: dict) -> dict:
    mo = profile.models
    return {"key": key, "dataset": cell.dataset, "method": cell.method, "label": cell.label,
            "config": config_dict(cell.config), "T": cell.T, "L_max": cell.L_max, "dtype": cell.dtype,
            "tags": cell.tags, "kv_mode": profile.protocol.kv_mode, "profile": profile.name, "engine": str(mo.engine),
            "target": mo.target, "draft": mo.draft, "draft_vocab": mo.draft_vocab, "draft_lookup": mo.draft_lookup,
            "context_override": mo.context_override,
            "warmup": profile.protocol.warmup, "prompt_ids": [p.id for p in prompts], "rows": rows,
            "aggregate": aggregate(rows), "environment": environment(mo.device), **extra,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
