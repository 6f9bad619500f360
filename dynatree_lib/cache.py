"""KV-cache surgery on transformers' ``DynamicCache``, in one place.

We touch the per-layer key/value tensors directly instead of calling ``cache.crop``: its argument
changed meaning in transformers 5.17 (an absolute length before, a negative count of tokens to remove
after), and our two operations (truncate, gather-then-truncate) are plain tensor slicing anyway.
Layouts: transformers >= 4.56 keeps ``cache.layers[i].keys/.values``; 4.53-4.55 keep
``cache.key_cache[i]`` / ``cache.value_cache[i]``. Both are [batch, heads, seq, head_dim].
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from transformers import DynamicCache


def new_cache() -> DynamicCache:
    """An empty cache with one full (non-sliding) layer per model layer, created lazily."""
    return DynamicCache()


def cache_length(cache: DynamicCache) -> int:
    return cache.get_seq_length()


def _map_layers(cache: DynamicCache, fn: Callable[[Tensor], Tensor]) -> None:
    if hasattr(cache, "layers"):
        for layer in cache.layers:
            if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                continue
            if getattr(layer, "is_sliding", False):
                raise ValueError("sliding-window cache layers cannot be rolled back; use a model without "
                                 "sliding-window attention or a context within its window")
            layer.keys, layer.values = fn(layer.keys), fn(layer.values)
    else:  # transformers 4.53-4.55
        cache.key_cache = [fn(k) for k in cache.key_cache]
        cache.value_cache = [fn(v) for v in cache.value_cache]


def truncate(cache: DynamicCache, length: int) -> None:
    """Keep the first ``length`` positions of every layer (the paper's rollback)."""
    _map_layers(cache, lambda x: x[..., :length, :])


def commit_gather(cache: DynamicCache, start: int, keep: Tensor) -> None:
    """Move positions ``start + keep`` to ``start, start+1, ...`` and truncate after them.

    ``keep`` are tree-relative indices of the committed path, ascending and starting at 0, so every
    source index is >= its destination and the gathered copy is safe in place.
    """
    n = keep.numel()
    src = keep + start

    def fn(x: Tensor) -> Tensor:
        x[..., start:start + n, :] = x.index_select(-2, src)
        return x[..., :start + n, :]

    _map_layers(cache, fn)


def cache_bytes(cache: DynamicCache) -> int:
    """Bytes held by the cache tensors (for memory accounting)."""
    total = 0
    for layer in getattr(cache, "layers", []):
        for x in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(x, torch.Tensor):
                total += x.numel() * x.element_size()
    return total
