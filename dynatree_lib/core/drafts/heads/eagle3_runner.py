"""The EAGLE-3 head (``eagle3``) as a draft ``Runner``: the level-batched drafter drives it as any draft.

Slots are the drafter's: slot s holds the token at position p (slot 0: the first token). The head's entry at
that slot is the pair (input hidden state, that token) at RoPE position p - 1 (EAGLE-3 places a pair at its
feature's position), keys and values in the runner's own cache:

- a committed token (a forward without ``tree_start``: the drafter's catch-up) pairs with the target's hidden
  states of the token before it, fused by ``fc``; the loop hands those over after prefill and after each
  verification (``observe_target``, by position);
- a drafted node (a forward with ``tree_start``) pairs with its parent's output (the layer's output at the parent's
  slot: the committed slot before the tree for a child of the root), since the target has not seen it.

A drafted node reads only the output of the last committed slot or of a node of its own tree, so the outputs
are kept in a ring of ``tree_slots + 1`` rows (slot s in row s mod that), not one row per slot: the last committed
slot and a tree's nodes never share a row, and a tree of more nodes is refused.

The first token has no hidden state before it: its slot is never attended to (its own output, where a one-token
prompt needs one, comes from a zero input). Nodes fed together whose parents are among them (a chain fed as one
forward, or nodes that waited for a lookup-skipped level) run in as many waves as their depths need, so every
node reads its parent's output. ``truncate`` and ``commit`` move or drop entries exactly as the other runners move
their cache, so the cache always holds the committed tokens' pairs, never a rejected node's.

This runner computes eagerly (the fp32 exactness path, and any head the kernels do not take);
``eagle3_fused.FusedEagle3Runner`` keeps its bookkeeping and runs each wave as one bf16 C++ call.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .eagle3 import Eagle3Head, attend
from .base import HeadRunner, waves
from ...engines.runner import additive_mask, tree_parents


class Eagle3Runner(HeadRunner):
    """An ``Eagle3Head`` with a cache of ``max_len + tree_slots`` slots (default max_len: the head's context) and
    the layer's outputs in a ring of ``tree_slots + 1`` rows (module docstring)."""

    engine = "eagle3"

    def __init__(self, head: Eagle3Head, max_len: int | None = None, tree_slots: int = 320):
        c, w = head.cfg, head.fc.weight
        self.model = self.head = head
        self.vocab = head.vocab()
        self.reads_features = c.aux_layers
        self.init_slots((max_len or c.max_positions) + tree_slots, 3 * c.target_hidden, w.dtype, w.device)
        self.k = torch.zeros(c.kv_heads, self.max_len, c.head_dim, dtype=w.dtype, device=w.device)
        self.v = torch.zeros_like(self.k)
        self.out = torch.zeros(tree_slots + 1, c.hidden, dtype=w.dtype, device=w.device)  # outputs, a ring of slots

    @torch.no_grad()
    def forward(self, tokens: Tensor, positions: Tensor, visible: Tensor | None = None,
                tree_start: int | None = None, last_only: bool = False) -> Tensor:
        """Logits over the draft vocabulary [q, V'] ([1, V'] if ``last_only``) of the new slots' pairs."""
        q = tokens.numel()
        slots = self.new_slots(positions)
        mask = self._mask(q, visible, tree_start)
        if tree_start is not None and self.length + q - tree_start >= len(self.out):
            raise ValueError(f"a tree of {self.length + q - tree_start} nodes is more than the {len(self.out) - 1} "
                             f"tree slots of {self.what}: build its runner with a larger tree_slots, or draft "
                             "smaller trees")
        if tree_start is None:
            out = self._committed(tokens, positions, slots, mask, last_only)
            self.fed()
        else:
            parents = self._parents(positions, visible, tree_start)
            out = self._drafted(tokens, positions, slots, mask, parents, last_only=last_only)
        self.length += q
        return out

    def _committed(self, tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor, last_only: bool) -> Tensor:
        """Logits of committed rows, each on the target's features of the token before it."""
        out = self._run(list(range(tokens.numel())), tokens, positions, self._committed_inputs(positions), mask)
        return self.head.logits(out[-1:] if last_only else out)

    def _drafted(self, tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor, parents: list[int],
                 *, last_only: bool) -> Tensor:
        """Logits of drafted rows, each on its parent's output, a wave at a time (parents before children)."""
        out = torch.empty(tokens.numel(), self.out.shape[1], dtype=self.out.dtype, device=self.out.device)
        for wave in waves(parents, self.length):
            out[wave] = self._run(wave, tokens, positions, self.out[self.ring([parents[r] for r in wave])], mask)
        return self.head.logits(out[-1:] if last_only else out)

    def ring(self, slots) -> Tensor:
        """The rows of ``out`` that hold ``slots``' outputs."""
        return torch.as_tensor(slots, device=self.out.device) % len(self.out)

    def _committed_inputs(self, positions: Tensor) -> Tensor:
        """The fused target features of the token before each committed row (zeros for the first token)."""
        before = positions - 1
        return torch.where((before >= 0)[:, None], self.head.fc(self.features_of(before)), 0.0)

    def _committed_rows(self, positions: Tensor) -> Tensor:
        """Each committed row's row of ``target``: the features of the token before it (-1 for the first)."""
        return self.feature_rows(positions - 1)

    def _parents(self, positions: Tensor, visible: Tensor | None, tree_start: int) -> list[int]:
        """Each new drafted row's parent slot: the visible slot one position up, else the last committed slot."""
        return tree_parents(self.pos, self.length, positions, visible, tree_start)

    def _mask(self, q: int, visible: Tensor | None, tree_start: int | None) -> Tensor:
        """[q, length + q] additive mask (committed prefix, then causal or ``visible``); slot 0 always hidden."""
        if visible is None:
            visible, tree_start = torch.ones(q, q, dtype=torch.bool, device=self.k.device).tril(), self.length
        mask = additive_mask(visible, tree_start, self.length + q, self.k.dtype)
        mask[:, 0] = torch.finfo(self.k.dtype).min
        return mask

    def _run(self, rows: list[int], tokens: Tensor, positions: Tensor, hidden: Tensor, mask: Tensor) -> Tensor:
        """The layer over new rows ``rows`` (their inputs ``hidden``): keys and values to their slots, the outputs
        kept in the ring (the last ring-size rows: the earlier ones' rows are theirs) and returned."""
        idx = torch.tensor(rows, device=tokens.device)
        slots, total = self.length + idx, self.length + tokens.numel()
        qh, k, v = self.head.project(tokens[idx], hidden, positions[idx] - 1)
        self.k[:, slots], self.v[:, slots] = k, v
        attended = attend(qh, self.k[:, :total], self.v[:, :total], mask[idx])
        out = self.head.finish(attended, hidden)
        self.out[self.ring(slots[-len(self.out):])] = out[-len(self.out):]
        return out

    def move(self, src: Tensor, dst: slice) -> None:
        super().move(src, dst)
        self.k[:, dst], self.v[:, dst] = self.k[:, src], self.v[:, src]
        self.out[self.ring(range(dst.start, dst.stop))] = self.out[self.ring(src)]
