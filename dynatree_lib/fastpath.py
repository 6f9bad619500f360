"""The fast path: a gpt-fast-style Llama over a preallocated static KV cache, optionally compiled.

``StaticLlama`` holds a transformers Llama's weights with the attention projections fused (one q/k/v
matmul) and the MLP's gate and up projections fused (one matmul), and a cache of ``max_len`` slots per
layer written in place. ``StaticRunner`` serves it to the decoding loops (the ``Runner`` role): no
per-step allocation of cache tensors, no transformers call overhead, attention over the used part of the
cache only. With ``compile=True`` each query size is padded up to a bucket (1, 2, 4, ..., 64; the mask
hides the padding) and every bucket is one ``torch.compile`` graph over the whole cache.

Numerics follow transformers' Llama (fp32 RMSNorm statistics, rotate-half RoPE with fp32 tables cast to
the model dtype, SDPA attention), so in fp32 the fast path's greedy tokens equal transformers' (tested).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .runners import context_limit, rerotate

BUCKETS = (1, 2, 4, 8, 16, 32, 64)


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


def _rope_theta(cfg) -> float:
    rope = getattr(cfg, "rope_parameters", None)
    return float(rope["rope_theta"]) if rope and "rope_theta" in rope else float(cfg.rope_theta)


class StaticLlama(nn.Module):
    """A Llama forward over a static cache (see module docstring). Built from a transformers model."""

    def __init__(self, hf, max_len: int):
        super().__init__()
        check_fast_supported(hf)
        c = hf.config
        self.H, self.KV = c.num_attention_heads, c.num_key_value_heads
        self.hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps, self.inter, self.max_len = c.rms_norm_eps, c.intermediate_size, max_len
        dtype, dev = hf.dtype, next(hf.parameters()).device
        w = lambda t: nn.Parameter(t.detach().clone(), requires_grad=False)
        layers = hf.model.layers
        self.embed = w(hf.model.embed_tokens.weight)
        self.wqkv = nn.ParameterList([w(torch.cat([L.self_attn.q_proj.weight, L.self_attn.k_proj.weight,
                                                   L.self_attn.v_proj.weight])) for L in layers])
        self.wo = nn.ParameterList([w(L.self_attn.o_proj.weight) for L in layers])
        self.w13 = nn.ParameterList([w(torch.cat([L.mlp.gate_proj.weight, L.mlp.up_proj.weight])) for L in layers])
        self.w2 = nn.ParameterList([w(L.mlp.down_proj.weight) for L in layers])
        self.ln1 = nn.ParameterList([w(L.input_layernorm.weight) for L in layers])
        self.ln2 = nn.ParameterList([w(L.post_attention_layernorm.weight) for L in layers])
        self.norm = w(hf.model.norm.weight)
        self.head = w(hf.lm_head.weight)
        shape = (len(layers), 1, self.KV, max_len, self.hd)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=dev), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=dev), persistent=False)
        inv = 1.0 / (_rope_theta(c) ** (torch.arange(0, self.hd, 2, dtype=torch.float32, device=dev) / self.hd))
        f = torch.outer(torch.arange(max_len, dtype=torch.float32, device=dev), inv)
        self.register_buffer("inv_freq", inv, persistent=False)
        self.register_buffer("cos", torch.cat([f, f], -1).cos().to(dtype), persistent=False)
        self.register_buffer("sin", torch.cat([f, f], -1).sin().to(dtype), persistent=False)

    def _rms(self, x: Tensor, w: Tensor) -> Tensor:
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    @staticmethod
    def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        h = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin

    def forward(self, tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor, kv_len: int,
                last_only: bool = False) -> Tensor:
        """Logits [q, V] ([1, V] if ``last_only``): ``tokens`` at ``positions``, written to cache ``slots``,
        attending to slots [0, kv_len) through the additive ``mask`` [q, kv_len]."""
        q_len, H, KV, hd = tokens.shape[0], self.H, self.KV, self.hd
        x = F.embedding(tokens, self.embed)
        cos, sin = self.cos[positions][None, None], self.sin[positions][None, None]
        m = mask[None, None]
        for i in range(len(self.wqkv)):
            qkv = self._rms(x, self.ln1[i]) @ self.wqkv[i].t()
            q, k, v = qkv.split([H * hd, KV * hd, KV * hd], -1)
            q = self._rope(q.view(q_len, H, hd).transpose(0, 1)[None], cos, sin)
            self.k[i].index_copy_(2, slots, self._rope(k.view(q_len, KV, hd).transpose(0, 1)[None], cos, sin))
            self.v[i].index_copy_(2, slots, v.view(q_len, KV, hd).transpose(0, 1)[None])
            o = F.scaled_dot_product_attention(q, self.k[i][:, :, :kv_len], self.v[i][:, :, :kv_len], attn_mask=m,
                                               enable_gqa=H != KV)
            x = x + o[0].transpose(0, 1).reshape(q_len, H * hd) @ self.wo[i].t()
            gate, up = (self._rms(x, self.ln2[i]) @ self.w13[i].t()).split([self.inter, self.inter], -1)
            x = x + (F.silu(gate) * up) @ self.w2[i].t()
        if last_only:
            x = x[-1:]
        return self._rms(x, self.norm) @ self.head.t()


class StaticRunner:
    """The ``Runner`` of the fast path (see module docstring). ``model`` is the source transformers model
    (its config is what checks read); the runner owns a ``StaticLlama`` copy of its weights.

    The cache has ``max_len`` slots (default: the model's context) plus ``tree_slots`` for the draft tree
    that sits in the cache during a verification beyond the committed tokens."""

    def __init__(self, hf, max_len: int | None = None, compile: bool = False, tree_slots: int = 320):
        self.model = hf
        self.max_len = (max_len or context_limit(hf) or 2048) + tree_slots
        self.net = StaticLlama(hf, self.max_len + (BUCKETS[-1] if compile else 0)).eval()
        self.length, self.compiled = 0, compile
        self.engine = "static+compile" if compile else "static"
        self._neg = torch.finfo(hf.dtype).min
        self._step = self.net
        if compile:
            import torch._dynamo.config as dynamo_config
            import torch._inductor.config as inductor_config

            inductor_config.freezing = True   # weights become constants: prepacked matmuls
            dynamo_config.cache_size_limit = max(dynamo_config.cache_size_limit, 64)
            self._step = torch.compile(self.net, dynamic=False)

    def reset(self) -> None:
        self.length = 0

    def _mask(self, q: int, rows: int, cols: int, visible: Tensor | None, tree_start: int | None) -> Tensor:
        dev = self.net.k.device
        mask = torch.full((rows, cols), self._neg, dtype=self.net.k.dtype, device=dev)
        if visible is None:
            mask[:q, :self.length] = 0
            mask[:q, self.length:self.length + q].masked_fill_(
                torch.ones(q, q, dtype=torch.bool, device=dev).tril(), 0)
        else:
            mask[:q, :tree_start] = 0
            mask[:q, tree_start:tree_start + visible.shape[1]].masked_fill_(visible, 0)
        mask[q:, 0] = 0  # padding rows see one slot: finite softmax, discarded output
        return mask

    @torch.no_grad()
    def forward(self, tokens: Tensor, positions: Tensor, visible: Tensor | None = None,
                tree_start: int | None = None, last_only: bool = False) -> Tensor:
        q = tokens.numel()
        if self.length + q > self.max_len:
            raise ValueError(f"static cache of {self.max_len} slots is full ({self.length} used, {q} more asked); "
                             "build the runner with a larger max_len or tree_slots")
        if self.compiled and q > BUCKETS[-1]:  # long prefill: bucket-sized chunks through the compiled graphs
            assert visible is None
            out = [self.forward(tokens[s:s + BUCKETS[-1]], positions[s:s + BUCKETS[-1]], last_only=last_only)
                   for s in range(0, q, BUCKETS[-1])]
            return out[-1] if last_only else torch.cat(out)
        dev = tokens.device
        slots = torch.arange(self.length, self.length + q, device=dev)
        if self.compiled:
            b = next(x for x in BUCKETS if x >= q)
            pad = b - q
            tokens = F.pad(tokens, (0, pad))
            positions = F.pad(positions, (0, pad), value=int(positions[-1]))
            slots = torch.arange(self.length, self.length + b, device=dev)
            kv = self.net.max_len
            logits = self._step(tokens, positions, slots, self._mask(q, b, kv, visible, tree_start), kv)[:q]
        else:
            kv = min(self.net.max_len, 64 * math.ceil((self.length + q) / 64))  # attend to the used part only
            logits = self._step(tokens, positions, slots, self._mask(q, q, kv, visible, tree_start), kv, last_only)
        self.length += q
        return logits[-1:] if last_only else logits

    def truncate(self, length: int) -> None:
        self.length = length

    def commit(self, start: int, keep: Tensor) -> None:
        n = keep.numel()
        src = keep + start
        for buf in (self.net.k, self.net.v):
            buf[:, :, :, start:start + n] = buf.index_select(3, src)
        self.length = start + n

    def evict(self, n_sink: int, n_drop: int) -> None:
        end = self.length
        k, v = self.net.k, self.net.v
        k[:, :, :, n_sink:end - n_drop] = rerotate(k[:, :, :, n_sink + n_drop:end], -n_drop, self.net.inv_freq)
        v[:, :, :, n_sink:end - n_drop] = v[:, :, :, n_sink + n_drop:end].clone()
        self.length = end - n_drop
