"""The EAGLE-3 head's step on the fused bf16 engine: one C++ call per draft forward, as the target's and v4's.

``Eagle3Runner`` runs the head eagerly (a dozen PyTorch calls a step, each with its own start-up: about a quarter of
the target's one-token forward on the cpu profile, against v4's 0.08 on the fused engine). ``FusedEagle3Runner``
keeps its slots, cache, parents and waves and runs each wave as one ``kernels.eagle3_step``: the one-call forward's
own code (``csrc/linear_bf16.cpp``, ``HeadRequest``) over the head's weights packed once (``PackedHead``), with
``fc`` over the target's features or a parent's output as the layer's input, read by row index (no gather here),
keys and values written to the head's cache and each row's output to its slot.

In bf16 it computes what the eager bf16 head computes up to rounding (its matmuls and attention sum in fp32 where
eager rounds intermediate products to bf16), so a draft may differ from the eager head's at a near-tie of two
logits; the target verifies every draft, so decoding stays the target's (bf16 AR on the batch-invariant fused
target). fp32 heads, and shapes or machines the kernels do not take, keep the eager runner (``head_runner``).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from . import kernels
from .eagle3 import Eagle3Head
from .eagle3_runner import Eagle3Runner, waves
from .ownership import ReleasedWeight


def fusable(head: Eagle3Head) -> bool:
    """Whether the kernels can run this head's step: bf16 on a CPU with AVX512-BF16, its sizes multiples of 16 and a
    head size the attention kernel takes."""
    c, w = head.cfg, head.fc.weight
    return (w.dtype == torch.bfloat16 and w.device.type == "cpu" and head.embed_tokens.dtype == torch.bfloat16
            and kernels.attention_takes(c.head_dim) and kernels.forward_takes(c.hidden, c.intermediate)
            and c.draft_vocab % 16 == 0 and c.target_hidden == c.hidden and kernels.available())


def head_runner(head: Eagle3Head, max_len: int | None = None, fused: bool = False) -> Eagle3Runner:
    """The head's draft runner: ``FusedEagle3Runner`` where ``fused`` is asked (the target runs the fused engine)
    and the kernels take the head (``fusable``; it takes over the head's weights), else the eager ``Eagle3Runner``."""
    return FusedEagle3Runner(head, max_len) if fused and fusable(head) else Eagle3Runner(head, max_len)


class PackedHead:
    """The head's weights as ``kernels.eagle3_step`` reads them, packed once (``kernels.pack``; the layer's in the
    one-call forward's stacked layout of one layer), with the runner's cache and outputs buffer (shared, not copied)
    and RoPE tables shifted by one row: row p holds position p - 1, where EAGLE-3 places the token at position p
    (the first token's pair at -1), computed as the eager head computes them. Unless ``keep``, the packed weights
    are the head's one copy (``release``)."""

    def __init__(self, head: Eagle3Head, runner: Eagle3Runner, keep: bool = False):
        c, L, pack = head.cfg, head.layer, lambda w: kernels.pack(w.detach().contiguous())
        a, m = L.self_attn, L.mlp
        self.embed = head.embed_tokens
        self.fc = pack(head.fc.weight)
        self.wqkv = pack(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))[None]
        self.wo, self.w2 = pack(a.o_proj.weight)[None], pack(m.down_proj.weight)[None]
        self.w13 = pack(torch.cat([m.gate_proj.weight, m.up_proj.weight]))[None]
        self.ln1 = torch.cat([L.input_layernorm.weight, L.hidden_norm.weight]).detach()[None]
        self.ln2 = L.post_attention_layernorm.weight.detach()[None]
        self.norm, self.head = head.norm.weight.detach(), pack(head.lm_head.weight)
        self.cos, self.sin = head.rope(torch.arange(-1, runner.max_len), head.fc.weight.dtype)
        self.k, self.v = runner.k.view(-1, c.head_dim), runner.v.view(-1, c.head_dim)  # [KV * slots, hd] rows
        self.out = runner.out
        self.H, self.KV, self.eps = c.heads, c.kv_heads, c.rms_eps
        if not keep:
            release(head, self.ln1[0])


def release(head: Eagle3Head, ln1: Tensor) -> None:
    """Hand the head's weights over to its ``PackedHead`` (``core.ownership``): every linear layer's weight released
    (the packed one is its copy), the two input norms views of the packed ``ln1`` [2d]."""
    for path, module in head.named_modules():
        if isinstance(module, nn.Linear):
            module._parameters["weight"] = ReleasedWeight(module.weight, f"{path}.weight", "a FusedEagle3Runner")
    layer, d = head.layer, head.cfg.hidden
    layer.input_layernorm.weight.data, layer.hidden_norm.weight.data = ln1[:d], ln1[d:]


class FusedEagle3Runner(Eagle3Runner):
    """``Eagle3Runner`` with each wave of its layer run by one ``kernels.eagle3_step`` (module docstring)."""

    engine = "eagle3+fused"

    def __init__(self, head: Eagle3Head, max_len: int | None = None, tree_slots: int = 320, keep_head: bool = False):
        super().__init__(head, max_len, tree_slots)
        self.net = PackedHead(head, self, keep_head)

    def _committed(self, tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor, last_only: bool) -> Tensor:
        """Committed rows in one call: the target's features of the token before each, through fc."""
        return self._step(tokens, positions, slots, mask, self._committed_rows(positions), self.net.fc, last_only)

    def _step(self, tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor, rows: Tensor,
              fc: Tensor | None, last_only: bool) -> Tensor:
        """One call over rows reading ``rows`` of the target's features (``fc``) or of the outputs buffer."""
        inputs = self.target if fc is not None else self.out
        return kernels.eagle3_step(tokens, positions, slots, mask, inputs, rows, self.net, fc, last_only)

    def _drafted(self, tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor, parents: list[int],
                 last_only: bool) -> Tensor:
        """Drafted rows on their ``parents``' outputs: one call when no parent is among them (a tree level), else one
        per wave, the logits put back in row order."""
        rows = torch.tensor(parents, device=tokens.device)
        order = waves(parents, self.length)
        if len(order) == 1:
            return self._step(tokens, positions, slots, mask, rows, None, last_only)
        out = torch.empty(tokens.numel(), self.head.cfg.draft_vocab, dtype=mask.dtype, device=mask.device)
        for wave in order:
            i = torch.tensor(wave, device=tokens.device)
            out[i] = self._step(tokens[i], positions[i], slots[i], mask[i], rows[i], None, False)
        return out[-1:] if last_only else out

    def _mask(self, q: int, visible: Tensor | None, tree_start: int | None) -> Tensor:
        """The eager runner's mask, but the first token's row sees its own slot: the kernel gives a row that sees no
        slot no weights at all, where eager's softmax over one hidden slot gives it weight 1 (a one-token prompt's
        row, the parent of the first drafts: the same result). In a longer prompt that row is never read."""
        mask = super()._mask(q, visible, tree_start)
        if self.length == 0:
            mask[0, 0] = 0
        return mask
