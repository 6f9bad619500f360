"""A model plus its KV cache for one sequence: the only thing the decoding loops talk to.

A ``Runner`` appends tokens to its cache and returns their logits (``forward``) or only each row's argmax
(``argmax``: what a target is asked; the one-call fast path finds it without handing the logits out), with
explicit positions and, for token trees, an explicit visibility pattern; it truncates, gathers (commits a
tree path in place) and evicts (StreamingLLM). Two implementations share the role: ``HFRunner`` (any
supported transformers causal LM, eager, ``DynamicCache``; this module) and ``fastpath.StaticRunner`` (our
Llama over a preallocated static cache, optionally compiled).

Visibility. Cache slots below ``tree_start`` (the committed prefix) are seen by every new token. For slots
from ``tree_start`` on (tree nodes cached earlier in this draft, then the new tokens themselves),
``visible[i, j]`` says whether new token ``i`` sees slot ``tree_start + j``. ``visible=None`` means plain
causal attention among the new tokens.

Draft vocabulary. A draft runner may score only a subset of the vocabulary (``vocab``: the token ids of
its logits' columns; FR-Spec's frequency-ranked draft head): its head reads a fraction of the output
embedding, and exactness is untouched because the target verifies every token over the full vocabulary.

Features. A draft that drafts from the target's own hidden states (an EAGLE-3 head) names the layers it reads
(``reads_features``); the loop asks the target once (``keep_features``), after which every target forward also
leaves the hidden states of those layers for every row it processed (``features``), computed by the same
forward (no second pass). The loop hands the committed rows to the draft (``observe_target``): the prompt's
after prefill, the accepted path's after each verification. Layer id ``i`` is the hidden state entering decoder
layer ``i`` (transformers' ``hidden_states[i]``; 0 is the embedding), as EAGLE-3 and vLLM count them; id ``L``
(the number of layers) is the last hidden state after the final norm, what the output layer reads (transformers'
``hidden_states[L]``; Medusa's and Hydra's input). A runner asked for no features does no extra work.

Depth. A draft with one head per drafted level (Medusa, Hydra) can give children to nodes only down to a depth
(``depth_limit``): the drafter grows no node deeper than it, whatever the policy asks.

We never call ``DynamicCache.crop``: its argument changed meaning in transformers 5.17 (an absolute
length before, a negative count after), and our operations are plain tensor slicing anyway.
"""
from __future__ import annotations

import inspect
import torch
from torch import Tensor

# Positional schemes a token tree cannot express through position ids and a mask.
_ALIBI_TYPES = ("bloom", "mpt", "jais")


class Runner:
    """A causal LM with a KV cache for one sequence (see module docstring): the interface every runner
    implements in full. ``argmax``, ``logprobs`` and ``lookup`` have defaults here; the rest each runner writes."""

    model: torch.nn.Module      # the transformers model (config, generation config)
    length: int = 0             # cached positions
    engine: str = "eager"       # which engine ran the forwards (logged with every result)
    isa: str | None = None      # the bf16 kernels' instruction set (``kernels.AVX512`` or ``AMX``); None: none run
    vocab: Tensor | None = None  # token ids of the logits' columns (a draft head over a subset); None: all
    has_lookup: bool = False    # whether ``lookup`` can find anything (a draft with a context lookup)
    reads_features: tuple[int, ...] = ()  # a draft on the target's hidden states: the layer ids it reads
    features: Tensor | None = None  # a target asked to keep features: [rows, layers * hidden] of its last forward
    depth_limit: int | None = None  # a draft that drafts no deeper than this many levels (a head per level); None: any

    def reset(self) -> None:
        raise NotImplementedError

    def forward(self, tokens: Tensor, positions: Tensor, visible: Tensor | None = None,
                tree_start: int | None = None, last_only: bool = False) -> Tensor:
        """Logits [q, V] ([1, V] if ``last_only``) of ``tokens`` appended at slots ``length..``, at ``positions``."""
        raise NotImplementedError

    def argmax(self, tokens: Tensor, positions: Tensor, visible: Tensor | None = None,
               tree_start: int | None = None, last_only: bool = False) -> Tensor:
        """``greedy`` of ``forward``'s logits: each new row's argmax column."""
        return greedy(self.forward(tokens, positions, visible, tree_start, last_only))

    def logprobs(self, tokens: Tensor, positions: Tensor, visible: Tensor | None = None, tree_start: int | None = None,
                 last_only: bool = False, temperature: float = 1.0) -> Tensor:
        """Log-probabilities [q, V] of each new row's next token at ``temperature`` (fp32): what a drafter ranks
        and samples children by."""
        logits = self.forward(tokens, positions, visible, tree_start, last_only).float()
        return torch.log_softmax(logits if temperature == 1.0 else logits / temperature, dim=-1)

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` slots (the paper's rollback)."""
        raise NotImplementedError

    def commit(self, start: int, keep: Tensor) -> None:
        """Move slots ``start + keep`` to ``start, start+1, ...`` and truncate after them (``keep`` ascending
        from 0)."""
        raise NotImplementedError

    def evict(self, n_sink: int, n_drop: int) -> None:
        """StreamingLLM: drop ``n_drop`` slots after the ``n_sink`` sinks, re-rotating the kept keys."""
        raise NotImplementedError

    def lookup(self, context: list[int]) -> tuple[int, float] | None:
        """A context lookup's next token after ``context`` and its mixture weight (``lookup.LookupRunner``);
        a plain runner has none."""
        return None

    def keep_features(self, layers: tuple[int, ...]) -> None:
        """From now on, keep the hidden states of ``layers`` (layer ids, see module docstring) of every row each
        forward processes in ``features`` (the layers concatenated in this order along the last dim)."""
        raise ValueError(f"a draft reads the target's hidden states, and the target runner {type(self).__name__} "
                         "cannot return them; run the target on HFRunner or StaticRunner")

    def observe_target(self, features: Tensor, start: int) -> None:
        """A draft on the target's hidden states: ``features`` [n, layers * hidden] of the committed tokens at
        positions ``start .. start + n - 1`` (``reads_features``). Other drafts ignore them."""


def greedy(logits: Tensor) -> Tensor:
    """Argmax over the last dim, taken in fp32: exact for bf16/fp16 logits (same maxima, same first
    index), and CPU argmax over bf16 runs several times slower than over fp32."""
    return logits.float().argmax(-1)


def context_limit(model) -> int | None:
    """Longest sequence the model's positions support (``max_position_embeddings``), if it declares one."""
    cfg = model.config
    return getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)


def vocab_rows(model) -> int:
    """Number of logits the model produces (rows of its output embedding)."""
    out = model.get_output_embeddings()
    return out.weight.shape[0] if out is not None else model.config.vocab_size


def sliding_window(model) -> int | None:
    """The attention window of a model with sliding-window layers, or None."""
    cfg = model.config
    w = getattr(cfg, "sliding_window", None)
    if not w or getattr(cfg, "use_sliding_window", True) is False:
        return None
    types = getattr(cfg, "layer_types", None)
    if types is not None and "sliding_attention" not in types:
        return None
    return int(w)


def rotary_inv_freq(model) -> Tensor:
    """The rotary frequencies of a RoPE model (for StreamingLLM's key re-rotation)."""
    for m in model.modules():
        if isinstance(getattr(m, "inv_freq", None), Tensor):
            return m.inv_freq
    raise ValueError(f"StreamingLLM re-rotates cached keys, which needs rotary position embeddings; "
                     f"{model.config.model_type!r} has none")


def check_supported(model, role: str, tree: bool, seq_len: int) -> None:
    """Refuse, with a reason, a model our decoders cannot serve exactly.

    - ALiBi models (Bloom, MPT): position bias comes from the mask layout, so tree nodes that share a
      position cannot be expressed; they are refused for every speculative method.
    - Sliding-window attention: our tree mask and cache keep every position, which equals the model only
      while the whole sequence fits in the window; longer runs are refused.
    - A model that takes no ``position_ids``: tree nodes need explicit positions.
    - A model in training mode: dropout would make every call differ.
    """
    name = getattr(model.config, "model_type", type(model).__name__)
    if model.training:
        raise ValueError(f"the {role} ({name}) is in training mode (dropout changes every call): call .eval() on it")
    if not tree:
        return
    if name in _ALIBI_TYPES or getattr(model.config, "alibi", False):
        raise ValueError(f"the {role} ({name}) uses ALiBi position biases, which a token tree verified in one "
                         "forward cannot express; use AR or a rotary/learned-position model")
    if "position_ids" not in inspect.signature(model.forward).parameters:
        raise ValueError(f"the {role} ({name}) takes no position_ids, which tree verification needs")
    w = sliding_window(model)
    if w is not None and seq_len > w:
        raise ValueError(f"the {role} ({name}) uses sliding-window attention (window {w}) and prompt + T = "
                         f"{seq_len} exceeds it; speculative decoding here keeps full attention and would "
                         "differ from the model. Keep prompt + T within the window or use AR")


def check_pair(target, draft, target_tokenizer=None, draft_tokenizer=None) -> None:
    """Refuse a draft/target pair that does not share one vocabulary (ids are compared across models)."""
    vt, vd = vocab_rows(target), vocab_rows(draft)
    if vt != vd:
        raise ValueError(f"draft and target vocabularies differ: target has {vt} logits, draft has {vd}. "
                         "Use a draft from the same model family / tokenizer as the target.")
    if target_tokenizer is not None and draft_tokenizer is not None:
        if target_tokenizer.get_vocab() != draft_tokenizer.get_vocab():
            raise ValueError("draft and target tokenizers differ (different token-to-id maps). "
                             "Use a draft trained with the target's tokenizer.")


def check_vocab(vocab, n_vocab: int, device=None) -> Tensor | None:
    """A draft head's token subset as a long tensor (None passes through): distinct ids in [0, n_vocab)."""
    if vocab is None:
        return None
    v = torch.as_tensor(vocab)
    if v.dtype.is_floating_point or v.dtype.is_complex or v.dtype == torch.bool:
        raise TypeError(f"vocab must hold integer token ids, got dtype {v.dtype}")
    if v.dim() != 1 or v.numel() == 0:
        raise ValueError(f"vocab must be a non-empty 1-D list of token ids, got shape {tuple(v.shape)}")
    if int(v.min()) < 0 or int(v.max()) >= n_vocab:
        raise ValueError(f"vocab holds token id {int(v.min()) if int(v.min()) < 0 else int(v.max())}, "
                         f"outside the model's vocabulary [0, {n_vocab})")
    if v.unique().numel() != v.numel():
        raise ValueError("vocab lists a token id more than once")
    return v.to(device=device, dtype=torch.long)


def check_feature_layers(layers, n_layers: int) -> tuple[int, ...]:
    """``layers`` as a tuple of layer ids in [0, n_layers] (see module docstring), refused otherwise."""
    out = tuple(layers)
    if not out or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i <= n_layers for i in out):
        raise ValueError(f"feature layers must be a non-empty list of layer ids in [0, {n_layers}] (the hidden state "
                         f"entering that decoder layer; {n_layers}: the last one, after the final norm), got {layers!r}")
    return out


class HeadRunner(Runner):
    """What every draft runner on the target's hidden states keeps per slot and per position (EAGLE-3, Medusa and
    Hydra heads): ``target``, the target's features of positions ``base .. known - 1`` (handed over by
    ``observe_target``), ``pos``, each slot's token position, and the slot rows of ``slot_rows`` that ``commit``
    moves with their slots. ``what`` names the head in errors.

    Features are kept only while a forward may still read them, not for the whole context. A committed row at
    position p reads the features of p - 1 (and Medusa's and Hydra's tree nodes those of the position before their
    root, the last committed token), so once committed rows up to position P are fed (``fed``), no later read goes
    below P - 1 and ``observe_target`` drops the rows before it. The loops never truncate a head below the rows it
    was fed; a read of a dropped position is refused with the positions held, never served from other rows."""

    what: str = "the head"

    def init_slots(self, max_len: int, feature_width: int, dtype: torch.dtype, device) -> None:
        self.max_len, self.width, self.dtype, self.device = max_len, feature_width, dtype, device
        self.pos = torch.zeros(max_len, dtype=torch.long, device=device)  # each slot's token position
        self.reset()

    def reset(self) -> None:
        self.length = self.known = self.base = 0
        self.floor = self.last_read = 0  # no read goes below floor; last_read: the highest of the last read
        self.target = torch.zeros(0, self.width, dtype=self.dtype, device=self.device)  # positions base .. known - 1

    def observe_target(self, features: Tensor, start: int) -> None:
        n = features.shape[0]
        if not self.base <= start <= self.known or start + n > self.max_len:
            raise ValueError(f"target features for positions {start}..{start + n - 1} do not follow the "
                             f"{self.base}..{self.known - 1} held (or exceed the {self.max_len} slots of {self.what})")
        lo = max(min(self.floor, start), self.base)
        kept, features = self.target[lo - self.base:start - self.base], features.to(self.device, self.dtype)
        self.target = torch.cat([kept, features]) if kept.numel() else features  # read only: no copy needed
        self.base, self.known = lo, start + n

    def fed(self) -> None:
        """A committed forward ran: its rows' reads (``last_read``: the position before its last row) bound every
        later read from below."""
        self.floor = max(self.floor, self.last_read)

    def feature_rows(self, before: Tensor) -> Tensor:
        """Rows of ``target`` holding the features of positions ``before`` (-1: none, kept -1); one host read."""
        hi, lo = torch.stack([before.max(), torch.where(before >= 0, before, self.known).min()]).tolist()
        if hi >= self.known or lo < self.base:
            raise ValueError(f"{self.what} holds the target's features of positions {self.base}..{self.known - 1}, "
                             f"and a row needs those of position {hi if hi >= self.known else lo}")
        self.last_read = hi
        return torch.where(before >= 0, before - self.base, -1)

    def features_of(self, before: Tensor) -> Tensor:
        """The target's features of positions ``before`` [n, width] (zeros for -1)."""
        rows = self.feature_rows(before)
        if not self.target.shape[0]:
            return self.target.new_zeros(rows.numel(), self.width)
        return torch.where((rows >= 0)[:, None], self.target[rows.clamp(min=0)], 0.0)

    def new_slots(self, positions: Tensor) -> Tensor:
        """The slots of new rows at ``positions`` (recorded), refused past the slots."""
        q = positions.numel()
        if self.length + q > self.max_len:
            raise ValueError(f"the {self.max_len} slots of {self.what} are full ({self.length} used, {q} more asked)")
        self.pos[self.length:self.length + q] = positions
        return torch.arange(self.length, self.length + q, device=positions.device)

    def slot_rows(self) -> list[Tensor]:
        """The per-slot tensors (slot first) that move with their slots."""
        return [self.pos]

    def move(self, src: Tensor, dst: slice) -> None:
        """Slots ``src`` to ``dst`` (``commit``'s copy)."""
        for t in self.slot_rows():
            t[dst] = t[src]

    def truncate(self, length: int) -> None:
        self.length = length

    def commit(self, start: int, keep: Tensor) -> None:
        n, m = keep.numel(), first_moved(keep)
        if m < n:
            self.move(keep[m:] + start, slice(start + m, start + n))
        self.length = start + n


def tree_parents(slot_pos: Tensor, length: int, positions: Tensor, visible: Tensor | None, tree_start: int) -> list[int]:
    """Each new drafted row's parent slot, for a draft runner that follows paths (``slot_pos``: the position of each
    cached slot; ``length``: the slots cached before these rows): the visible slot one position up, else the last
    committed slot ``tree_start - 1`` (a child of the root). ``visible=None`` (a chain): the slot before each row."""
    if visible is None:
        return list(range(length - 1, length + positions.numel() - 1))
    span = slot_pos[tree_start:tree_start + visible.shape[1]]
    up = visible & (span[None, :] == positions[:, None] - 1)
    first = up.to(torch.int8).argmax(1) + tree_start
    return torch.where(up.any(1), first, tree_start - 1).tolist()


def first_moved(keep: Tensor) -> int:
    """Index of the first kept slot not already in place (``keep[i] != i``; ``len(keep)`` if none), so that
    a commit copies only what moves: an iteration that accepts no draft token keeps just the root, in
    place. Read only from a CPU tensor (on a GPU it would cost a host sync; there everything is copied)."""
    if keep.device.type != "cpu":
        return 0
    moved = (keep != torch.arange(keep.numel())).nonzero()
    return int(moved[0]) if moved.numel() else keep.numel()


def rerotate(keys: Tensor, delta: int, inv_freq: Tensor) -> Tensor:
    """Keys cached with RoPE at position p, moved to p + delta (rotate-half convention on the first
    2*len(inv_freq) dims, as GPT-NeoX and Llama cache them)."""
    rd = 2 * inv_freq.numel()
    ang = delta * inv_freq.to(keys.device, torch.float32)
    cos, sin = torch.cat([ang.cos(), ang.cos()]), torch.cat([ang.sin(), ang.sin()])
    k = keys[..., :rd].float()
    half = rd // 2
    rot = torch.cat([-k[..., half:], k[..., :half]], dim=-1)
    out = keys.clone()
    out[..., :rd] = (k * cos + rot * sin).to(keys.dtype)
    return out


def additive_mask(visible: Tensor | None, tree_start: int, total: int, dtype: torch.dtype) -> Tensor:
    """[q, total] additive mask (0 / finfo.min) from a visibility pattern over slots >= tree_start.

    Additive float in the model dtype, because a boolean 4D mask is silently misread on some eager
    attention paths of transformers."""
    q = visible.shape[0]
    mask = torch.zeros(q, total, dtype=dtype, device=visible.device)
    mask[:, tree_start:tree_start + visible.shape[1]].masked_fill_(~visible, torch.finfo(dtype).min)
    return mask


class HFRunner(Runner):
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
