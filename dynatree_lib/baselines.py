"""The other seed systems as decoders with the same result type: HuggingFace assisted generation and
StreamingLLM + linear speculative decoding. (TALON is a drafting policy: ``drafting.TalonConfig``.)"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from .cache import commit_gather, new_cache
from .decoders import GenerationResult, _check_inputs, _clock, _cut
from .drafting import DraftState, LinearConfig, _check, draft_tree
from .models import forward
from .tree import select_path
from .verify import verify


@dataclass(frozen=True)
class HFAssistedConfig:
    """``model.generate(assistant_model=...)``, greedy. Every assistant setting is explicit and logged,
    because transformers changed their defaults across versions (e.g. the confidence threshold)."""

    num_assistant_tokens: int = 5
    schedule: str = "constant"          # "constant" or "heuristic" (HF grows/shrinks K with acceptance)
    confidence_threshold: float = 0.0   # 0 disables HF's early stop on low assistant confidence

    def __post_init__(self) -> None:
        _check(self.num_assistant_tokens >= 1, "num_assistant_tokens must be >= 1")
        _check(self.schedule in ("constant", "heuristic"), f"schedule must be 'constant' or 'heuristic', got {self.schedule!r}")
        _check(0.0 <= self.confidence_threshold < 1.0, "confidence_threshold must be in [0, 1)")


class _Counter:
    """Counts forward calls of a module (HF does not report its iterations)."""

    def __init__(self, model):
        self.n = 0
        self.h = model.register_forward_hook(self)

    def __call__(self, *_):
        self.n += 1


@torch.no_grad()
def generate_hf_assisted(target, draft, prompt: Tensor, T: int, cfg: HFAssistedConfig = HFAssistedConfig(),
                         eos_token_id: int | None = None) -> GenerationResult:
    """HF assisted generation (greedy). Iterations = target forwards; accepted per iteration is derived
    as committed - 1 from those counts (HF exposes no per-iteration log); draft depth = assistant forwards."""
    from transformers import GenerationConfig

    _check_inputs(target, draft, prompt, T, "gather")
    dev = prompt.device
    assistant = copy.copy(draft)  # shallow: shares weights, own generation config
    assistant.generation_config = copy.deepcopy(draft.generation_config)
    g = assistant.generation_config
    g.num_assistant_tokens = cfg.num_assistant_tokens
    g.num_assistant_tokens_schedule = cfg.schedule
    g.assistant_confidence_threshold = cfg.confidence_threshold
    # eos_token_id=None generates exactly T tokens, like our AR with eos_token_id=None
    gen = GenerationConfig(do_sample=False, max_new_tokens=T, eos_token_id=eos_token_id,
                           pad_token_id=eos_token_id if eos_token_id is not None else 0)
    ct, cd = _Counter(target), _Counter(assistant)
    try:
        t0 = _clock(dev)
        out = target.generate(prompt[None], generation_config=gen, assistant_model=assistant,
                              attention_mask=torch.ones_like(prompt)[None])
        t1 = _clock(dev)
    finally:
        ct.h.remove()
        cd.h.remove()
    tokens = out[0, prompt.numel():].tolist()
    it = max(ct.n, 1)
    return GenerationResult(tokens, draft_nodes=[cd.n] + [0] * (it - 1), tree_depth=[cd.n] + [0] * (it - 1),
                            accepted=[len(tokens) - it] + [0] * (it - 1), committed=[len(tokens)] + [0] * (it - 1),
                            draft_forwards=[cd.n] + [0] * (it - 1), ttft_s=float("nan"), wall_s=t1 - t0,
                            target_forwards=ct.n)


@dataclass(frozen=True)
class StreamingConfig:
    """StreamingLLM + linear speculative decoding: both caches keep ``n_sink`` attention-sink tokens plus
    the most recent tokens, ``cache_size`` in all (1024 in the paper's earlier version)."""

    K: int = 5
    cache_size: int = 1024
    n_sink: int = 4

    def __post_init__(self) -> None:
        _check(self.K >= 1, f"K must be >= 1, got {self.K}")
        _check(0 <= self.n_sink < self.cache_size, f"need 0 <= n_sink < cache_size, got {self.n_sink}, {self.cache_size}")
        _check(self.cache_size > self.n_sink + self.K + 1, "cache_size must exceed n_sink + K + 1")


def _inv_freq(model) -> Tensor:
    for m in model.modules():
        if isinstance(getattr(m, "inv_freq", None), Tensor):
            return m.inv_freq
    raise ValueError("StreamingLLM re-rotation needs a rotary-embedding model (a module with `inv_freq`)")


def rerotate(keys: Tensor, delta: int, inv_freq: Tensor) -> Tensor:
    """Keys cached with RoPE at position p, moved to p + delta (rotate-half convention on the first
    2*len(inv_freq) dims, as GPT-NeoX / Llama cache them)."""
    rd = 2 * inv_freq.numel()
    ang = delta * inv_freq.to(keys.device, torch.float32)
    cos, sin = torch.cat([ang.cos(), ang.cos()]), torch.cat([ang.sin(), ang.sin()])
    k = keys[..., :rd].float()
    half = rd // 2
    rot = torch.cat([-k[..., half:], k[..., :half]], dim=-1)
    out = keys.clone()
    out[..., :rd] = (k * cos + rot * sin).to(keys.dtype)
    return out


def evict(cache, n_sink: int, cache_size: int, inv_freq: Tensor) -> int:
    """Drop the oldest non-sink tokens so the cache holds ``cache_size``; the kept window's keys are
    re-rotated to their new, contiguous cache positions (StreamingLLM). Returns how many were dropped."""
    n = cache.get_seq_length() - cache_size
    if n <= 0:
        return 0
    for layer in cache.layers:
        k, v = layer.keys, layer.values
        layer.keys = torch.cat([k[..., :n_sink, :], rerotate(k[..., n_sink + n:, :], -n, inv_freq)], dim=-2)
        layer.values = torch.cat([v[..., :n_sink, :], v[..., n_sink + n:, :]], dim=-2)
    return n


@torch.no_grad()
def generate_streaming_spec(target, draft, prompt: Tensor, T: int, cfg: StreamingConfig = StreamingConfig(),
                            eos_token_id: int | None = None) -> GenerationResult:
    """Linear speculative decoding over StreamingLLM caches (sinks + recent window, cache-relative positions).

    Not exact once the window slides: attention then sees fewer tokens than full greedy decoding, so the
    output can differ from AR; the harness reports its agreement with AR instead of asserting equality.
    While prompt + generated tokens fit in ``cache_size`` it equals AR token for token.
    """
    _check_inputs(target, draft, prompt, T, "gather")
    dev = prompt.device
    inv_t, inv_d = _inv_freq(target), _inv_freq(draft)
    policy = LinearConfig(cfg.K).policy()
    res = GenerationResult([])
    t0 = _clock(dev)
    cache, ev_t = new_cache(), 0
    P = prompt.numel()
    for s in range(0, P - 1, cfg.cache_size - cfg.n_sink):  # long prompts: prefill in window-sized chunks
        e = min(s + cfg.cache_size - cfg.n_sink, P - 1)
        forward(target, prompt[s:e], cache, torch.arange(s - ev_t, e - ev_t, device=dev), last_only=True)
        ev_t += evict(cache, cfg.n_sink, cfg.cache_size, inv_t)
        res.target_forwards += 1
    res.prefill_s = _clock(dev) - t0
    dstate = DraftState(new_cache())
    ids, done = prompt, False
    while not done:
        room = T - len(res.tokens)
        ta = time.perf_counter()
        tree, n_fwd = draft_tree(draft, dstate, ids, policy, room - 1)
        dstate.evicted += evict(dstate.cache, cfg.n_sink, cfg.cache_size, inv_d)
        tb = _clock(dev)
        L = cache.get_seq_length()
        target_next = verify(target, cache, tree, L)
        path = select_path(tree, target_next)
        new_t = torch.cat([tree.tokens[path[1:]], target_next[path[-1:]]])
        commit_gather(cache, L, path)
        ev_t += evict(cache, cfg.n_sink, cfg.cache_size, inv_t)
        new, done = _cut(new_t.tolist(), room, eos_token_id)
        tc = time.perf_counter()
        res.log_iteration(tree, path.numel() - 1, new, n_fwd, tb - ta, tc - tb, tc - t0)
        ids = torch.cat([ids, new_t[: len(new)]])
    res.wall_s = _clock(dev) - t0
    return res
