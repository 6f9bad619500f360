"""The other seed systems: HuggingFace assisted generation (a thin adapter over ``generate``) and
StreamingLLM + linear speculative decoding (the one speculative loop with a ``Window`` hook).
TALON is a drafting policy: ``policies.TalonConfig``."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

import torch

from .decoders import GenerationResult, Window, check_inputs, clock, speculative_decode
from .policies import LinearConfig, check_field_types, require
from .runners import as_runner


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
    return GenerationResult(tokens, wall_s=t1 - t0, iterations=ct.n, target_forwards=ct.n,
                            accepted=len(tokens) - ct.n, drafted_nodes=cd.n, drafted_depth=cd.n,
                            draft_forwards=cd.n, engine="hf-generate")


@dataclass(frozen=True)
class StreamingConfig:
    """StreamingLLM + linear speculative decoding: both caches keep ``n_sink`` attention-sink tokens plus
    the most recent tokens, ``cache_size`` in all (1024 in the paper's earlier version); kept keys are
    re-rotated to their cache positions. Not exact once the window slides (attention then sees fewer
    tokens than full greedy decoding): the harness measures its agreement with AR. While prompt +
    generated tokens fit in ``cache_size`` it equals AR token for token."""

    method: ClassVar[str] = "streaming_spec"

    K: int = 5
    cache_size: int = 1024
    n_sink: int = 4

    def __post_init__(self) -> None:
        check_field_types(self)
        require(self.K >= 1, f"K must be >= 1, got {self.K}")
        require(0 <= self.n_sink < self.cache_size, f"need 0 <= n_sink < cache_size, got {self.n_sink}, {self.cache_size}")
        require(self.cache_size > self.n_sink + self.K + 1, "cache_size must exceed n_sink + K + 1")


def generate_streaming_spec(target, draft, prompt, T: int, cfg: StreamingConfig = StreamingConfig(),
                            eos_token_id: int | None = None, kv_mode: str = "gather",
                            record_trees: int = 0) -> GenerationResult:
    """Linear speculative decoding over StreamingLLM caches: the speculative loop with a ``Window``."""
    return speculative_decode(target, draft, prompt, T, LinearConfig(cfg.K).policy(), kv_mode, eos_token_id,
                              Window(cfg.cache_size, cfg.n_sink, cfg.K + 1), record_trees)
