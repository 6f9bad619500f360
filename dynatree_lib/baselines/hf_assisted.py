"""HuggingFace assisted generation: a thin adapter over transformers' ``generate``, run as users run it."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..core.decoding import check_inputs, clock
from ..core.result import GenerationResult, Totals
from ..core.runners import as_runner
from ..core.validate import check_field_types, require


@dataclass(frozen=True)
class HFAssistedConfig:
    """``model.generate(assistant_model=...)``, greedy, as users run it (transformers' own loop and its
    default ``DynamicCache``, eager). Every assistant setting is explicit and logged, because transformers
    changed their defaults across versions (e.g. the confidence threshold)."""

    method: ClassVar[str] = "hf_assisted"

    num_assistant_tokens: int = 5
    schedule: str = "constant"          # "constant" or "heuristic" (HF grows/shrinks K with acceptance)
    confidence_threshold: float = 0.0   # 0 disables HF's early stop on low assistant confidence

    def __post_init__(self) -> None:
        check_field_types(self)
        require(self.num_assistant_tokens >= 1, "num_assistant_tokens must be >= 1")
        require(self.schedule in ("constant", "heuristic"), f"schedule must be 'constant' or 'heuristic', got {self.schedule!r}")
        require(0.0 <= self.confidence_threshold < 1.0, "confidence_threshold must be in [0, 1)")


class _Counter:
    """Counts forward calls of a module (HF does not report its iterations)."""

    def __init__(self, model):
        self.n = 0
        self.h = model.register_forward_hook(self)

    def __call__(self, *_):
        self.n += 1


@torch.no_grad()
def generate_hf_assisted(target, draft, prompt, T: int, cfg: HFAssistedConfig = HFAssistedConfig(),
                         eos_token_id: int | None = None, kv_mode: str = "gather") -> GenerationResult:
    """HF assisted generation (greedy). The models' own generation configs (eos, penalties, ...) are
    swapped out for the call: only ``eos_token_id`` stops it, exactly like our AR. Iterations = target
    forwards; accepted = tokens - iterations (HF exposes no per-iteration log); drafted = assistant
    forwards; TTFT is not measured (HF's loop exposes no first-token time)."""
    from transformers import GenerationConfig

    target, draft = as_runner(target).model, as_runner(draft).model  # HF's loop runs the models itself
    prompt = check_inputs(target, draft, prompt, T, kv_mode, eos_token_id)
    T = int(T)
    dev = prompt.device
    assistant = copy.copy(draft)  # shallow: shares weights, own generation config
    assistant.generation_config = GenerationConfig(
        num_assistant_tokens=cfg.num_assistant_tokens, num_assistant_tokens_schedule=cfg.schedule,
        assistant_confidence_threshold=cfg.confidence_threshold)
    # With the checkpoint's config swapped out, eos_token_id=None runs to exactly T tokens, as our AR does.
    gen = GenerationConfig(do_sample=False, max_new_tokens=T, eos_token_id=eos_token_id,
                           pad_token_id=eos_token_id if eos_token_id is not None else 0)
    saved = target.generation_config
    target.generation_config = GenerationConfig()  # nothing inherited from the checkpoint's defaults
    ct, cd = _Counter(target), _Counter(assistant)
    try:
        t0 = clock(dev)
        out = target.generate(prompt[None], generation_config=gen, assistant_model=assistant,
                              attention_mask=torch.ones_like(prompt)[None])
        t1 = clock(dev)
    finally:
        target.generation_config = saved
        ct.h.remove()
        cd.h.remove()
    tokens = out[0, prompt.numel():].tolist()
    counted = Totals(iterations=ct.n, accepted=len(tokens) - ct.n, drafted_nodes=cd.n, drafted_depth=cd.n,
                     draft_forwards=cd.n)
    return GenerationResult(tokens, wall_s=t1 - t0, target_forwards=ct.n, engine="hf-generate", counted=counted)
