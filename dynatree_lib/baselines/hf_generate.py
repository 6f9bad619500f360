"""HuggingFace ``generate``, run as users run it: plain AR (the engine's own reference) and assisted generation."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..core.loop import Options, check_inputs, clock
from ..core.result import GenerationResult, Totals
from ..core.engines.hf import as_runner
from ..core.validate import check_field_types, require


@dataclass(frozen=True)
class HFAssistedConfig:
    """``model.generate(assistant_model=...)`` as users run it (transformers' own loop and its default
    ``DynamicCache``, eager). Every assistant setting is explicit and logged, because transformers changed
    their defaults across versions (e.g. the confidence threshold)."""

    method: ClassVar[str] = "hf_assisted"

    num_assistant_tokens: int = 5
    schedule: str = "constant"          # "constant" or "heuristic" (HF grows/shrinks K with acceptance)
    confidence_threshold: float = 0.0   # 0 disables HF's early stop on low assistant confidence

    def __post_init__(self) -> None:
        check_field_types(self)
        require(self.num_assistant_tokens >= 1, "num_assistant_tokens must be >= 1")
        require(self.schedule in ("constant", "heuristic"),
                f"schedule must be 'constant' or 'heuristic', got {self.schedule!r}")
        require(0.0 <= self.confidence_threshold < 1.0, "confidence_threshold must be in [0, 1)")


@dataclass(frozen=True)
class HFARConfig:
    """``model.generate()`` without an assistant: AR on transformers' engine (eager, ``DynamicCache``), the
    reference HF assisted generation is measured against as well as our AR."""

    method: ClassVar[str] = "hf_ar"


class _Counter:
    """Counts forward calls of a module (HF does not report its iterations)."""

    def __init__(self, model):
        self.n = 0
        self.h = model.register_forward_hook(self)

    def __call__(self, *_):
        self.n += 1


def generation_config(T: int, opts: Options):
    """Exactly ``T`` new tokens (or up to ``opts.eos_token_id``), greedy or sampled as ``opts.sampling`` says,
    and nothing inherited from a checkpoint's defaults (penalties, stop tokens)."""
    from transformers import GenerationConfig

    s, eos = opts.sampling, opts.eos_token_id
    sample = {"do_sample": False} if s.greedy else {"do_sample": True, "temperature": float(s.temperature),
                                                    "top_k": s.top_k or 0, "top_p": 1.0 if s.top_p is None else float(s.top_p)}
    return GenerationConfig(max_new_tokens=T, eos_token_id=eos, pad_token_id=eos if eos is not None else 0, **sample)


class _SubsetHead:
    """While installed, a model's output layer scores only the token ids ``vocab`` (the others get -inf): the draft
    head our decoders draft with, given to HF's assistant. A draft distilled over a subset head leaves the other
    rows of its (tied) output layer untrained; HF's loop would otherwise propose from them."""

    def __init__(self, model, vocab: torch.Tensor):
        head = model.get_output_embeddings()
        self.mask = torch.full((head.weight.shape[0],), float("-inf"), dtype=head.weight.dtype, device=vocab.device)
        self.mask[vocab] = 0
        self.h = head.register_forward_hook(self)

    def __call__(self, _module, _inputs, logits):
        return logits + self.mask

    def remove(self) -> None:
        self.h.remove()


@torch.no_grad()
def generate_hf(target, draft, prompt, T: int, cfg: HFAssistedConfig | HFARConfig = HFARConfig(),
                *, opts: Options = Options()) -> GenerationResult:
    """HF ``generate``, with ``draft`` as its assistant for ``HFAssistedConfig``. The models' own generation
    configs are swapped out for the call. Sampling draws from torch's global generator, which a run forks and
    seeds from ``opts``' generator (HF takes no generator). Iterations = target forwards; accepted = tokens -
    iterations (HF exposes no per-iteration log); drafted = assistant forwards; TTFT is not measured (HF's loop
    exposes no first-token time). A draft with a head over a token subset (its runner's ``vocab``) assists with
    that head, as our decoders draft with it (``_SubsetHead``)."""
    assisted = isinstance(cfg, HFAssistedConfig)
    target = as_runner(target).model  # HF's loop runs the models itself
    vocab = as_runner(draft).vocab if assisted else None
    draft = as_runner(draft).model if assisted else None
    prompt = check_inputs(target, draft, prompt, T, opts)
    kw = {"attention_mask": torch.ones_like(prompt)[None], "generation_config": generation_config(int(T), opts)}
    if assisted:
        kw["assistant_model"] = copy.copy(draft)  # shallow: shares weights, own generation config
        from transformers import GenerationConfig

        kw["assistant_model"].generation_config = GenerationConfig(
            num_assistant_tokens=cfg.num_assistant_tokens, num_assistant_tokens_schedule=cfg.schedule,
            assistant_confidence_threshold=cfg.confidence_threshold)
    gen = opts.rng(prompt.device)
    seed = None if gen is None else int(torch.randint(2**62, (1,), generator=gen))
    saved, target.generation_config = target.generation_config, target.generation_config.__class__()
    ct, cd = _Counter(target), _Counter(kw["assistant_model"]) if assisted else None
    head = _SubsetHead(draft, vocab) if vocab is not None else None
    try:
        with torch.random.fork_rng(devices=[prompt.device] if prompt.device.type == "cuda" else []):
            if seed is not None:
                torch.manual_seed(seed)
            t0 = clock(prompt.device)
            out = target.generate(prompt[None], **kw)
            t1 = clock(prompt.device)
    finally:
        target.generation_config = saved
        for c in (ct, cd):
            if c is not None:
                c.h.remove()
        if head is not None:
            head.remove()
    tokens = out[0, prompt.numel():].tolist()
    drafted = cd.n if cd else 0
    counted = Totals(iterations=ct.n, accepted=len(tokens) - ct.n, drafted_nodes=drafted, drafted_depth=drafted,
                     draft_forwards=drafted)
    return GenerationResult(tokens, wall_s=t1 - t0, target_forwards=ct.n, engine="hf-generate", counted=counted)
