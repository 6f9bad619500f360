"""Medusa and Hydra heads (``core.drafts.heads.mlp``) as a draft ``Runner``: the level-batched drafter drives them as
any draft, and the tree policies (fixed tree, DynaTree, TALON, ...) build Medusa-style trees over them.

The heads hold no cache of their own: what a row's logits need is bookkeeping, kept per slot as the drafter's
slots are (slot s holds the token at position p):

- a committed token (a forward without ``tree_start``: the drafter's catch-up) is the root of the tree drafted
  after it: depth 0, its path the token itself; its logits are head 0's on the target's last hidden state of the
  token before it (zeros for the first token of a sequence: no state precedes it);
- a drafted node (a forward with ``tree_start``) hangs under its parent (the visible slot one position up, else
  the root: the last committed slot): its depth is one more and its path the parent's plus its token; its logits
  are head ``depth``'s on the root's hidden state (and, for Hydra, on the path's embeddings).

The loop hands the target's hidden states over after prefill and after each verification (``observe_target``, by
position), as for an EAGLE-3 head. With K heads the runner drafts K levels (``depth_limit``); the drafter grows no
node deeper. ``truncate`` and ``commit`` move or drop the bookkeeping exactly as other runners move their caches.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .base import waves
from .mlp import MLPHeads
from .base import HeadRunner
from ...engines.runner import tree_parents


class MLPHeadRunner(HeadRunner):
    """``MLPHeads`` over ``max_len + tree_slots`` slots of bookkeeping (default max_len: the heads' context)."""

    def __init__(self, heads: MLPHeads, max_len: int | None = None, tree_slots: int = 320):
        c, w = heads.cfg, heads.lm_heads[0].weight
        self.model = self.heads = heads
        self.engine = c.kind
        self.vocab = heads.vocab()
        self.reads_features = (c.feature_layer,)
        self.depth_limit = c.heads
        self.what = f"the {c.kind} heads"
        self.init_slots((max_len or c.max_positions) + tree_slots, c.hidden, w.dtype, w.device)
        self.depth = torch.zeros_like(self.pos)  # each slot's depth below its tree's root (committed: 0)
        self.path = torch.zeros(self.max_len, c.heads + 1, dtype=torch.long, device=w.device)  # root .. slot's token

    @torch.no_grad()
    def forward(self, tokens: Tensor, positions: Tensor, visible: Tensor | None = None,
                tree_start: int | None = None, last_only: bool = False) -> Tensor:
        """Logits over the draft vocabulary [q, V'] ([1, V'] if ``last_only``) of the new slots."""
        slots = self.new_slots(positions)
        if tree_start is None:
            self.depth[slots] = 0
            self.path[slots, 0] = tokens
        else:
            self._place(tokens, slots, tree_parents(self.pos, self.length, positions, visible, tree_start))
        self.length += slots.numel()
        logits = self._logits(slots[-1:] if last_only else slots)
        if tree_start is None:
            self.fed()
        return logits

    def _place(self, tokens: Tensor, slots: Tensor, parents: list[int]) -> None:
        """Depth and path of drafted rows under their ``parents`` (in waves: a parent among them goes first)."""
        for wave in waves(parents, self.length):
            idx = torch.tensor(wave, device=tokens.device)
            up = torch.tensor([parents[r] for r in wave], device=tokens.device)
            depth = self.depth[up] + 1
            if int(depth.max()) >= self.heads.cfg.heads + 1:
                raise ValueError(f"a node at depth {int(depth.max())}: {self.heads.cfg.heads} heads draft "
                                 f"{self.heads.cfg.heads} levels (depth_limit)")
            self.depth[slots[idx]] = depth
            self.path[slots[idx]] = self.path[up]
            self.path[slots[idx], depth] = tokens[idx]

    def _logits(self, slots: Tensor) -> Tensor:
        """Each slot's head (its depth) on its root's hidden state (and path): [len(slots), V']."""
        depth = self.depth[slots]
        before = self.pos[slots] - depth - 1  # the position whose hidden state the root was drafted from
        hidden = self.features_of(before)
        out = hidden.new_empty(slots.numel(), self.heads.cfg.draft_vocab)
        for d in depth.unique().tolist():
            if d >= self.heads.cfg.heads:
                raise ValueError(f"a node at depth {d} has no head: {self.heads.cfg.heads} heads draft "
                                 f"{self.heads.cfg.heads} levels (depth_limit)")
            rows = (depth == d).nonzero().flatten()
            out[rows] = self.heads.head(d, hidden[rows], self.path[slots[rows]])
        return out

    def slot_rows(self) -> list[Tensor]:
        return [self.pos, self.depth, self.path]
