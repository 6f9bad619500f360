"""A model plus its KV cache for one sequence: the only thing the decoding loops talk to.

A ``Runner`` appends tokens to its cache and returns their logits (``forward``) or only each row's argmax
(``argmax``: what a target is asked; the one-call fast path finds it without handing the logits out), with
explicit positions and, for token trees, an explicit visibility pattern; it truncates, gathers (commits a
tree path in place) and evicts (StreamingLLM). Two implementations share the role: ``hf.HFRunner`` (any
supported transformers causal LM, eager, ``DynamicCache``) and ``static.StaticRunner`` (our Llama over a
preallocated static cache, optionally compiled); the draft heads' runners build on ``drafts.heads.base.HeadRunner``.

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
    """A causal LM with a KV cache for one sequence (see module docstring): what every runner implements, as a
    target or as a draft. ``argmax`` and ``logprobs`` have defaults here; the rest each runner writes. What only a
    target is asked is declared in ``Target``, what only a draft is asked in ``Draft``, with defaults there."""

    model: torch.nn.Module      # the transformers model (config, generation config)
    length: int = 0             # cached positions
    engine: str = "eager"       # which engine ran the forwards (logged with every result)
    isa: str | None = None      # the bf16 kernels' instruction set (``kernels.AVX512`` or ``AMX``); None: none run
    vocab: Tensor | None = None  # token ids of the logits' columns (a draft head over a subset); None: all

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
                 last_only: bool = False, *, temperature: float = 1.0) -> Tensor:
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



class Target(Runner):
    """What the loop asks only of a target: the hidden states a draft on them reads (``features``)."""

    features: Tensor | None = None  # asked to keep features: [rows, layers * hidden] of its last forward

    def greedy_steps(self, token: Tensor, steps: int, eos: int | None = None) -> Tensor:
        """Greedy decoding: from ``token`` ([1], the last committed token, not yet cached) at slot ``length``, each
        forward's argmax is the next one's token, for ``steps`` tokens or up to and including ``eos``; returns them
        ([n <= steps]), cached after it. One forward a token; a runner that can runs them in one call."""
        out = []
        for _ in range(steps):
            token = self.argmax(token, self.length + torch.zeros(1, dtype=torch.long, device=token.device),
                                last_only=True)
            out.append(token)
            if eos is not None and int(token) == eos:  # the only per-token host sync, and only when asked
                break
        return torch.cat(out) if out else token.new_empty(0)

    def keep_features(self, layers: tuple[int, ...]) -> None:
        """From now on, keep the hidden states of ``layers`` (layer ids, see module docstring) of every row each
        forward processes in ``features`` (the layers concatenated in this order along the last dim)."""
        raise ValueError(f"a draft reads the target's hidden states, and the target runner {type(self).__name__} "
                         "cannot return them; run the target on HFRunner or StaticRunner")


class Draft(Runner):
    """What the drafter and the loop ask only of a draft: a context lookup, the target's hidden states it reads, how
    deep it drafts."""

    has_lookup: bool = False    # whether ``lookup`` can find anything (a draft with a context lookup)
    reads_features: tuple[int, ...] = ()  # a draft on the target's hidden states: the layer ids it reads
    depth_limit: int | None = None  # drafts no deeper than this many levels (a head per level); None: any

    def lookup(self, context: list[int]) -> tuple[int, float] | None:
        """A context lookup's next token after ``context`` and its mixture weight (``lookup.LookupRunner``);
        a plain runner has none."""
        return None

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


def tree_parents(slot_pos: Tensor, length: int, positions: Tensor, visible: Tensor | None,
                 tree_start: int) -> list[int]:
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
    if keep.numel() == 1:  # the root alone (an AR step): always node 0, in place
        return 1
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
