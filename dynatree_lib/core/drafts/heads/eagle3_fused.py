"""The EAGLE-3 head's step on the fused bf16 engine: one C++ call per draft forward, as the target's and v4's.

``Eagle3Runner`` runs the head eagerly (a dozen PyTorch calls a step, each with its own start-up, which costs more
than the head's own arithmetic on a CPU: ``head_cost.json`` measures both runners). ``FusedEagle3Runner``
keeps its slots, cache, parents and waves and runs each wave as one ``kernels.eagle3_step``: the one-call forward's
own code (``engines/csrc/linear_bf16.cpp``, ``HeadRequest``) over the head's weights packed once (``PackedHead``), with
``fc`` over the target's features or a parent's output as the layer's input, read by row index (no gather here),
keys and values written to the head's cache and each row's output to its slot.

In bf16 it computes what the eager bf16 head computes up to rounding (its matmuls and attention sum in fp32 where
eager rounds intermediate products to bf16), so a draft may differ from the eager head's at a near-tie of two
logits; the target verifies every draft, so decoding stays the target's (bf16 AR on the batch-invariant fused
target). fp32 heads, and shapes or machines the kernels do not take, keep the eager runner (``head_runner``).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from ...engines import kernels
from .eagle3 import Eagle3Head
from .eagle3_runner import Eagle3Runner
from .base import waves
from ...engines.ownership import ReleasedWeight


class Rope(NamedTuple):
    """A target's RoPE tables (cos, sin [positions, head_dim], row p: position p) and the frequencies they are of."""

    cos: Tensor
    sin: Tensor
    inv_freq: Tensor


def fusable(head: Eagle3Head) -> bool:
    """Whether the kernels can run this head's step: bf16 on a CPU with AVX512-BF16, its sizes multiples of 16 and a
    head size the attention kernel takes."""
    c, w = head.cfg, head.fc.weight
    return (w.dtype == torch.bfloat16 and w.device.type == "cpu" and head.embed_tokens.dtype == torch.bfloat16
            and kernels.attention_takes(c.head_dim) and kernels.forward_takes(c.hidden, c.intermediate)
            and c.draft_vocab % 16 == 0 and c.target_hidden == c.hidden and kernels.available())


def head_runner(head: Eagle3Head, max_len: int | None = None, fused: bool = False,
                rope: Rope | None = None) -> Eagle3Runner:
    """The head's draft runner: ``FusedEagle3Runner`` where ``fused`` is asked (the target runs the fused engine)
    and the kernels take the head (``fusable``; it takes over the head's weights, and reads the target's RoPE tables
    ``rope`` where they are its own: ``PackedHead``), else the eager ``Eagle3Runner``."""
    if fused and fusable(head):
        return FusedEagle3Runner(head, max_len, rope=rope)
    return Eagle3Runner(head, max_len)


class PackedHead:
    """The head's weights as ``kernels.eagle3_step`` reads them, packed once (``kernels.pack``; the layer's in the
    one-call forward's stacked layout of one layer), with the runner's cache and outputs buffer (shared, not copied)
    and RoPE tables of every position of its slots (the kernel reads a token at p at row p - 1, where EAGLE-3
    places it): ``rope``'s, the target's, where they hold the values the eager head computes (one copy of them),
    else its own. A matmul weight on int8 rows (``core.engines.int8_rows``: an exported head's) is packed as its int8
    values, its rows' powers of two in ``scales`` (fc, wqkv, wo, w13, w2, head: the kernel's order; None if no
    weight is), the others in bf16: the same results either way. Unless ``keep``, the packed weights are the head's
    one copy (``release``)."""

    def __init__(self, head: Eagle3Head, runner: Eagle3Runner, keep: bool = False,
                 rope: Rope | None = None):
        c, L = head.cfg, head.layer
        a, m = L.self_attn, L.mlp
        self.embed = head.embed_tokens
        (fc, wqkv, wo, w13, w2, lm), self.scales = pack_matmuls([
            head.fc.weight, torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), a.o_proj.weight,
            torch.cat([m.gate_proj.weight, m.up_proj.weight]), m.down_proj.weight, head.lm_head.weight])
        self.fc, self.wqkv, self.wo, self.w13, self.w2, self.head = fc, wqkv[None], wo[None], w13[None], w2[None], lm
        self.ln1 = torch.cat([L.input_layernorm.weight, L.hidden_norm.weight]).detach()[None]
        self.ln2 = L.post_attention_layernorm.weight.detach()[None]
        self.norm = head.norm.weight.detach()
        self.cos, self.sin = head_rope(head, runner.max_len, rope)
        self.k, self.v = runner.k.view(-1, c.head_dim), runner.v.view(-1, c.head_dim)  # [KV * slots, hd] rows
        self.out = runner.out
        self.H, self.KV, self.eps = c.heads, c.kv_heads, c.rms_eps
        self.isa = kernels.default_isa()  # its matmuls' instruction set, as the target's (``kernels.using_isa``)
        if not keep:
            release(head, self.ln1[0])


def pack_matmuls(weights: list[Tensor]) -> tuple[list[Tensor], Tensor | None]:
    """The head's six matmul weights packed (``PackedHead``), each on int8 rows as its int8 values, else in bf16;
    and the int8 ones' powers of two, concatenated (ones for a bf16 weight; None if none is int8)."""
    parts = [kernels.int8_rows(w.detach()) or (w.detach(), None) for w in weights]
    packed = [kernels.pack(held.contiguous()) for held, _ in parts]
    if all(s is None for _, s in parts):
        return packed, None
    return packed, torch.cat([torch.ones(w.shape[0]) if s is None else s for w, (_, s) in zip(weights, parts)])


def head_rope(head: Eagle3Head, positions: int, rope: Rope | None) -> tuple[Tensor, Tensor]:
    """cos, sin [positions, head_dim] as the eager head computes them: ``rope``'s (borrowed) where they cover the
    positions at the head's frequencies in its dtype (the same products, cosines and roundings), else its own."""
    dtype = head.fc.weight.dtype
    if (rope is not None and rope.cos.shape[0] >= positions and rope.cos.dtype == dtype
            and torch.equal(rope.inv_freq.cpu(), head.inv_freq.cpu())):
        return rope.cos, rope.sin
    return head.rope(torch.arange(positions), dtype)


def release(head: Eagle3Head, ln1: Tensor) -> None:
    """Hand the head's weights over to its ``PackedHead`` (``core.engines.ownership``): every linear layer's weight
    released
    (the packed one is its copy), the two input norms views of the packed ``ln1`` [2d]."""
    for path, module in head.named_modules():
        if isinstance(module, nn.Linear):
            module._parameters["weight"] = ReleasedWeight(module.weight, f"{path}.weight", "a FusedEagle3Runner")
    layer, d = head.layer, head.cfg.hidden
    layer.input_layernorm.weight.data, layer.hidden_norm.weight.data = ln1[:d], ln1[d:]


class FusedEagle3Runner(Eagle3Runner):
    """``Eagle3Runner`` with each wave of its layer run by one ``kernels.eagle3_step`` (module docstring)."""

    engine = "eagle3+fused"
    catch_up_rows = 32  # committed rows a kernel call (``_committed``)

    def __init__(self, head: Eagle3Head, max_len: int | None = None, tree_slots: int = 320, keep_head: bool = False,
                 rope: Rope | None = None):
        super().__init__(head, max_len, tree_slots)
        self.net = PackedHead(head, self, keep_head, rope)

    @property
    def isa(self) -> str | None:
        return self.net.isa

    def _committed(self, tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor, last_only: bool) -> Tensor:
        """Committed rows, ``catch_up_rows`` a call (a prompt's catch-up then holds one piece's activations, not the
        prompt's; the kernel is batch-invariant: the bits of one call), each on the target's features of the token
        before it, through fc."""
        rows, q = self._committed_rows(positions), tokens.numel()
        pieces = [slice(s, s + self.catch_up_rows) for s in range(0, q, self.catch_up_rows)]
        out = [self._step(tokens[i], positions[i], slots[i], mask[i], rows=rows[i], fc=self.net.fc,
               last_only=last_only) for i in pieces]
        return out[-1] if last_only or len(out) == 1 else torch.cat(out)

    def _step(self, tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor, rows: Tensor,
              *, fc: Tensor | None, last_only: bool) -> Tensor:
        """One call over rows reading ``rows`` of the target's features (``fc``) or of the outputs buffer."""
        inputs = self.target if fc is not None else self.out
        return kernels.eagle3_step(tokens, positions, slots, mask, inputs=inputs, input_rows=rows, net=self.net, fc=fc,
                                   last_only=last_only)

    def _drafted(self, tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor, parents: list[int],
                 *, last_only: bool) -> Tensor:
        """Drafted rows on their ``parents``' outputs: one call when no parent is among them (a tree level), else one
        per wave, the logits put back in row order."""
        rows = self.ring(parents)
        order = waves(parents, self.length)
        if len(order) == 1:
            return self._step(tokens, positions, slots, mask, rows=rows, fc=None, last_only=last_only)
        out = torch.empty(tokens.numel(), self.head.cfg.draft_vocab, dtype=mask.dtype, device=mask.device)
        for wave in order:
            i = torch.tensor(wave, device=tokens.device)
            out[i] = self._step(tokens[i], positions[i], slots[i], mask[i], rows=rows[i], fc=None, last_only=False)
        return out[-1:] if last_only else out

    def _mask(self, q: int, visible: Tensor | None, tree_start: int | None) -> Tensor:
        """The eager runner's mask, but the first token's row sees its own slot: the kernel gives a row that sees no
        slot no weights at all, where eager's softmax over one hidden slot gives it weight 1 (a one-token prompt's
        row, the parent of the first drafts: the same result). In a longer prompt that row is never read."""
        mask = super()._mask(q, visible, tree_start)
        if self.length == 0:
            mask[0, 0] = 0
        return mask
