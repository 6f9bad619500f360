"""Greedy decoders with one entry point, ``generate``, and one result type.

- ``generate(target, prompt, T)``: our cached autoregressive loop (equals ``model.generate(do_sample=False)``).
- ``generate(target, prompt, T, draft=..., method=LinearConfig(K))``: linear speculative decoding.
- ``method=FixedTreeConfig(...)``: static tree; ``method=DynaTreeConfig(...)``: DynaTree.

State invariant of the speculative loop: ``ids`` holds the prompt and every committed token; the target
cache holds ``ids[:-1]``; ``ids[-1]`` (the pending token) is the root of the next draft tree, so its KV
entry comes out of the verification forward and no committed token is ever re-run through the target
(``kv_mode="gather"``). ``kv_mode="rebuild"`` is the paper's rollback: crop to the prefix and forward the
committed path again.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .cache import commit_gather, new_cache, truncate
from .drafting import DraftConfig, DraftState, draft_tree
from .models import check_pair, context_limit, forward
from .tree import select_path
from .verify import verify

KV_MODES = ("gather", "rebuild")


@dataclass
class GenerationResult:
    """New tokens plus per-iteration statistics (one entry per target verification forward)."""

    tokens: list[int]
    draft_nodes: list[int] = field(default_factory=list)     # drafted nodes in the tree (root excluded)
    tree_depth: list[int] = field(default_factory=list)      # depth of the deepest drafted node
    accepted: list[int] = field(default_factory=list)        # accepted draft tokens before the bonus
    committed: list[int] = field(default_factory=list)       # tokens committed (accepted + bonus, after T/EOS cut)
    draft_forwards: list[int] = field(default_factory=list)  # draft-model forwards spent drafting
    draft_s: list[float] = field(default_factory=list)       # seconds drafting
    verify_s: list[float] = field(default_factory=list)      # seconds verifying + committing
    prefill_s: float = 0.0
    ttft_s: float = 0.0        # prompt in -> first new token known
    wall_s: float = 0.0        # whole generation
    target_forwards: int = 0   # every target forward incl. prefill and rebuilds

    @property
    def iterations(self) -> int:
        return len(self.committed)

    def log_iteration(self, tree, accepted: int, new: list[int], draft_forwards: int, draft_s: float,
                      verify_s: float, since_start_s: float) -> None:
        """Record one draft-verify-commit iteration (one target verification forward)."""
        self.target_forwards += 1
        self.tokens += new
        self.draft_nodes.append(tree.n_drafted)
        self.tree_depth.append(tree.levels)
        self.accepted.append(accepted)
        self.committed.append(len(new))
        self.draft_forwards.append(draft_forwards)
        self.draft_s.append(draft_s)
        self.verify_s.append(verify_s)
        if len(self.committed) == 1:
            self.ttft_s = since_start_s


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _check_inputs(target, draft, prompt: Tensor, T: int, kv_mode: str) -> None:
    if not isinstance(T, int) or T < 1:
        raise ValueError(f"max_new_tokens T must be an integer >= 1, got {T!r}")
    if prompt.dim() != 1 or prompt.numel() < 1:
        raise ValueError(f"prompt must be a non-empty 1-D tensor of token ids, got shape {tuple(prompt.shape)}")
    if kv_mode not in KV_MODES:
        raise ValueError(f"kv_mode must be one of {KV_MODES}, got {kv_mode!r}")
    for name, m in (("target", target), ("draft", draft)):
        limit = context_limit(m) if m is not None else None
        if limit is not None and prompt.numel() + T > limit:
            raise ValueError(f"prompt ({prompt.numel()} tokens) + T ({T}) exceeds the {name} context of "
                             f"{limit} positions; truncate the prompt (L_max) or lower T")
    if draft is not None:
        check_pair(target, draft)


def _cut(new: list[int], room: int, eos: int | None) -> tuple[list[int], bool]:
    """Clip a commit to the remaining budget and at the first EOS; report whether generation ends."""
    if eos is not None and eos in new:
        new = new[: new.index(eos) + 1]
        return new[:room], True
    return new[:room], len(new) >= room


@torch.no_grad()
def generate_ar(target, prompt: Tensor, T: int, eos_token_id: int | None = None) -> GenerationResult:
    """Greedy autoregressive decoding with a KV cache: one target forward per token."""
    _check_inputs(target, None, prompt, T, "gather")
    dev = prompt.device
    P = prompt.numel()
    t0 = _clock(dev)
    cache = new_cache()
    tok = forward(target, prompt, cache, torch.arange(P, device=dev), last_only=True).argmax(-1)
    t_first = _clock(dev)
    out = [tok]
    done = eos_token_id is not None and int(tok) == eos_token_id
    pos = torch.arange(P, P + T, device=dev)
    for i in range(1, T):
        if done:
            break
        tok = forward(target, tok, cache, pos[i - 1:i], last_only=True).argmax(-1)
        out.append(tok)
        if eos_token_id is not None:  # the only per-token host sync, and only when asked
            done = int(tok) == eos_token_id
    tokens = torch.cat(out).tolist()
    t1 = _clock(dev)
    n = len(tokens)
    return GenerationResult(tokens, draft_nodes=[0] * n, tree_depth=[0] * n, accepted=[0] * n,
                            committed=[1] * n, draft_forwards=[0] * n, prefill_s=t_first - t0,
                            ttft_s=t_first - t0, wall_s=t1 - t0, target_forwards=n)


@torch.no_grad()
def generate_speculative(target, draft, prompt: Tensor, T: int, method: DraftConfig,
                         kv_mode: str = "gather", eos_token_id: int | None = None) -> GenerationResult:
    """Greedy speculative decoding with a draft tree shaped by ``method``; output equals ``generate_ar``."""
    _check_inputs(target, draft, prompt, T, kv_mode)
    dev = prompt.device
    limit = min(x for x in (context_limit(target), context_limit(draft), 1 << 62) if x is not None)
    policy = method.policy()
    res = GenerationResult([])
    t0 = _clock(dev)
    cache = new_cache()
    P = prompt.numel()
    if P > 1:
        forward(target, prompt[:-1], cache, torch.arange(P - 1, device=dev), last_only=True)
        res.target_forwards += 1
    res.prefill_s = _clock(dev) - t0
    dstate = DraftState(new_cache())
    ids = prompt
    done = False
    while not done:
        room = T - len(res.tokens)
        L = ids.numel()
        ta = time.perf_counter()
        # Nodes deeper than room-1 could never be committed (the bonus fills the last slot), and
        # positions must stay inside the context.
        tree, n_fwd = draft_tree(draft, dstate, ids, policy, min(room - 1, limit - L))
        tb = _clock(dev)
        target_next = verify(target, cache, tree, L - 1)
        path = select_path(tree, target_next)
        new_t = torch.cat([tree.tokens[path[1:]], target_next[path[-1:]]])
        if kv_mode == "gather":
            commit_gather(cache, L - 1, path)
        else:
            truncate(cache, L - 1)
            forward(target, tree.tokens[path], cache, L - 1 + torch.arange(path.numel(), device=dev),
                    last_only=True)
            res.target_forwards += 1
        new, done = _cut(new_t.tolist(), room, eos_token_id)
        tc = time.perf_counter()
        policy.observe(path.numel() - 1, tree.levels)
        res.log_iteration(tree, path.numel() - 1, new, n_fwd, tb - ta, tc - tb, tc - t0)
        ids = torch.cat([ids, new_t[: len(new)]])
    res.wall_s = _clock(dev) - t0
    return res


def generate(target, prompt: Tensor, T: int, draft=None, method=None, kv_mode: str = "gather",
             eos_token_id: int | None = None) -> GenerationResult:
    """Greedy decoding of ``T`` new tokens: AR when ``method`` is None; otherwise the method's decoder
    (a drafting config -> ``generate_speculative``; ``HFAssistedConfig`` / ``StreamingConfig`` -> baselines)."""
    if method is None:
        return generate_ar(target, prompt, T, eos_token_id)
    if draft is None:
        raise ValueError(f"{type(method).__name__} needs a draft model (draft=...)")
    from . import baselines

    if isinstance(method, baselines.HFAssistedConfig):
        return baselines.generate_hf_assisted(target, draft, prompt, T, method, eos_token_id)
    if isinstance(method, baselines.StreamingConfig):
        return baselines.generate_streaming_spec(target, draft, prompt, T, method, eos_token_id)
    return generate_speculative(target, draft, prompt, T, method, kv_mode, eos_token_id)
