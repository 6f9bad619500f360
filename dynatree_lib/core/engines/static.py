"""The fast path: a gpt-fast-style Llama over a preallocated static KV cache, optionally compiled.

``StaticLlama`` holds a transformers Llama's weights with the attention projections fused (one q/k/v
matmul) and the MLP's gate and up projections fused (one matmul), each kind of weight stacked over the
layers, and a KV cache written in place. ``StaticRunner`` serves it to the decoding loops (the ``Runner``
role): no per-step allocation of cache tensors, no transformers call overhead, attention over the used part
of the cache only. The runner holds the only copy of every weight (``ownership``): the transformers model keeps
views of its tensors where their layout allows, released parameters (which raise at any use) where not (packed),
unless built with ``keep_model=True``; a tied embedding whose head is packed is read from that packed head.

Three ways to run the forward, named by the runner's ``engine``:

- ``static+fused`` (``fused=True``, bf16 on a CPU with AVX512-BF16): the whole forward is one C++ call
  (``kernels.forward``): one parallel region per forward instead of a dozen kernels a layer, each with its own
  start-up and a weight stream that restarts cold. Its matmuls run on AMX tiles where the CPU has them
  (``StaticRunner.isa``: ``kernels.default_isa``), else on AVX512-BF16, as the layered forward's packed matmuls
  do. It computes what the layered forward below computes with the kernels, bit for bit (tested).
  ``StaticRunner.argmax`` (what the loops ask of a target) lets that call find each row's argmax as it computes
  the logits: no [k, V] logits handed out, copied to fp32 and searched again.
- ``static+compile`` (``compile=True``): the forward ``torch.compile``d with dynamic shapes (a graph specialised
  to one new token, one for any other count, one for prompts that need only the last logits: a tree of any
  size or a prompt of any length needs no padding) and a C++ wrapper (no Python between kernels). In bf16 on
  a CPU with AVX512-BF16 every weight is packed once for ``kernels.linear`` (the weight read from memory once a
  call, the same bits for a row whatever rows come with it; "+dpbf16" in the engine name) and attention is
  ``kernels.attention`` (the cache read in place, a row's bits independent of the tree around it); otherwise,
  in the one-token graph, every matmul is written as a broadcast multiply-and-sum, which inductor turns into a
  fused matrix-vector loop.
- ``static``: the same module run eagerly.

Why each piece: a flat cache buffer written by row indices, because a mutation of one layer's slice of a
shared buffer makes the compiled graph copy the whole buffer; stacked weights and one cache buffer, because a
compiled call checks every input tensor; attention written out (transformers' eager order, fp32 softmax) where
the kernel does not run, because the CPU SDPA kernel has a high fixed cost per call for one query; the kernels
and the matrix-vector loops, because a general bf16 matmul library re-lays a plain weight out on every call and
ATen's batched matmul copies each layer's non-contiguous cache slice first. The costs these choices buy are
measured in ``results/<profile>/costs.json`` (``tools/forward_bench.py`` times the engines side by side).
With the kernels and ``emulate_precision_casts`` (below), bf16 speculative decoding reproduces bf16 AR.

Numerics follow transformers' Llama (fp32 RMSNorm statistics, rotate-half RoPE with fp32 tables cast to
the model dtype, fp32 softmax), so in fp32 the fast path's greedy tokens equal transformers' (tested).
Compiling takes minutes the first time; inductor's on-disk cache makes it seconds in every later process.
"""
from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import kernels, pages
from .ownership import hand_over
from .runner import (Draft, Target, additive_mask, check_feature_layers, check_vocab, context_limit, first_moved,
                     greedy, rerotate, vocab_rows)

# inductor settings of the compiled fast path (scoped to its graphs through torch.compile's options).
# No freezing: it would prepack the multi-token matmuls (no faster for these shapes) but its packed weights
# keep the graphs out of inductor's on-disk cache, so every process would compile again.
# emulate_precision_casts: a fused kernel rounds its bf16 intermediates as eager would, so the one-token
# graph and the tree graph (fused differently) give a token the same bits; with the kernels' batch-invariant
# matmuls and attention, bf16 speculative decoding then reproduces bf16 AR (tested).
COMPILE_OPTIONS = {"cpp_wrapper": True, "emulate_precision_casts": True}
FUSED = "static+fused"  # the engine label of a runner whose forward is one kernel call (``kernels.forward``)


def check_fast_supported(model) -> None:
    """The fast path implements plain Llama-style models (SmolLM2, Llama, TinyLlama, ...)."""
    cfg = model.config
    name = getattr(cfg, "model_type", type(model).__name__)
    why = []
    if name not in ("llama", "mistral") or getattr(cfg, "sliding_window", None):
        why.append(f"model type {name!r}" + (" with sliding-window attention" if name == "mistral" else ""))
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        why.append("biases in attention or MLP")
    if getattr(cfg, "hidden_act", "silu") != "silu":
        why.append(f"activation {cfg.hidden_act!r}")
    rope = getattr(cfg, "rope_parameters", None) or {"rope_type": "default"}
    if rope.get("rope_type", "default") != "default":
        why.append(f"RoPE scaling {rope.get('rope_type')!r}")
    if why:
        raise ValueError(f"the fast path supports plain Llama models; this one has {', '.join(why)}: "
                         "use engine='eager'")


def check_embedding(embedding: Tensor, own: Tensor) -> Tensor:
    """A borrowed input embedding (another runner's tensor, plain or packed) that can stand for a model's ``own``."""
    shape = kernels.unpacked_shape(embedding)
    if shape != tuple(own.shape) or embedding.dtype != own.dtype or embedding.device != own.device:
        raise ValueError(f"the borrowed embedding is {shape} {embedding.dtype} on "
                         f"{embedding.device}; the model's is {tuple(own.shape)} {own.dtype} on {own.device}")
    return embedding


def _rope_theta(cfg) -> float:
    rope = getattr(cfg, "rope_parameters", None)
    return float(rope["rope_theta"]) if rope and "rope_theta" in rope else float(cfg.rope_theta)


def gqa_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, reduce: bool = False) -> Tensor:
    """Grouped-query attention of ``q`` [H, n, hd] over ``k``, ``v`` [KV, kv, hd] with an additive ``mask``
    [n, kv]; returns [H, n, hd]. Query heads sharing a KV head are one batch (no repeated keys).
    ``reduce`` writes the two products as broadcast-multiply-and-sum, which a compiled graph fuses into
    one loop each (for one query; eager it would materialise the products)."""
    H, n, hd = q.shape
    KV, kv = k.shape[0], k.shape[1]
    g = H // KV
    qg = q.reshape(KV, g * n, hd)
    if reduce:
        s = (qg[:, :, None, :].float() * k[:, None].float()).sum(-1).to(q.dtype) * (1.0 / math.sqrt(hd))
    else:
        s = (qg @ k.transpose(1, 2)) * (1.0 / math.sqrt(hd))
    p = (s.view(KV, g, n, kv) + mask).float().softmax(-1).to(q.dtype).view(KV, g * n, kv)
    if reduce:
        return (p[..., None].float() * v[:, None].float()).sum(-2).to(q.dtype).view(H, n, hd)
    return (p @ v).view(H, n, hd)


def linear(x: Tensor, w: Tensor, reduce: bool = False, isa: str | None = None) -> Tensor:
    """``x @ w.T``. A weight packed for the bf16 kernel (3-D, ``kernels.pack``) goes to that kernel, on ``isa``;
    otherwise ``reduce`` writes it as a broadcast multiply-and-sum with fp32 accumulation, which inductor
    compiles into a matrix-vector loop (for one row of ``x``; eager it would materialise the product)."""
    if w.dim() == 3:  # contiguous here: inside a graph the producing kernel writes it so (no copy in C++)
        return kernels.linear(x.contiguous(), w, isa)
    if reduce:
        return (x[:, None, :].float() * w.float()).sum(-1).to(x.dtype)
    return x @ w.t()


class StaticLlama(nn.Module):
    """A Llama forward over a static cache (see module docstring). Built from a transformers model;
    ``head_rows``: keep only these rows of the output layer (a draft head over a token subset); ``embedding``: read
    this tensor as the input embedding instead of the model's own (another runner's, holding the same values: a
    draft that borrows its target's embedding, plain or packed).
    ``feature_layers``: layer ids whose entering hidden states ``forward`` also returns (``runner``: features),
    empty unless asked (then nothing extra is computed or copied)."""

    feature_layers: tuple[int, ...] = ()

    def __init__(self, hf, max_len: int, compile: bool = False, kernel: bool = False, head_rows: Tensor | None = None,
                 *, fused: bool = False, embedding: Tensor | None = None):
        super().__init__()
        check_fast_supported(hf)
        c = hf.config
        self.H, self.KV = c.num_attention_heads, c.num_key_value_heads
        self.hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps, self.inter, self.hidden = c.rms_norm_eps, c.intermediate_size, c.hidden_size
        self.compiled = compile  # one-token matmuls written as reductions, which a compiled graph fuses
        dtype, dev = hf.dtype, next(hf.parameters()).device
        # attention by the bf16 kernel too, where it takes the head size
        self.fused_attention = kernel and dtype == torch.bfloat16 and dev.type == "cpu" and kernels.attention_takes(self.hd)
        self._weights(hf, kernel, head_rows, embedding)
        # the whole forward as one kernel call (``kernels.forward``) where asked and every matmul weight was packed
        self.fused = (fused and self.fused_attention and all(t.dim() == 4 for t in (self.wqkv, self.wo, self.w13, self.w2))
                         and self.head.dim() == 3 and kernels.forward_takes(c.hidden_size, self.inter))
        # the instruction set the packed matmuls run on, chosen once (``kernels.default_isa``)
        self.isa = kernels.default_isa() if kernel and kernels.available() else None
        self._cache_and_rope(len(hf.model.layers), max_len, _rope_theta(c), dtype, dev)
        pages.back_with_huge_pages([self.wqkv, self.wo, self.w13, self.w2, self.head, self.embed, self.k, self.v])

    def _weights(self, hf, kernel: bool, head_rows: Tensor | None, embedding: Tensor | None) -> None:
        """The weights in the layout the forward reads, all the runner's own (the model then keeps views of them or
        releases them: ``ownership``): matmul weights packed for the bf16 kernel where asked and possible (``linear``
        dispatches on it) and stacked over layers; a tensor read as the model holds it (the embedding, the final norm,
        an unpacked whole head) copied once, tied ones once together, since a model's own tensor can pin more than
        itself (``from_pretrained`` maps the checkpoint file, and every page read stays resident while one of its
        weights lives). A tied embedding whose head is packed is read from the packed head (``kernels.embedding``):
        one tensor for both; a borrowed ``embedding`` is another runner's own tensor, read as it is."""
        copies: dict[int, Tensor] = {}
        own = lambda t: copies.setdefault(id(t), t.detach().clone())  # t: a parameter of the model (alive meanwhile)
        p = lambda t: nn.Parameter(t, requires_grad=False)
        packs = lambda t: kernel and kernels.packable(t)
        w = lambda t: kernels.pack(t.detach()) if packs(t) else t.detach()
        # Each kind of weight is one tensor over all layers ([layers, ...]; layer i reads a view): a compiled
        # call checks and passes every input tensor, a fixed cost per tensor and call.
        stack = lambda f: nn.Parameter(torch.stack([f(L) for L in hf.model.layers]), requires_grad=False)
        self.wqkv = stack(lambda L: w(torch.cat([L.self_attn.q_proj.weight, L.self_attn.k_proj.weight,
                                                 L.self_attn.v_proj.weight])))
        self.wo = stack(lambda L: w(L.self_attn.o_proj.weight))
        self.w13 = stack(lambda L: w(torch.cat([L.mlp.gate_proj.weight, L.mlp.up_proj.weight])))
        self.w2 = stack(lambda L: w(L.mlp.down_proj.weight))
        self.ln1 = stack(lambda L: L.input_layernorm.weight.detach())
        self.ln2 = stack(lambda L: L.post_attention_layernorm.weight.detach())
        self.norm = p(own(hf.model.norm.weight))
        head, emb = hf.lm_head.weight, hf.model.embed_tokens.weight
        if head_rows is not None:  # the subset's rows, gathered: the runner's own
            self.head = p(w(head.index_select(0, head_rows.to(head.device))))
        else:
            self.head = p(kernels.pack(head.detach()) if packs(head) else own(head))
        if embedding is not None:
            self.embed = p(check_embedding(embedding, emb))
        elif head is emb and head_rows is None and self.head.dim() == 3:
            self.embed = self.head
        else:
            self.embed = p(own(emb))

    def _cache_and_rope(self, n_layers: int, max_len: int, theta: float, dtype: torch.dtype, dev) -> None:
        """The KV cache, written in place: one flat buffer each for keys and values, [layer, KV head, slot] rows of
        head_dim (``cache`` gives the 4-D view). Flat, because a graph that writes a view of an input (a layer's
        slice) copies the whole input, and one tensor per layer adds input checks to every call; writing rows of
        the whole buffer (``index_copy_``) is done in place. And the RoPE tables of ``max_len`` positions."""
        self.cache_shape = (n_layers, self.KV, max_len, self.hd)
        rows = math.prod(self.cache_shape[:3])
        self.register_buffer("k", torch.zeros(rows, self.hd, dtype=dtype, device=dev), persistent=False)
        self.register_buffer("v", torch.zeros_like(self.k), persistent=False)
        inv = 1.0 / (theta ** (torch.arange(0, self.hd, 2, dtype=torch.float32, device=dev) / self.hd))
        f = torch.outer(torch.arange(max_len, dtype=torch.float32, device=dev), inv)
        self.register_buffer("inv_freq", inv, persistent=False)
        self.register_buffer("cos", torch.cat([f, f], -1).cos().to(dtype), persistent=False)
        self.register_buffer("sin", torch.cat([f, f], -1).sin().to(dtype), persistent=False)

    def views_of(self, hf, subset: bool) -> dict[int, Tensor | None]:
        """id of each weight of ``hf`` -> the view of this model's tensor that holds it as ``hf`` does, or None where
        it is held otherwise (packed; only some rows: a ``subset`` head): what ``ownership.hand_over`` makes of the
        model's parameters. A borrowed embedding held plain is a view too (of the runner it is borrowed from)."""
        plain = lambda t: t if t.dim() == 2 else None
        rows = lambda t, sizes: t.split(sizes) if t.dim() == 2 else [None] * len(sizes)
        qkv, out = [self.H * self.hd, self.KV * self.hd, self.KV * self.hd], {}
        for i, L in enumerate(hf.model.layers):
            a, m = L.self_attn, L.mlp
            out |= dict(zip(map(id, (a.q_proj.weight, a.k_proj.weight, a.v_proj.weight)), rows(self.wqkv[i], qkv)))
            out |= dict(zip(map(id, (m.gate_proj.weight, m.up_proj.weight)), rows(self.w13[i], [self.inter] * 2)))
            out |= {id(a.o_proj.weight): plain(self.wo[i]), id(m.down_proj.weight): plain(self.w2[i]),
                    id(L.input_layernorm.weight): self.ln1[i], id(L.post_attention_layernorm.weight): self.ln2[i]}
        out[id(hf.model.norm.weight)] = self.norm
        out[id(hf.lm_head.weight)] = None if subset else plain(self.head)
        # after the head: a tied weight is the embedding's, whole here even where the head keeps some rows
        out[id(hf.model.embed_tokens.weight)] = plain(self.embed)
        return out

    def cache(self) -> tuple[Tensor, Tensor]:
        """Keys and values as [layers, KV heads, slots, head dim] views."""
        return self.k.view(self.cache_shape), self.v.view(self.cache_shape)

    def _rms(self, x: Tensor, w: Tensor) -> Tensor:
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    @staticmethod
    def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        h = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin

    def body(self, tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor) -> tuple[Tensor, Tensor | None]:
        """Final hidden states [q, d] of ``tokens`` at ``positions``, written to cache ``slots``, attending
        to slots [0, kv) through the additive ``mask`` [q, kv]; and the hidden states entering each of
        ``feature_layers`` ([q, k * d], None when none are asked; id ``layers``: the final normed state)."""
        q_len, H, KV, hd = tokens.shape[0], self.H, self.KV, self.hd
        kv = mask.shape[1]
        r = self._reduce(q_len)
        x = kernels.embedding(tokens, self.embed)
        cos, sin = self.cos[positions][None], self.sin[positions][None]
        n_layers, _, n_slots, _ = self.cache_shape
        # cache rows of layer 0's KV heads at ``slots`` ([KV * q]); layer i's are KV * n_slots further on
        rows0 = (torch.arange(KV, device=slots.device)[:, None] * n_slots + slots[None, :]).reshape(-1)
        kept = {}
        for i in range(n_layers):
            if i in self.feature_layers:
                kept[i] = x
            rows = rows0 + i * KV * n_slots
            qkv = linear(self._rms(x, self.ln1[i]), self.wqkv[i], r, self.isa)
            q, k, v = qkv.split([H * hd, KV * hd, KV * hd], -1)
            q = self._rope(q.view(q_len, H, hd).transpose(0, 1), cos, sin)
            self.k.index_copy_(0, rows, self._rope(k.view(q_len, KV, hd).transpose(0, 1), cos, sin).reshape(-1, hd))
            self.v.index_copy_(0, rows, v.view(q_len, KV, hd).transpose(0, 1).reshape(-1, hd))
            ck, cv = [c[i] for c in self.cache()]
            if self.fused_attention:  # the cache read in place; a row's bits are the same alone or in a tree
                o = kernels.attention(q, ck[:, :kv], cv[:, :kv], mask, self.isa)
            else:
                o = gqa_attention(q, ck[:, :kv], cv[:, :kv], mask, r).transpose(0, 1).reshape(q_len, H * hd)
            x = x + linear(o, self.wo[i], r, self.isa)
            gate, up = linear(self._rms(x, self.ln2[i]), self.w13[i], r, self.isa).split([self.inter, self.inter], -1)
            x = x + linear(F.silu(gate) * up, self.w2[i], r, self.isa)
        if n_layers in self.feature_layers:  # the last hidden state, after the final norm (what ``logits`` reads)
            kept[n_layers] = self._rms(x, self.norm)
        return x, (torch.cat([kept[i] for i in self.feature_layers], -1) if self.feature_layers else None)

    def _reduce(self, rows: int) -> bool:
        """Whether matmuls over ``rows`` new tokens take the fused multiply-and-sum form (decided while
        tracing: the one-token graph is its own)."""
        return self.compiled and rows == 1

    def logits(self, x: Tensor) -> Tensor:
        """Logits [r, V] of final hidden states [r, d]."""
        return linear(self._rms(x, self.norm), self.head, self._reduce(x.shape[0]), self.isa)

    def forward(self, tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor,
                last_only: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Logits [q, V] ([1, V] if ``last_only``) of ``tokens`` (see ``body``); with ``feature_layers``, the pair
        (logits, features [q, k * d])."""
        if self.fused:
            return self.one_call(tokens, positions, slots, mask, last_only)
        x, feats = self.body(tokens, positions, slots, mask)
        logits = self.logits(x[-1:] if last_only else x)
        return logits if feats is None else (logits, feats)

    def one_call(self, tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor, last_only: bool = False,
                 *, greedy: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """``forward`` as one kernel call (``kernels.forward``; ``greedy``: argmaxes for logits)."""
        if not self.feature_layers:
            return kernels.forward(tokens, positions, slots, mask, net=self, last_only=last_only, greedy=greedy)
        feats = torch.empty(tokens.numel(), len(self.feature_layers), self.hidden, dtype=self.norm.dtype)
        out = kernels.forward(tokens, positions, slots, mask, net=self, last_only=last_only, greedy=greedy,
                              features=feats, feature_layers=self.feature_layers)
        return out, feats.view(tokens.numel(), -1)


class StaticRunner(Target, Draft):
    """The ``Runner`` of the fast path (see module docstring). ``model`` is the source transformers model
    (its config is what checks read); the runner's ``StaticLlama`` holds its weights in the layout its kernels
    read.

    One copy of every weight (``ownership``): the runner takes the model's weights over, leaving the model views
    of its own tensors where its layout allows and released parameters elsewhere (packed), which raise at any use;
    ``keep_model=True`` leaves the model its own weights beside the runner's (two copies: for a process that also
    runs the model itself, or builds another runner from it). ``embedding``: read another runner's input embedding
    (its ``embedding``), holding the same values as the model's (a draft that borrows its target's).

    The cache has ``max_len`` slots (default: the model's context) plus ``tree_slots`` for the draft tree
    that sits in the cache during a verification beyond the committed tokens. ``vocab``: score only
    these token ids (a draft head over a subset of the vocabulary; see ``runner``)."""

    def __init__(self, hf, max_len: int | None = None, compile: bool = False, tree_slots: int = 320,
                 kernel: bool | None = None, *, vocab=None, fused: bool = False, embedding: Tensor | None = None,
                 keep_model: bool = False):
        self.model = hf
        self.vocab = check_vocab(vocab, vocab_rows(hf), next(hf.parameters()).device)
        self.max_len = (max_len or context_limit(hf) or 2048) + tree_slots
        if kernel is None:  # the bf16 kernel wherever it runs (bf16 weights, a CPU with AVX512-BF16)
            kernel = hf.dtype == torch.bfloat16 and next(hf.parameters()).device.type == "cpu" and kernels.available()
        self.net = StaticLlama(hf, self.max_len, compile=compile, kernel=kernel, head_rows=self.vocab,
                               fused=fused, embedding=embedding).eval()
        self.length = 0
        self.engine = FUSED if self.net.fused else \
            ("static+compile" if compile else "static") + ("+dpbf16" if kernel else "")
        if not keep_model:
            hand_over(hf, self.net.views_of(hf, self.vocab is not None),
                      f"a StaticRunner ({self.engine})")
        self._step = self.net
        if compile and not self.net.fused:  # one call a forward leaves nothing to compile
            import torch._dynamo.config as dynamo_config

            dynamo_config.cache_size_limit = max(dynamo_config.cache_size_limit, 64)
            self._step = torch.compile(self.net, dynamic=True, options=COMPILE_OPTIONS)
            print(f"dynatree: compiling the {self.engine} forward graphs (once a process)", file=sys.stderr, flush=True)
            self.warm()

    @property
    def isa(self) -> str | None:
        """The instruction set of the one-call forward's matmuls (``kernels.AVX512``, ``AMX``; None: not fused)."""
        return self.net.isa

    @property
    def embedding(self) -> Tensor:
        """The tensor the input embedding lives in (plain, or the packed tied head): what a draft or an EAGLE-3 head
        on this target reads as its embedding (one copy)."""
        return self.net.embed

    def warm(self) -> None:
        """Compile now every graph the decoders can ask for, so that no later call compiles (a graph first
        met inside a timed generation would add seconds of tracing to it). Shapes that guards tell apart:
        one new token or several, last logits only or all, and a cache of exactly one slot."""
        dev = self.net.cos.device
        for length, q, last_only in ((0, 1, False), (4, 1, False), (4, 3, False), (4, 3, True), (0, 3, True),
                                     (0, 3, False)):
            self.truncate(length)
            self.forward(torch.zeros(q, dtype=torch.long, device=dev), torch.arange(length, length + q, device=dev),
                         last_only=last_only)
        self.reset()

    def reset(self) -> None:
        self.length = 0
        self.features = None

    def keep_features(self, layers: tuple[int, ...]) -> None:
        layers = check_feature_layers(layers, self.net.cache_shape[0])
        if layers == self.net.feature_layers:  # asked again by the next generation: nothing changes
            return
        self.net.feature_layers = layers
        if self._step is not self.net:  # compiled: the graphs that return features, now rather than mid-run
            self.warm()

    def _mask(self, q: int, visible: Tensor | None, tree_start: int | None) -> Tensor:
        """[q, length + q] additive mask: the committed prefix, then causal or ``visible`` new slots."""
        if visible is None:
            visible, tree_start = torch.ones(q, q, dtype=torch.bool, device=self.net.cos.device).tril(), self.length
        return additive_mask(visible, tree_start, self.length + q, self.net.cos.dtype)

    @torch.no_grad()
    def forward(self, tokens: Tensor, positions: Tensor, visible: Tensor | None = None,
                tree_start: int | None = None, last_only: bool = False) -> Tensor:
        return self._run(tokens, positions, visible, tree_start, last_only, argmax=False)

    @torch.no_grad()
    def argmax(self, tokens: Tensor, positions: Tensor, visible: Tensor | None = None,
               tree_start: int | None = None, last_only: bool = False) -> Tensor:
        """``greedy(forward(..))``; the one-call forward finds the argmax itself and returns no logits."""
        return self._run(tokens, positions, visible, tree_start, last_only, argmax=True)

    @torch.no_grad()
    def greedy_steps(self, token: Tensor, steps: int, eos: int | None = None) -> Tensor:
        """``Target.greedy_steps`` in one kernel call where the forward is the fused one and keeps no features
        (``kernels.greedy_decode``: the same forwards, nothing on the host between them)."""
        if not self.net.fused or self.net.feature_layers:
            return super().greedy_steps(token, steps, eos)
        self._check_room(steps)
        out = kernels.greedy_decode(token, self.length, steps, eos, net=self.net)
        self.length += out.numel()
        return out

    def _check_room(self, q: int) -> None:
        if self.length + q > self.max_len:
            raise ValueError(f"static cache of {self.max_len} slots is full ({self.length} used, {q} more asked); "
                             "build the runner with a larger max_len or tree_slots")

    def _run(self, tokens: Tensor, positions: Tensor, visible: Tensor | None, tree_start: int | None,
             last_only: bool, *, argmax: bool) -> Tensor:
        q = tokens.numel()
        self._check_room(q)
        slots = torch.arange(self.length, self.length + q, device=tokens.device)
        mask, last = self._mask(q, visible, tree_start), last_only and q > 1
        if argmax and self.net.fused:
            out = self.net.one_call(tokens, positions, slots, mask, last, greedy=True)
        else:
            out = self._step(tokens, positions, slots, mask, last)
        if self.net.feature_layers:
            out, self.features = out
        self.length += q
        return greedy(out) if argmax and not self.net.fused else out

    def truncate(self, length: int) -> None:
        self.length = length

    def commit(self, start: int, keep: Tensor) -> None:
        n, m = keep.numel(), first_moved(keep)
        if m < n:  # slots already in place stay (no copy at all when only the root is kept)
            src = keep[m:] + start
            for buf in self.net.cache():
                buf[:, :, start + m:start + n] = buf.index_select(2, src)
        self.length = start + n

    def evict(self, n_sink: int, n_drop: int) -> None:
        end = self.length
        k, v = self.net.cache()
        k[:, :, n_sink:end - n_drop] = rerotate(k[:, :, n_sink + n_drop:end], -n_drop, self.net.inv_freq)
        v[:, :, n_sink:end - n_drop] = v[:, :, n_sink + n_drop:end].clone()
        self.length = end - n_drop
