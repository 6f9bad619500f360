"""Decoding loops over runners: autoregressive, and one speculative loop for every tree method.

State invariant of the speculative loop: ``ids`` holds the prompt and every committed token; the target
cache holds ``ids[:-1]``; ``ids[-1]`` (the pending token) is the root of the next draft tree, so its KV
entry comes out of the verification forward and no committed token is ever re-run through the target
(``kv_mode="gather"``). ``kv_mode="rebuild"`` is the paper's rollback: crop to the prefix and forward the
committed path again. AR keeps the same prefill (``prompt[:-1]``, then the last prompt token as its first
step), so in low precision AR and the speculative loop differ only where batch shapes differ.

Positions are cache-relative (``runner.length``): equal to absolute positions, except under a
StreamingLLM ``Window``, which evicts old slots after each draft and each commit.

A draft that reads the target's hidden states (an EAGLE-3 head, ``Runner.reads_features``) gets them through
``FeatureLink``: the target keeps them from the forwards it runs anyway, and the draft is handed the prompt's
after prefill and the accepted path's after each verification (``Runner.observe_target``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor

from .drafter import DraftState, draft_tree
from .policies.base import DraftPolicy, Outcome, Session
from .result import GenerationResult, IterationLog
from .engines.runner import Runner, check_pair, check_supported, context_limit, rotary_inv_freq, vocab_rows
from .engines.hf import as_runner
from .sampling import Sampling, draw, target_probs, verify_sampled
from .tree import Tree, copy_outcomes, select_path
from .validate import is_int

KV_MODES = ("gather", "rebuild")


@dataclass(frozen=True)
class Options:
    """How to decode, beyond the method. ``kv_mode``: commit by gathering the accepted path's KV entries or by
    re-running it (``KV_MODES``); ``eos_token_id``: stop after it (None: exactly T tokens); ``record_trees``: keep
    the first that many drafted trees; ``sampling``: greedy, or the target's law at a temperature
    (``sampling.Sampling``); ``generator``: every random draw (on the target's device; at temperature > 0
    without one, a generator seeded once from torch's global generator); ``session``: state a drafting policy may
    keep across the generations of one run (``policies.Session``: ``DynaTreeConfig.history_scope="prompt"``; None:
    none kept)."""

    kv_mode: str = "gather"
    eos_token_id: int | None = None
    record_trees: int = 0
    sampling: Sampling = Sampling()
    generator: torch.Generator | None = None
    session: Session | None = None

    def rng(self, device: torch.device) -> torch.Generator | None:
        """The generator the draws use (None when greedy)."""
        if self.sampling.greedy or self.generator is not None:
            return self.generator
        return torch.Generator(device).manual_seed(int(torch.randint(2**62, (1,))))


@dataclass(frozen=True)
class Window:
    """StreamingLLM's cache policy: keep ``n_sink`` attention sinks plus the most recent slots,
    ``cache_size`` in all; kept keys are re-rotated to their new positions by the runner."""

    cache_size: int
    n_sink: int
    span: int = 1  # most slots a verification adds beyond cache_size (a chain of K: K + 1)

    def evict(self, runner: Runner, coming: int = 0) -> None:
        """Drop the oldest slots after the sinks, so that ``coming`` more fit within ``cache_size``."""
        n = runner.length + coming - self.cache_size
        if n > 0:
            runner.evict(self.n_sink, n)


def clock(device: torch.device) -> float:
    """Wall-clock seconds, after waiting for the device to finish queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def check_inputs(target, draft, prompt, T, opts: Options, *, window: Window | None = None) -> Tensor:
    """Validate every argument of a decoder with a message naming it; returns the prompt as a 1-D long
    tensor on the target's device (a list or tuple of ints is accepted)."""
    kv_mode, eos_token_id = opts.kv_mode, opts.eos_token_id
    runner = as_runner(target)
    model = runner.model
    if runner.vocab is not None:
        raise ValueError("the target runner scores only a subset of the vocabulary (vocab=...): a subset head is "
                         "for drafts; the target must score every token to verify exactly")
    device = next(model.parameters()).device
    if isinstance(prompt, (list, tuple)):
        if not all(is_int(x) for x in prompt):
            raise TypeError("prompt must be a 1-D tensor or a list of token ids (ints)")
        prompt = torch.tensor(list(prompt), dtype=torch.long)
    if not isinstance(prompt, Tensor):
        raise TypeError(f"prompt must be a 1-D tensor or a list of token ids, got {type(prompt).__name__}")
    if prompt.dtype.is_floating_point or prompt.dtype.is_complex or prompt.dtype == torch.bool:
        raise TypeError(f"prompt must hold integer token ids, got dtype {prompt.dtype}")
    if prompt.dim() != 1 or prompt.numel() < 1:
        raise ValueError(f"prompt must be a non-empty 1-D tensor of token ids, got shape {tuple(prompt.shape)}")
    V = vocab_rows(model)
    lo, hi = int(prompt.min()), int(prompt.max())
    if lo < 0 or hi >= V:
        raise ValueError(f"prompt holds token id {lo if lo < 0 else hi}, outside the target's vocabulary [0, {V})")
    if not is_int(T) or T < 1:
        raise ValueError(f"T (new tokens) must be an integer >= 1, got {T!r}")
    T = int(T)
    if kv_mode not in KV_MODES:
        raise ValueError(f"kv_mode must be one of {KV_MODES}, got {kv_mode!r}")
    if eos_token_id is not None and (not is_int(eos_token_id) or not 0 <= eos_token_id < V):
        raise ValueError(f"eos_token_id must be None or a token id in [0, {V}), got {eos_token_id!r}")
    if not is_int(opts.record_trees) or opts.record_trees < 0:
        raise ValueError(f"record_trees must be an integer >= 0, got {opts.record_trees!r}")
    if opts.generator is not None and not isinstance(opts.generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(opts.generator).__name__}")
    models = [("target", model)] + ([("draft", as_runner(draft).model)] if draft is not None else [])
    for name, m in models:
        need = prompt.numel() + T
        if window is not None:
            need = min(need, window.cache_size + window.span)
        check_supported(m, name, tree=draft is not None, seq_len=need)
        if window is not None:
            rotary_inv_freq(m)  # StreamingLLM re-rotates keys: refuse models without RoPE up front
        limit = context_limit(m)
        if limit is not None and need > limit:
            if window is not None:
                raise ValueError(f"StreamingLLM cache_size ({window.cache_size}) + {window.span} verified tokens "
                                 f"exceeds the {name} context of {limit} positions; lower cache_size to at most "
                                 f"{limit - window.span}")
            raise ValueError(f"prompt ({prompt.numel()} tokens) + T ({T}) exceeds the {name} context of "
                             f"{limit} positions: {room_advice(prompt.numel(), T, limit)}")
    if draft is not None:
        check_pair(model, as_runner(draft).model)
    return prompt.to(device)


def room_advice(prompt_len: int, T: int, limit: int) -> str:
    """What fits a context of ``limit`` positions: a shorter prompt, or fewer new tokens, whichever can."""
    ways = [f"shorten the prompt to at most {limit - T} tokens"] if limit - T >= 1 else []
    ways += [f"lower T to at most {limit - prompt_len}"] if limit - prompt_len >= 1 else []
    return " or ".join(ways)


def cut(new: list[int], room: int, eos: int | None) -> tuple[list[int], bool]:
    """Clip a commit to the remaining budget and at the first EOS; report whether generation ends."""
    if eos is not None and eos in new:
        new = new[: new.index(eos) + 1]
        return new[:room], True
    return new[:room], len(new) >= room


def prefill(runner: Runner, ids: Tensor, window: Window | None = None) -> int:
    """Feed ``ids`` into an empty cache; returns forwards used. Under StreamingLLM a prompt longer than the window
    goes in chunks of half its recent slots, each after evicting the room it needs (StreamingLLM's evict for
    space): the cache never holds more than ``cache_size`` slots, and each chunk sees half a window before it."""
    runner.reset()
    if ids.numel() == 0:
        return 0
    fits = window is None or ids.numel() <= window.cache_size
    step = ids.numel() if fits else max(1, (window.cache_size - window.n_sink) // 2)
    n = 0
    for s in range(0, ids.numel(), step):
        chunk = ids[s:s + step]
        if window is not None:
            window.evict(runner, chunk.numel())
        runner.forward(chunk, runner.length + torch.arange(chunk.numel(), device=ids.device), last_only=True)
        n += 1
    return n


@torch.no_grad()
def generate_ar(target, prompt, T: int, opts: Options = Options()) -> GenerationResult:
    """Autoregressive decoding with a KV cache, one target forward per token: greedy, or sampled from the
    target's law (``opts.sampling``)."""
    tgt = as_runner(target)
    prompt = check_inputs(tgt, None, prompt, T, opts)
    dev, gen, eos = prompt.device, opts.rng(prompt.device), opts.eos_token_id
    t0 = clock(dev)
    res = GenerationResult([], engine=tgt.engine, target_forwards=prefill(tgt, prompt[:-1]))
    res.prefill_s = clock(dev) - t0
    tok = prompt[-1:]
    if opts.sampling.greedy:  # the first token alone (its time is the TTFT), then the rest in one go
        out = [tgt.greedy_steps(tok, 1, eos)]
        res.ttft_s = clock(dev) - t0
        if T > 1 and (eos is None or int(out[0]) != eos):
            out.append(tgt.greedy_steps(out[0], T - 1, eos))
    else:
        out = []
        for i in range(int(T)):
            pos = tgt.length + torch.zeros(1, dtype=torch.long, device=dev)
            tok = draw(target_probs(tgt.forward(tok, pos, last_only=True), opts.sampling), gen)
            out.append(tok)
            if i == 0:
                res.ttft_s = clock(dev) - t0
            if eos is not None and int(tok) == eos:  # the only per-token host sync, and only when asked
                break
    res.tokens = torch.cat(out).tolist()
    res.wall_s = clock(dev) - t0
    res.target_forwards += len(res.tokens)
    return res


class GreedyVerifier:
    """Verification at temperature 0: the target's argmax after every node; the longest agreeing path."""

    generator = None  # greedy decoding draws nothing

    def verify(self, target: Runner, tree: Tree) -> Tensor:
        """Target argmax after every tree node, [n+1], from one forward over the BFS-serialized tree: node i
        sits at position ``length + depth(i)`` and sees the cache plus its ancestors and itself (a chain is
        plain causal attention: no mask)."""
        start = target.length
        return target.argmax(tree.tokens, start + tree.depth, None if tree.is_chain else tree.anc, start)

    def accept(self, tree: Tree, target_next: Tensor) -> tuple[Tensor, int]:
        path = select_path(tree, target_next)
        return path, int(target_next[path[-1]])


class SampledVerifier:
    """Verification at temperature > 0: the target's law after every node (one forward, as greedy), then the
    lossless rule for drawn and chosen children (``sampling.verify_sampled``)."""

    def __init__(self, sampling: Sampling, generator: torch.Generator, draft: Runner):
        self.sampling, self.generator, self.draft_vocab = sampling, generator, draft.vocab

    def verify(self, target: Runner, tree: Tree) -> Tensor:
        start = target.length
        logits = target.forward(tree.tokens, start + tree.depth, None if tree.is_chain else tree.anc, start)
        return target_probs(logits, self.sampling)

    def accept(self, tree: Tree, p: Tensor) -> tuple[Tensor, int]:
        return verify_sampled(tree, p, self.generator, self.draft_vocab)


def verifier(opts: Options, draft: Runner, device) -> "GreedyVerifier | SampledVerifier":
    """The verification of ``opts.sampling``."""
    if opts.sampling.greedy:
        return GreedyVerifier()
    return SampledVerifier(opts.sampling, opts.rng(device), draft)


def commit(target: Runner, start: int, tree: Tree, path: Tensor, kv_mode: str) -> int:
    """Keep the accepted ``path``'s KV entries after slot ``start`` and drop the rest of the tree; returns the
    target forwards it took (``rebuild``: crop and forward the path again)."""
    if kv_mode == "gather":
        target.commit(start, path)
        return 0
    target.truncate(start)
    target.forward(tree.tokens[path], start + torch.arange(path.numel(), device=path.device), last_only=True)
    return 1


class FeatureLink:
    """The target's hidden states of committed tokens, handed to a draft that reads them (see module docstring);
    for any other draft it does nothing and asks the target for nothing."""

    def __init__(self, target: Runner, draft: Runner, window: Window | None):
        self.target, self.draft, self.on = target, draft, bool(draft.reads_features)
        if self.on and window is not None:
            raise ValueError("a draft on the target's hidden states (reads_features) cannot follow a StreamingLLM "
                             "window (its features of evicted tokens are gone); use it without a window")
        if self.on:
            target.keep_features(draft.reads_features)

    def prefilled(self) -> None:
        """After prefill (and the draft's reset): the prompt's rows, positions from 0."""
        if self.on and self.target.length:
            self.draft.observe_target(self.target.features, 0)

    def verified(self, path: Tensor, start: int) -> None:
        """Right after a verification from cache slot ``start``: the accepted ``path``'s rows (root first)."""
        if self.on:
            self.draft.observe_target(self.target.features[path], start)


def position_limit(target: Runner, draft: Runner, window: Window | None) -> int:
    """The most positions a sequence may reach in both models (none under a StreamingLLM window)."""
    limits = [x for x in (context_limit(target.model), context_limit(draft.model)) if x is not None]
    return min(limits) if limits and window is None else 1 << 62


@torch.no_grad()
def speculative_decode(target, draft, prompt, T: int, policy: DraftPolicy, *, opts: Options = Options(),
                       window: Window | None = None) -> GenerationResult:
    """Speculative decoding with draft trees shaped by ``policy``: greedy (in fp32 its output equals
    ``generate_ar``'s) or sampled (the target's law exactly; ``sampling``)."""
    tgt, drf = as_runner(target), as_runner(draft)
    prompt = check_inputs(tgt, drf, prompt, T, opts, window=window)
    limit, dev = position_limit(tgt, drf, window), prompt.device
    check, link = verifier(opts, drf, dev), FeatureLink(tgt, drf, window)
    gen = check.generator
    res = GenerationResult([], engine=tgt.engine, log=IterationLog())
    t0 = clock(dev)
    res.target_forwards = prefill(tgt, prompt[:-1], window)
    state, ids, done = DraftState(), prompt, False
    if window is None:
        drf.reset()
    else:  # the draft reads the prompt inside its window too (its first tree would feed it whole)
        prefill(drf, prompt[:-1], window)
        state.consumed = prompt.numel() - 1
    link.prefilled()  # a window refuses a draft on features, so this sees the whole prompt
    res.prefill_s = clock(dev) - t0
    while not done:
        room = int(T) - len(res.tokens)
        times = [clock(dev)]
        # 1. draft: nodes deeper than room - 1 could never be committed (the bonus fills the last slot)
        tree, n_fwd = draft_tree(drf, state, ids, policy, max_depth=min(room - 1, limit - ids.numel()),
                                 sampling=opts.sampling, generator=gen)
        tree = policy.trim(tree, n_fwd)
        if window is not None:
            window.evict(drf)
        times.append(clock(dev))
        # 2. verify: one target forward over the whole tree
        start = tgt.length
        verified = check.verify(tgt, tree)
        times.append(clock(dev))
        # 3. accept a path and its bonus token; 4. commit the path's KV entries
        path, bonus = check.accept(tree, verified)
        link.verified(path, start)
        new_t = tree.tokens[path[1:]].tolist() + [bonus]
        res.target_forwards += 1 + commit(tgt, start, tree, path, opts.kv_mode)
        if window is not None:
            window.evict(tgt)
        new, done = cut(new_t, room, opts.eos_token_id)
        met, taken = copy_outcomes(tree, path, new_t)
        policy.observe(Outcome(path.numel() - 1, tree.levels, met, taken))
        if len(res.trees) < opts.record_trees:
            res.trees.append(tree.record(path, ids.numel() - 1))
        ids = torch.cat([ids, torch.tensor(new, device=dev)])
        res.tokens += new
        times.append(clock(dev))
        res.log.add(tree, path.numel() - 1, len(new), n_fwd, times)
        if len(res.log.nodes) == 1:
            res.ttft_s = times[-1] - t0
    policy.finish(len(res.tokens), len(res.log.nodes))
    res.decisions = policy.trace()
    res.wall_s = clock(dev) - t0
    return res
