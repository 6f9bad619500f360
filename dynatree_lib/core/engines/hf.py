"""``HFRunner``: any supported transformers causal LM as a ``Runner`` (eager, ``DynamicCache``), and ``as_runner``."""
from __future__ import annotations

import torch
from torch import Tensor

from .runner import (Draft, Runner, Target, additive_mask, check_feature_layers, check_vocab, first_moved, rerotate,
                     rotary_inv_freq, vocab_rows)


class HFRunner(Target, Draft):
    """A transformers causal LM over a ``DynamicCache`` (eager; the tests' reference path). With ``vocab``
    its logits are the model's columns ``vocab`` (the same numbers a subset head computes)."""

    engine = "eager"

    def __init__(self, model, vocab=None):
        from transformers import DynamicCache

        self.model = model
        self.vocab = check_vocab(vocab, vocab_rows(model), next(model.parameters()).device)
        self._new = DynamicCache
        self.cache = DynamicCache()
        self.length = 0
        self.feature_layers: tuple[int, ...] = ()

    def reset(self) -> None:
        self.cache = self._new()
        self.length = 0
        self.features = None

    def keep_features(self, layers: tuple[int, ...]) -> None:
        self.feature_layers = check_feature_layers(layers, self.model.config.num_hidden_layers)

    def forward(self, tokens: Tensor, positions: Tensor, visible: Tensor | None = None,
                tree_start: int | None = None, last_only: bool = False) -> Tensor:
        """Logits [q, V] of ``tokens`` appended at slots ``length..``, at ``positions``."""
        q = tokens.numel()
        mask = None
        if visible is not None:
            mask = additive_mask(visible, tree_start, self.length + q, self.model.dtype)[None, None]
        kw = {"logits_to_keep": 1} if last_only else {}
        if self.feature_layers:
            kw["output_hidden_states"] = True
        out = self.model(input_ids=tokens[None], attention_mask=mask, position_ids=positions[None],
                         cache=self.cache, use_cache=True, **kw)
        self.length += q
        if self.feature_layers:
            self.features = torch.cat([out.hidden_states[i][0] for i in self.feature_layers], dim=-1)
        logits = out.logits[0, -1:] if last_only else out.logits[0]
        return logits if self.vocab is None else logits.index_select(-1, self.vocab)

    def _map(self, fn) -> None:
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                continue
            layer.keys, layer.values = fn(layer.keys, True), fn(layer.values, False)

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` slots (the paper's rollback)."""
        self._map(lambda x, _: x[..., :length, :])
        self.length = length

    def commit(self, start: int, keep: Tensor) -> None:
        """Move slots ``start + keep`` to ``start, start+1, ...`` and truncate after them. ``keep`` is
        ascending from 0, so every source is at or after its destination: the copy is safe in place."""
        n, m = keep.numel(), first_moved(keep)
        src = keep[m:] + start

        def fn(x: Tensor, _) -> Tensor:
            if m < n:
                x[..., start + m:start + n, :] = x.index_select(-2, src)
            return x[..., :start + n, :]

        self._map(fn)
        self.length = start + n

    def evict(self, n_sink: int, n_drop: int) -> None:
        """StreamingLLM: drop ``n_drop`` slots after the ``n_sink`` sinks; re-rotate the kept keys to their
        new, contiguous positions."""
        inv = rotary_inv_freq(self.model)

        def fn(x: Tensor, is_key: bool) -> Tensor:
            rest = x[..., n_sink + n_drop:, :]
            return torch.cat([x[..., :n_sink, :], rerotate(rest, -n_drop, inv) if is_key else rest], dim=-2)

        self._map(fn)
        self.length -= n_drop


def as_runner(model) -> Runner:
    """A runner for ``model``: runners pass through, transformers models get an ``HFRunner``."""
    return model if isinstance(model, Runner) else HFRunner(model)
