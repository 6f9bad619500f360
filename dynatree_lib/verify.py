"""Parallel verification of a draft tree with one target forward (Section 3.4)."""
from __future__ import annotations

import torch
from torch import Tensor

from .models import forward
from .tree import Tree, attention_mask


@torch.no_grad()
def verify(model, cache, tree: Tree, cache_len: int) -> Tensor:
    """Target argmax after every tree node, [n+1], from one forward over the BFS-serialized tree.

    Node i sits at position ``cache_len + depth(i)`` and attends to the cached prefix plus its
    ancestors and itself. A chain (linear draft) is plain causal attention, so it needs no mask.
    """
    t = tree.view()
    mask = None if t.is_chain else attention_mask(t.anc, cache_len, model.dtype)
    logits = forward(model, t.tokens, cache, cache_len + t.depth, mask)
    return logits.argmax(dim=-1)
