"""Context lookup for a draft: the token that followed the longest earlier match of the current suffix.

Why: a small target's greedy continuations fall into loops (a large share of a continuation's positions end
an n-gram already seen in the prompt or the continuation), and a small draft network copies poorly, where
"the token that followed the last occurrence" is right most of the time (``results/cpu/pair.json`` measures
both). So the draft's distribution is mixed with a point mass on that token (prompt lookup decoding, as in
REST or SAM-Decoding's suffix matching):

    p(x) = (1 - w[n]) * p_draft(x) + w[n] * [x == copy]

where ``n`` (capped at ``max_n``) is the length of the longest suffix of the row's context that occurred
earlier in the committed tokens, and ``w[n]`` is fitted on text no experiment uses (maximum likelihood of
the target's greedy token; ``train.lookup_fit``). Verification is untouched, so every decoder stays
exact; only what gets drafted changes.

``LookupRunner`` wraps a draft runner: it mirrors the tokens of the inner cache's slots, indexes the committed ones
(forwards without a ``tree_start``: the draft's level-0 feed and prefill) and mixes the copy mass into the
log-probabilities it returns (at the drafting temperature: ``logprobs``). ``mix`` is the same rule on a whole
teacher-forced sequence (agreement and calibration).
"""
from __future__ import annotations

import json
import math
from array import array
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..engines.runner import Draft, Runner, vocab_rows


MAX_MATCH = 64  # longest match a lookup searches (the drafter passes it that much committed context)


@dataclass(frozen=True)
class LookupConfig:
    """``weights[n - 1]``: the copy token's share of the mixture after a match of ``n`` tokens
    (n = 1..len(weights) <= ``MAX_MATCH``: matches are searched up to that length). Each weight lies in [0, 1)."""

    weights: tuple

    def __post_init__(self) -> None:
        w = self.weights
        if not isinstance(w, tuple) or not w or len(w) > MAX_MATCH:
            raise ValueError(f"lookup weights must be a non-empty tuple of at most {MAX_MATCH} floats, got {w!r}")
        for x in w:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0.0 <= x < 1.0 or math.isnan(x):
                raise ValueError(f"every lookup weight must be a number in [0, 1), got {x!r}")

    @property
    def max_n(self) -> int:
        return len(self.weights)

    @staticmethod
    def load(path: Path) -> "LookupConfig":
        """From a ``lookup.json`` beside a draft's weights (``{"weights": [...]}``)."""
        if not Path(path).exists():
            raise ValueError(f"the draft has no context lookup ({path} is missing); set draft_lookup=False, or "
                             "fit one with python -m dynatree_lib build-draft --lookup-only")
        return LookupConfig(tuple(float(x) for x in json.loads(Path(path).read_text())["weights"]))


class NGramIndex:
    """For n = 1..max_n, the token that followed the latest occurrence of every n-gram of a token stream."""

    def __init__(self, max_n: int):
        self.max_n = max_n
        self.tokens: list[int] = []
        self.next: list[dict] = [dict() for _ in range(max_n + 1)]  # [n]: n-gram tuple -> next token

    def extend(self, tokens: list[int]) -> None:
        s = self.tokens
        for x in tokens:
            t = len(s)
            for n in range(1, min(self.max_n, t) + 1):
                self.next[n][tuple(s[t - n:])] = x
            s.append(x)

    def match(self, context: list[int]) -> tuple[int, int]:
        """(n, token) for the longest suffix of ``context`` (n <= max_n) seen in the stream; (0, -1) if none."""
        for n in range(min(self.max_n, len(context)), 0, -1):
            x = self.next[n].get(tuple(context[-n:]))
            if x is not None:
                return n, x
        return 0, -1


def mix_rows(logits: Tensor, cols: Tensor, weights: Tensor) -> Tensor:
    """Log-probabilities [r, V] of ``(1 - w) * softmax(logits) + w * onehot(col)`` for every row (fp32);
    rows with weight 0 are the draft's own log-softmax."""
    out = torch.log_softmax(logits, dim=-1, dtype=torch.float32)  # from bf16 logits: no fp32 copy of them first
    out += torch.log1p(-weights)[:, None]  # in place: the rows' only fp32 buffer
    r = torch.arange(out.shape[0])
    out[r, cols] = torch.logaddexp(out[r, cols], weights.log())
    return out


def column_of(vocab: Tensor | None, n_vocab: int) -> Tensor:
    """Map token id -> logit column (-1 for a token the head does not score)."""
    if vocab is None:
        return torch.arange(n_vocab)
    col = torch.full((n_vocab,), -1, dtype=torch.long)
    col[vocab.cpu()] = torch.arange(vocab.numel())
    return col


def matches(ids: list[int], start: int, end: int, max_n: int):
    """Teacher-forced matches: ``(t, n, token)`` for every row t in ``start..end - 1`` whose context
    ``ids[:t + 1]`` ends with an n-gram seen before (n the longest, up to ``max_n``). The index holds
    ``ids[:t + 1]`` as the loop's does at a tree's root (there, drafted tokens deeper in the tree are not
    indexed)."""
    idx = NGramIndex(max_n)
    idx.extend(ids[:start])
    for t in range(start, end):
        idx.extend([ids[t]])  # the loop's index holds the tree's root (its last committed token) too
        n, x = idx.match(ids[max(0, t + 1 - max_n):t + 1])
        if n:
            yield t, n, x


def mix(logp: Tensor, ids: list[int], start: int, cfg: LookupConfig, vocab: Tensor | None = None) -> Tensor:
    """Teacher-forced: the mixture's log-probabilities at rows ``start..`` of ``logp`` ([n, V'] over the
    columns ``vocab``), row t predicting ``ids[t + 1]`` from ``ids[:t + 1]`` (``matches``)."""
    n_vocab = max(ids) + 1 if vocab is None else max(int(vocab.max()), max(ids)) + 1
    col_of = column_of(vocab, n_vocab)
    rows, cols, ws = [], [], []
    for t, n, x in matches(ids, start, logp.shape[0], cfg.max_n):
        if col_of[x] >= 0:
            rows.append(t), cols.append(int(col_of[x])), ws.append(cfg.weights[n - 1])
    out = logp[start:].clone()
    if rows:
        r = torch.tensor(rows) - start
        out[r] = mix_rows(logp[rows], torch.tensor(cols), torch.tensor(ws))
    return out


class LookupRunner(Draft):
    """A draft ``Runner`` whose distribution carries the context lookup's copy mass (see module docstring)."""

    def __init__(self, inner: Runner, cfg: LookupConfig):
        self.inner, self.cfg = inner, cfg
        self.slots: list[int] = []  # token in each cache slot of the inner runner
        self.index = NGramIndex(cfg.max_n)
        # each target id's draft column (-1: none), 8 bytes an entry (a list of Python ints takes several times that)
        self._col = array("q", column_of(inner.vocab, vocab_rows(inner.model)).numpy().tobytes())
        self._w = list(cfg.weights)

    has_lookup = True
    model = property(lambda self: self.inner.model)
    length = property(lambda self: self.inner.length)
    engine = property(lambda self: self.inner.engine)
    vocab = property(lambda self: self.inner.vocab)
    reads_features = property(lambda self: self.inner.reads_features)
    depth_limit = property(lambda self: self.inner.depth_limit)

    def observe_target(self, features: Tensor, start: int) -> None:
        self.inner.observe_target(features, start)

    def reset(self) -> None:
        self.inner.reset()
        self.slots = []
        self.index = NGramIndex(self.cfg.max_n)

    def forward(self, tokens: Tensor, positions: Tensor, visible: Tensor | None = None,
                tree_start: int | None = None, last_only: bool = False) -> Tensor:
        """The mixture's log-probabilities at temperature 1 (valid logits: the drafter ranks by them)."""
        return self.logprobs(tokens, positions, visible, tree_start, last_only)

    def logprobs(self, tokens: Tensor, positions: Tensor, visible: Tensor | None = None, tree_start: int | None = None,
                 last_only: bool = False, *, temperature: float = 1.0) -> Tensor:
        """The draft network's log-probabilities at ``temperature``, mixed with the copy of each row's lookup
        (rows whose context matches nothing keep the network's)."""
        logits = self.inner.forward(tokens, positions, visible, tree_start, last_only)
        scaled = logits if temperature == 1.0 else logits.float() / temperature
        rows, cols, ws = self._match_rows(tokens.tolist(), visible, tree_start, last_only)
        if not rows:
            return torch.log_softmax(scaled, dim=-1, dtype=torch.float32)
        cols, ws = torch.tensor(cols), torch.tensor(ws)
        if len(rows) == scaled.shape[0]:  # every row matched (the usual case): no gather or scatter
            return mix_rows(scaled, cols, ws)
        out = torch.log_softmax(scaled, dim=-1, dtype=torch.float32)
        r = torch.tensor(rows)
        out[r] = mix_rows(scaled[r], cols, ws)
        return out

    def _match_rows(self, new: list[int], visible: Tensor | None, tree_start: int | None, last_only: bool):
        """Record the new tokens' slots (indexing committed ones: forwards without a ``tree_start``) and find
        each returned row's copy: (rows, their copy's column, its weight)."""
        base = len(self.slots)
        self.slots += new
        if tree_start is None:
            self.index.extend(new)
        q = len(new)
        vis = None if visible is None else visible.tolist()
        out_rows, cols, ws = [], [], []
        for r, i in enumerate(range(q - 1, q) if last_only else range(q)):
            if vis is None:
                ctx = self.slots[max(0, base + i + 1 - self.cfg.max_n):base + i + 1]
            else:
                tail = [self.slots[tree_start + j] for j, v in enumerate(vis[i]) if v]
                ctx = self.slots[max(0, tree_start - self.cfg.max_n):tree_start] + tail
            c = self.lookup(ctx)
            if c is not None:
                out_rows.append(r), cols.append(self._col[c[0]]), ws.append(c[1])
        return out_rows, cols, ws

    def lookup(self, context: list[int]) -> tuple[int, float] | None:
        """The copy token after ``context`` (committed tokens, then drafted ones) and its mixture weight, or
        None where the context matches nothing earlier or the head does not score the copy. The drafter
        needs no draft forward for a node whose copy weight is high (``drafter.draft_tree``)."""
        n, x = self.index.match(context[-self.cfg.max_n:])
        return (x, self._w[n - 1]) if n and self._col[x] >= 0 else None

    def truncate(self, length: int) -> None:
        self.inner.truncate(length)
        del self.slots[length:]

    def commit(self, start: int, keep: Tensor) -> None:
        self.inner.commit(start, keep)
        self.slots = self.slots[:start] + [self.slots[start + k] for k in keep.tolist()]

    def evict(self, n_sink: int, n_drop: int) -> None:
        """The slots go; the index keeps their n-grams (history a lookup may still copy from)."""
        self.inner.evict(n_sink, n_drop)
        del self.slots[n_sink:n_sink + n_drop]
