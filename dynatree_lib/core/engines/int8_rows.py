"""Weights on int8 rows: every row of a matmul weight is int8 values (at most 127 in magnitude) times one power of
two. Such a weight is held exactly by its int8 values and its rows' powers of two, in half the bytes of bf16, and
the fused engine computes with it bit for bit what it computes from the bf16 weight (``csrc/linear_bf16.cpp``,
"int8 rows"; short of subnormal sums and overflow, far from a trained head's values); every other engine reads the
bf16 weight itself. ``snap`` puts a weight on int8 rows (what an export of the EAGLE-3 head does:
``train.eagle3.export``); ``kernels.int8_rows`` finds the int8 form of a weight already there, at load.

A row's power of two is the smallest that keeps its largest value within 127 steps; a snapped row's largest value
is then 64 to 127 steps, so snapping a snapped weight changes nothing and its powers are found again."""
from __future__ import annotations

import torch
from torch import Tensor, nn

LIMIT = 127  # the largest int8 magnitude used (symmetric: -128 never occurs)
NAME = "int8 rows"  # how a head's config.json names the form of its weights (``OUR_KEY``'s ``weights``)


def row_scales(w: Tensor) -> Tensor:
    """Each row's power of two [n] (fp32): the smallest s with max |row| <= LIMIT * s (1 for a row of zeros)."""
    x = w.detach().float().abs().amax(1) / LIMIT
    s = torch.exp2(torch.ceil(torch.log2(x.clamp(min=torch.finfo(torch.float32).tiny))))
    s = torch.where(s < x, s * 2, s)
    s = torch.where(s / 2 >= x, s / 2, s)
    return torch.where(x > 0, s, torch.ones_like(s))


def snap(w: Tensor) -> Tensor:
    """``w`` [n, d] on int8 rows, in its dtype: each value rounded to its row's nearest step."""
    s = row_scales(w)[:, None]
    return ((w.detach().float() / s).round().clamp(-LIMIT, LIMIT) * s).to(w.dtype)


def snap_linears(module: nn.Module) -> nn.Module:
    """Every linear layer's weight of ``module`` put on int8 rows, in place; returns ``module``."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Linear):
                m.weight.copy_(snap(m.weight))
    return module
