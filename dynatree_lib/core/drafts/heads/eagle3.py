"""An EAGLE-3 draft head: one decoder layer fed with the target's own hidden states, stored as vLLM serves it.

The network (EAGLE-3, Li et al. 2025; the layout of SafeAILab/EAGLE's ``eagle/model/cnets.py``, of speculators'
``Eagle3Speculator`` and of vLLM's ``llama_eagle3.py``), for the pair at position t of the target's features of
token t and the next token x(t+1):

    h      = fc(cat(f_low, f_mid, f_high))                     the target's hidden states of token t, fused
    a      = cat(input_layernorm(E[x(t+1)]), hidden_norm(h))   E: the target's input embedding, borrowed (frozen)
    h'     = h + o_proj(attention(q/k/v_proj(a)))              q, k, v take 2 * hidden inputs; RoPE at position t
    out    = h' + mlp(post_attention_layernorm(h'))            a Llama MLP
    logits = lm_head(norm(out))                                over the draft vocabulary only

``out`` (before the final norm) predicts x(t+2); drafting deeper, a node's ``out`` replaces the fused target feature
of its children (the target has not seen drafted tokens). The residual is ``h`` before ``hidden_norm``
(``norm_before_residual = false``). The draft vocabulary is ``draft_vocab`` target tokens in ascending id order:
``d2t[i]`` = (target id of draft column i) - i and ``t2d`` marks the target ids it holds, as EAGLE-3 writes them.

The folder format is the vLLM speculators Eagle3 checkpoint: ``config.json`` (``speculators_model_type``,
``speculators_config``, ``transformer_layer_config``, ``draft_vocab_size``, ``target_hidden_size``,
``eagle_aux_hidden_state_layer_ids``, ``norm_before_residual``) and ``model.safetensors`` with the tensors
``fc.weight``, ``layers.0.*``, ``norm.weight``, ``lm_head.weight``, ``d2t``, ``t2d``. It has no
``embed_tokens.weight``: vLLM then shares the target's embedding, and so do we (one copy of every weight).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...engines import kernels
from .base import OUR_KEY, draft_columns

EXPORT_VERSION = "0.3.0"  # the speculators format version whose fields config.json writes


@dataclass(frozen=True)
class Eagle3Config:
    """The head's shape (its decoder layer has the target's layer shape), the target layers it reads (layer ids:
    the hidden state entering that decoder layer) and its draft vocabulary size."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    rms_eps: float
    rope_theta: float
    max_positions: int
    target_vocab: int
    draft_vocab: int
    aux_layers: tuple[int, ...]
    target_hidden: int

    @staticmethod
    def for_target(cfg, draft_vocab: int, aux_layers: tuple[int, ...] | None = None) -> "Eagle3Config":
        """A head for a transformers Llama-style target config (``aux_layers`` default: EAGLE-3's)."""
        n = cfg.num_hidden_layers
        heads = cfg.num_attention_heads
        return Eagle3Config(cfg.hidden_size, heads, cfg.num_key_value_heads,
                            getattr(cfg, "head_dim",
                                    None) or cfg.hidden_size // heads, intermediate=cfg.intermediate_size,
                            rms_eps=float(cfg.rms_norm_eps), rope_theta=rope_theta(cfg), max_positions=cfg.max_position_embeddings, target_vocab=cfg.vocab_size,
                            draft_vocab=draft_vocab, aux_layers=tuple(aux_layers) if aux_layers else default_aux_layers(n), target_hidden=cfg.hidden_size)


def default_aux_layers(n_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's low, middle and high layers for an ``n_layers`` target: the hidden states entering layers 2,
    n // 2 and n - 3 (clamped into a small target's layers, repeats kept: the fused input is always three wide)."""
    return tuple(sorted(min(max(i, 0), n_layers - 1) for i in (2, n_layers // 2, n_layers - 3)))


def rope_theta(cfg) -> float:
    rope = getattr(cfg, "rope_parameters", None)
    return float(rope["rope_theta"]) if rope and "rope_theta" in rope else float(cfg.rope_theta)


class RMSNorm(nn.Module):
    """transformers' Llama RMSNorm: statistics in fp32, the weight applied in the input's dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def linear(n_in: int, n_out: int, device=None) -> nn.Linear:
    return nn.Linear(n_in, n_out, bias=False, device=device)


class Eagle3Layer(nn.Module):
    """The decoder layer, its submodules named as the format names its tensors (``layers.0.<name>``)."""

    def __init__(self, c: Eagle3Config, device=None):
        super().__init__()
        self.input_layernorm, self.hidden_norm = RMSNorm(c.hidden, c.rms_eps), RMSNorm(c.hidden, c.rms_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.rms_eps)
        self.self_attn = nn.Module()
        self.self_attn.q_proj = linear(2 * c.hidden, c.heads * c.head_dim, device)
        self.self_attn.k_proj = linear(2 * c.hidden, c.kv_heads * c.head_dim, device)
        self.self_attn.v_proj = linear(2 * c.hidden, c.kv_heads * c.head_dim, device)
        self.self_attn.o_proj = linear(c.heads * c.head_dim, c.hidden, device)
        self.mlp = nn.Module()
        self.mlp.gate_proj = linear(c.hidden, c.intermediate, device)
        self.mlp.up_proj = linear(c.hidden, c.intermediate, device)
        self.mlp.down_proj = linear(c.intermediate, c.hidden, device)


class Eagle3Head(nn.Module):
    """The head (see module docstring). ``embedding``: the target's input embedding weight, read, never copied
    (it is not a parameter of the head: not trained, not saved); plain [V, d], or a fast-path target runner's packed
    tied head (``kernels.embedding`` reads its rows). ``config`` is a transformers ``LlamaConfig`` of
    the layer with the target's vocabulary, which the loops' checks read as they read any model's. ``linears_on``:
    the device of the linear layers' weights ("meta" for weights that a load assigns: ``load_head``)."""

    def __init__(self, c: Eagle3Config, embedding: Tensor, linears_on=None):
        super().__init__()
        from transformers import LlamaConfig

        if kernels.unpacked_shape(embedding) != (c.target_vocab, c.hidden):
            raise ValueError(f"the target's embedding is {kernels.unpacked_shape(embedding)}; the head needs "
                             f"[{c.target_vocab}, {c.hidden}] (its target_vocab, hidden)")
        self.cfg = c
        self.config = LlamaConfig(**layer_config(c))
        object.__setattr__(self, "embed_tokens", embedding)  # a plain reference: not registered, not saved
        self.fc = linear(3 * c.target_hidden, c.hidden, linears_on)
        self.layers = nn.ModuleList([Eagle3Layer(c, linears_on)])
        self.norm = RMSNorm(c.hidden, c.rms_eps)
        self.lm_head = linear(c.hidden, c.draft_vocab, linears_on)
        self.register_buffer("d2t", torch.zeros(c.draft_vocab, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(c.target_vocab, dtype=torch.bool))
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim))
        object.__setattr__(self, "inv_freq", inv)  # fp32 whatever the head's dtype (not a buffer: .to() keeps it)

    @property
    def layer(self) -> Eagle3Layer:
        return self.layers[0]

    def get_output_embeddings(self):
        """None: the head's vocabulary is the target's (``config.vocab_size``); it scores a subset (``vocab``)."""
        return None

    def set_vocab(self, ids: Tensor) -> None:
        """Draft columns = the target ids ``ids`` (distinct), sorted ascending (``d2t``, ``t2d``)."""
        ids = draft_columns(ids, self.cfg.draft_vocab)
        self.d2t.copy_(ids - torch.arange(ids.numel()))
        self.t2d.zero_()
        self.t2d[ids] = True

    def vocab(self) -> Tensor:
        """Target token id of every draft column."""
        return torch.arange(self.cfg.draft_vocab, device=self.d2t.device) + self.d2t

    def rope(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos, sin [..., head_dim] at ``positions`` (fp32 angles cast to ``dtype``, as transformers does)."""
        f = positions.float()[..., None] * self.inv_freq.to(positions.device)
        emb = torch.cat([f, f], -1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def project(self, tokens: Tensor, hidden: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries [.., H, n, hd], keys and values [.., KV, n, hd] (RoPE applied) of the pairs (``hidden`` [.., n, h]
        fused or the head's own output, next ``tokens`` [.., n]) at ``positions`` [.., n]."""
        c, L = self.cfg, self.layer
        e = kernels.embedding(tokens, self.embed_tokens).to(hidden.dtype)
        a = torch.cat([L.input_layernorm(e), L.hidden_norm(hidden)], -1)
        cos, sin = self.rope(positions, hidden.dtype)
        heads = lambda x, n: x.unflatten(-1, (n, c.head_dim)).transpose(-3, -2)
        q = rotate(heads(L.self_attn.q_proj(a), c.heads), cos, sin)
        k = rotate(heads(L.self_attn.k_proj(a), c.kv_heads), cos, sin)
        return q, k, heads(L.self_attn.v_proj(a), c.kv_heads)

    def finish(self, attended: Tensor, hidden: Tensor) -> Tensor:
        """The layer's output [.., n, h] from the attention's output [.., H, n, hd] and the residual ``hidden``."""
        L = self.layer
        x = hidden + L.self_attn.o_proj(attended.transpose(-3, -2).flatten(-2))
        m = L.post_attention_layernorm(x)
        return x + L.mlp.down_proj(F.silu(L.mlp.gate_proj(m)) * L.mlp.up_proj(m))

    def logits(self, out: Tensor) -> Tensor:
        return self.lm_head(self.norm(out))

    def forward(self, input_ids: Tensor, hidden_states: Tensor, position_ids: Tensor,
                attention_mask: Tensor | None = None, past: tuple[Tensor, Tensor] | None = None):
        """One sequence's step, as the reference models run it: ``hidden_states`` [n, 3 * target_hidden] (fused
        here) or [n, hidden] (the head's own outputs), ``input_ids`` [n] the next tokens, ``attention_mask`` an
        additive [n, past + n] (None: causal), ``past`` keys and values [KV, past, hd]. Returns the layer's output
        [n, h] (before the final norm) and the keys and values [KV, past + n, hd]."""
        h = self.fc(hidden_states) if hidden_states.shape[-1] != self.cfg.hidden else hidden_states
        q, k, v = self.project(input_ids, h, position_ids)
        if past is not None:
            k, v = torch.cat([past[0], k], -2), torch.cat([past[1], v], -2)
        if attention_mask is None:
            n, total = q.shape[-2], k.shape[-2]
            attention_mask = torch.full((n, total), torch.finfo(h.dtype).min, dtype=h.dtype).triu(total - n + 1)
        return self.finish(attend(q, k, v, attention_mask), h), (k, v)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate-half RoPE of ``x`` [.., heads, n, hd] with tables [.., n, hd]."""
    half = x.shape[-1] // 2
    cos, sin = cos.unsqueeze(-3), sin.unsqueeze(-3)
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """Grouped-query attention (transformers' eager order, softmax in fp32): ``q`` [.., H, n, hd] over ``k``, ``v``
    [.., KV, kv, hd] with an additive ``mask`` [.., n, kv]; returns [.., H, n, hd]."""
    g = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(g, dim=-3), v.repeat_interleave(g, dim=-3)
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5 + mask.unsqueeze(-3)
    return s.float().softmax(-1).to(q.dtype) @ v



# ---- teacher-forced: every row's step at once (training, and the pair report's agreement) --------------------------

def fused_features(hidden_states, layers: tuple[int, ...]) -> Tensor:
    """The hidden states entering ``layers`` (a transformers ``output_hidden_states`` tuple: entry i enters layer
    i), concatenated along the last dim in that order: what ``fc`` reads."""
    return torch.cat([hidden_states[i] for i in layers], -1)


def ttt_outputs(head: Eagle3Head, features: Tensor, tokens: Tensor, steps: int) -> list[Tensor]:
    """The layer's outputs [B, T - 1 - i, h] of each unrolled step i. Row t at step i pairs the input of row t (the
    fused ``features`` of token t at step 0, else the head's own step-(i - 1) output) with token t + 1 + i at
    position t + i, attending to step 0's rows up to t and to its own rows of steps 1..i: a node i levels below
    the committed token t + 1, as the drafter feeds it."""
    R, dev = tokens.shape[1] - 1, tokens.device
    hidden = head.fc(features[:, :R])
    causal = torch.full((R, R), torch.finfo(torch.float32).min, device=dev).triu(1)
    keys, values, outs = [], [], []
    for i in range(min(steps, R)):
        rows = R - i  # rows whose input token exists
        q, k, v = head.project(tokens[:, 1 + i:1 + i + rows], hidden[:, :rows], torch.arange(rows, device=dev) + i)
        keys, values = [x[..., :rows, :] for x in keys] + [k], [x[..., :rows, :] for x in values] + [v]
        hidden = head.finish(ttt_attend(q, keys, values, causal[:rows, :rows].to(q.dtype)), hidden[:, :rows])
        outs.append(hidden)
    return outs


def ttt_attend(q: Tensor, keys: list[Tensor], values: list[Tensor], causal: Tensor) -> Tensor:
    """Step-i attention of ``q`` [B, H, R, hd]: causally over step 0's keys, and at each row over its own keys of
    steps 1..i (``keys``/``values``: one [B, KV, R, hd] per step)."""
    g = q.shape[1] // keys[0].shape[1]
    rep = lambda x: x.repeat_interleave(g, dim=1)
    scale = q.shape[-1] ** -0.5
    scores = [q @ rep(keys[0]).transpose(-1, -2) * scale + causal]
    scores += [(q * rep(k)).sum(-1, keepdim=True) * scale for k in keys[1:]]
    p = torch.cat(scores, -1).float().softmax(-1).to(q.dtype)
    R = q.shape[2]
    out = p[..., :R] @ rep(values[0])
    for j, v in enumerate(values[1:]):
        out = out + p[..., R + j:R + j + 1] * rep(v)
    return out


@torch.no_grad()
def first_drafts(head: Eagle3Head, tokens: Tensor, features: Tensor) -> Tensor:
    """Logits [n, V'] (the draft vocabulary's columns) of the token the head drafts first after each prefix
    ``tokens[:j + 1]`` of one sequence (``tokens`` [n]; ``features`` [n, 3 * target_hidden]: the target's fused
    features of each token from one teacher-forced forward): the pair report's teacher-forced draft. Row j >= 1 is
    training's step 0 (``ttt_outputs``) at row j - 1, the pair (features of token j - 1, token j); row 0, where no
    token precedes the first, is what ``Eagle3Runner`` drafts after a lone first token (a zero input at
    position -1, attending to itself alone)."""
    step0 = ttt_outputs(head, features[None].to(head.fc.weight.dtype), tokens[None], 1)
    rows = step0[0][0] if step0 else head.fc.weight.new_zeros(0, head.cfg.hidden)
    lone, _ = head(tokens[:1], rows.new_zeros(1, head.cfg.hidden), torch.tensor([-1], device=tokens.device))
    return head.logits(torch.cat([lone, rows]))

# ---- the folder format (vLLM speculators' Eagle3) -------------------------------------------------------------

def layer_config(c: Eagle3Config) -> dict:
    """``transformer_layer_config``: the decoder layer as a one-layer Llama over the target's vocabulary."""
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": c.hidden,
            "intermediate_size": c.intermediate, "num_attention_heads": c.heads, "num_key_value_heads": c.kv_heads,
            "head_dim": c.head_dim, "num_hidden_layers": 1, "rms_norm_eps": c.rms_eps, "hidden_act": "silu",
            "rope_theta": c.rope_theta, "rope_parameters": {"rope_theta": c.rope_theta, "rope_type": "default"},
            "max_position_embeddings": c.max_positions, "vocab_size": c.target_vocab, "attention_bias": False,
            "mlp_bias": False, "tie_word_embeddings": False}


def speculators_config(head: Eagle3Head, verifier: str, speculative_tokens: int, extra: dict | None = None) -> dict:
    """``config.json`` of the head in the speculators Eagle3 format; ``extra`` goes under ``OUR_KEY``."""
    c = head.cfg
    return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
            "speculators_version": EXPORT_VERSION, "draft_vocab_size": c.draft_vocab,
            "target_hidden_size": c.target_hidden, "eagle_aux_hidden_state_layer_ids": list(c.aux_layers),
            "norm_before_residual": False, "embed_requires_grad": False,
            "dtype": str(head.fc.weight.dtype).removeprefix("torch."), "transformer_layer_config": layer_config(c),
            "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                   "proposal_methods": [{"proposal_type": "greedy",
                                                         "speculative_tokens": speculative_tokens,
                                                         "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                                   "verifier": {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]}},
            OUR_KEY: {"config": asdict(c), **(extra or {})}}


def save_head(head: Eagle3Head, folder: Path, verifier: str, speculative_tokens: int = 3,
              extra: dict | None = None) -> Path:
    """Write ``config.json`` and ``model.safetensors`` (every tensor but the borrowed embedding)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in head.state_dict().items()}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    cfg = speculators_config(head, verifier, speculative_tokens, extra)
    (folder / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    return folder


def read_config(folder: Path) -> tuple[Eagle3Config, dict]:
    """The head's shape from a speculators Eagle3 ``config.json`` (and the whole file)."""
    path = Path(folder) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: {folder} is not an EAGLE-3 head folder")
    raw = json.loads(path.read_text())
    if raw.get("speculators_model_type") != "eagle3":
        raise ValueError(f"{path}: speculators_model_type is {raw.get('speculators_model_type')!r}, not 'eagle3'")
    if raw.get("norm_before_residual", False):
        raise ValueError(f"{path}: norm_before_residual=true is not supported (EAGLE-3's own layout is false)")
    t = raw["transformer_layer_config"]
    heads = t["num_attention_heads"]
    c = Eagle3Config(t["hidden_size"], heads, t.get("num_key_value_heads", heads),
                     t.get("head_dim") or t["hidden_size"] // heads, intermediate=t["intermediate_size"], rms_eps=float(t["rms_norm_eps"]),
                     rope_theta=float((t.get("rope_parameters") or {}).get("rope_theta", t.get("rope_theta", 10000.0))),
                     max_positions=t.get("max_position_embeddings",
                                         2048), target_vocab=t["vocab_size"], draft_vocab=raw["draft_vocab_size"],
                     aux_layers=tuple(raw["eagle_aux_hidden_state_layer_ids"]), target_hidden=raw.get("target_hidden_size") or t["hidden_size"])
    return c, raw


def load_head(folder: Path, embedding: Tensor, dtype: torch.dtype | None = None) -> Eagle3Head:
    """A head folder under the target's ``embedding`` (in ``dtype``, default the embedding's), eval mode."""
    from safetensors.torch import load_file

    c, _ = read_config(folder)
    head = Eagle3Head(c, embedding, linears_on="meta")  # no values made only to be overwritten
    tensors = load_file(str(Path(folder) / "model.safetensors"))
    want = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in tensors.items()}
    if want != got:
        bad = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
        raise ValueError(f"{Path(folder) / 'model.safetensors'}: tensors do not fit the head of its config.json "
                         f"({', '.join(f'{k}: {got.get(k)} for {want.get(k)}' for k in bad[:4])})")
    # copies: the loader's tensors view the mapped file, which stays in memory while one of them lives
    head.load_state_dict({k: v.clone() for k, v in tensors.items()}, assign=True)
    return head.to(dtype or embedding.dtype).eval()
