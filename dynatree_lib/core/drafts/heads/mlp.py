"""Medusa and Hydra draft heads: small MLPs on the target's last hidden state, one head per drafted level.

Offsets. Say the target has read the tokens up to x(p - 1). Its last hidden state there, after its final norm
(``h(p - 1)``: feature layer id L, the number of its layers; ``runner``), is what its own output layer read to
give x(p), the bonus token that roots the next draft tree. Head k (k = 0 .. K - 1; the papers' head k + 1)
predicts x(p + 1 + k), k + 1 positions after that root, from the same ``h(p - 1)``: head 0 drafts the root's
children, and a tree node at depth d gets head d's distribution (``core.drafts.heads.mlp_runner``).

- Medusa (Cai et al. 2024): ``logits_k = lm_heads[k](blocks[k](h))``, a block being ``layers`` residual layers
  ``x + SiLU(W x + b)``. The drafted tokens are no input: every node at depth d gets the same distribution, and the
  tree policies choose which of its candidates to combine (Medusa's own trees are such combinations).
- Hydra (Ankner et al. 2024; its MLP head with "grounded" heads, the simple variant of the paper, not Hydra++'s
  prefix attention): head k reads ``[h; E x(p); E x(p + 1); ..; E x(p + k)]``, the root and the drafted path down to
  the node whose children it drafts (E: the target's input embedding, borrowed, never copied), so its distribution
  depends on the path. Its first residual layer maps that (k + 2) * hidden wide input to ``R x + SiLU(W x + b)``
  (R linear, as Hydra's ``res_connection``); further layers are Medusa's.

Training, teacher-forced (``train.mlp_heads``): at row t, ``h(t)`` and the true tokens x(t + 1) .. x(t + 1 + k);
head k's target is the target's own law of x(t + 2 + k) (its logits at position t + 1 + k).

Vocabulary. Every head scores the same ``draft_vocab`` target tokens, ``token_map`` (the target id of each
column, ascending; the same most frequent tokens as the EAGLE-3 head's build picks), through its own output layer,
initialised from the target's output rows at those ids: with its residual weights at zero, head k starts as the
target's own next-token law (Medusa's initialisation).

Folder format: vLLM's Medusa checkpoint (``config.json`` with ``model_type`` "medusa", ``hidden_size``,
``vocab_size``, ``num_heads``, ``num_hidden_layers``, ``truncated_vocab_size``, ``medusa_fc_bias``; tensors
``blocks.{k}.layers.{j}.weight`` / ``.bias``, ``lm_heads.{k}.weight``, ``token_map``). A Hydra folder has the same
layout with ``model_type`` "hydra" and ``blocks.{k}.res.weight`` (a layout of ours: no server reads Hydra heads).
What this library adds (the feature layer, the context the head was built for, its training record) is under
``config.json``'s ``OUR_KEY``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...engines import kernels
from .base import OUR_KEY, draft_columns

KINDS = {"medusa": "MedusaModel", "hydra": "HydraModel"}  # model_type -> architectures entry of config.json


@dataclass(frozen=True)
class MLPHeadConfig:
    """The heads' shape: ``kind`` (``KINDS``), ``heads`` (K: levels it drafts), ``layers`` (residual layers a head),
    the target's ``hidden`` size and vocabulary, the ``draft_vocab`` its heads score, the target ``feature_layer``
    it reads (the target's layer count: its last hidden state) and the context it serves (``max_positions``)."""

    kind: str
    heads: int
    layers: int
    hidden: int
    target_vocab: int
    draft_vocab: int
    feature_layer: int
    max_positions: int

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        for name in ("heads", "layers", "hidden", "target_vocab", "draft_vocab", "max_positions"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.draft_vocab > self.target_vocab:
            raise ValueError(f"draft_vocab ({self.draft_vocab}) exceeds the target's vocabulary ({self.target_vocab})")

    @property
    def grounded(self) -> bool:
        """Whether a head reads the drafted path (Hydra) or the hidden state alone (Medusa)."""
        return self.kind == "hydra"

    def width(self, k: int) -> int:
        """Input width of head ``k``: the hidden state, plus the root's and k drafted tokens' embeddings (Hydra)."""
        return self.hidden * (k + 2) if self.grounded else self.hidden

    @staticmethod
    def for_target(cfg, kind: str, heads: int, draft_vocab: int, layers: int = 1) -> "MLPHeadConfig":
        """Heads for a transformers target config (its hidden size, vocabulary, layer count and context)."""
        return MLPHeadConfig(kind, heads, layers, cfg.hidden_size, target_vocab=cfg.vocab_size, draft_vocab=draft_vocab,
                             feature_layer=cfg.num_hidden_layers, max_positions=cfg.max_position_embeddings)


class ResidualBlock(nn.Module):
    """``layers`` residual layers ``x + SiLU(W x + b)``; from a wider input (Hydra), the first is ``R x + SiLU(W x +
    b)`` (``res``: R). Submodules named as the folder names its tensors (``blocks.{k}.layers.{j}``, ``.res``)."""

    def __init__(self, n_in: int, hidden: int, layers: int):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(n_in if j == 0 else hidden, hidden) for j in range(layers)])
        self.res = nn.Linear(n_in, hidden, bias=False) if n_in != hidden else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        x = self.res(x) + F.silu(self.layers[0](x))
        for layer in self.layers[1:]:
            x = x + F.silu(layer(x))
        return x


class MLPHeads(nn.Module):
    """K Medusa or Hydra heads (see module docstring). ``embedding``: the target's input embedding weight, read
    (Hydra's token inputs), never copied or saved. ``config`` is what the loops' checks read of any model: the
    target's vocabulary and context, ``model_type`` the kind."""

    def __init__(self, c: MLPHeadConfig, embedding: Tensor):
        super().__init__()
        from transformers import PretrainedConfig

        if kernels.unpacked_shape(embedding) != (c.target_vocab, c.hidden):
            raise ValueError(f"the target's embedding is {kernels.unpacked_shape(embedding)}; the heads need "
                             f"[{c.target_vocab}, {c.hidden}] (their target_vocab, hidden)")
        self.cfg = c
        self.config = PretrainedConfig(vocab_size=c.target_vocab, max_position_embeddings=c.max_positions,
                                       hidden_size=c.hidden, num_hidden_layers=c.layers)
        self.config.model_type = c.kind
        object.__setattr__(self, "embed_tokens", embedding)  # a plain reference: not registered, not saved
        self.blocks = nn.ModuleList([ResidualBlock(c.width(k), c.hidden, c.layers) for k in range(c.heads)])
        self.lm_heads = nn.ModuleList([nn.Linear(c.hidden, c.draft_vocab, bias=False) for _ in range(c.heads)])
        self.register_buffer("token_map", torch.arange(c.draft_vocab))

    def get_output_embeddings(self):
        """None: the heads' vocabulary is the target's (``config.vocab_size``); they score a subset (``vocab``)."""
        return None

    def set_vocab(self, ids: Tensor) -> None:
        """Draft columns = the target ids ``ids`` (distinct), sorted ascending (``token_map``)."""
        self.token_map.copy_(draft_columns(ids, self.cfg.draft_vocab))

    def vocab(self) -> Tensor:
        """Target token id of every draft column."""
        return self.token_map

    def head(self, k: int, hidden: Tensor, path: Tensor | None = None) -> Tensor:
        """Head ``k``'s logits [.., V'] from the target's last hidden states ``hidden`` [.., h] and, for Hydra, the
        tokens ``path`` [.., k + 1] from the root down to the node whose children it drafts."""
        if self.cfg.grounded:
            e = kernels.embedding(path[..., :k + 1], self.embed_tokens).to(hidden.dtype)
            hidden = torch.cat([hidden, e.flatten(-2)], -1)
        return self.lm_heads[k](self.blocks[k](hidden))

    def forward(self, hidden_states: Tensor, input_ids: Tensor | None = None,
                position_ids: Tensor | None = None) -> list[Tensor]:
        """Teacher-forced: each head's logits [.., T - 1 - k, V'], row t from ``hidden_states[.., t, :]`` [.., T, h]
        and (Hydra) the tokens ``input_ids[.., t + 1 .. t + 1 + k]`` [.., T]; row t of head k drafts x(t + 2 + k).
        ``position_ids`` is unused (no head reads a position; named so that the loops' checks see explicit
        positions, as for any draft)."""
        T, out = hidden_states.shape[-2], []
        for k in range(min(self.cfg.heads, T - 1)):
            rows = T - 1 - k
            path = None
            if self.cfg.grounded:
                path = torch.stack([input_ids[..., 1 + j:1 + j + rows] for j in range(k + 1)], -1)
            out.append(self.head(k, hidden_states[..., :rows, :], path))
        return out


# ---- the folder format (vLLM's Medusa checkpoint; Hydra in the same layout) ---------------------------------------

def folder_config(heads: MLPHeads, verifier: str, extra: dict | None = None) -> dict:
    """``config.json`` of the heads; ``extra`` goes under ``OUR_KEY``."""
    c = heads.cfg
    return {"architectures": [KINDS[c.kind]], "model_type": c.kind, "hidden_size": c.hidden,
            "vocab_size": c.target_vocab, "num_heads": c.heads, "num_hidden_layers": c.layers,
            "truncated_vocab_size": c.draft_vocab, "medusa_fc_bias": True, "base_model_name_or_path": verifier,
            "dtype": str(heads.lm_heads[0].weight.dtype).removeprefix("torch."),
            OUR_KEY: {"feature_layer": c.feature_layer, "max_positions": c.max_positions, **(extra or {})}}


def save_heads(heads: MLPHeads, folder: Path, verifier: str, extra: dict | None = None) -> Path:
    """Write ``config.json`` and ``model.safetensors`` (every tensor but the borrowed embedding)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in heads.state_dict().items()}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(folder_config(heads, verifier, extra), indent=1) + "\n")
    return folder


def field(raw: dict, path: Path, name: str, where: str = ""):
    """``raw[name]``, refused with the file and the field named when it is missing."""
    if name not in raw:
        raise ValueError(f"{path}: field {where + name!r} is missing")
    return raw[name]


def read_config(folder: Path, kind: str | None = None) -> tuple[MLPHeadConfig, dict]:
    """The heads' shape from a folder's ``config.json`` (and the whole file); ``kind``: the kind a reference named
    (a folder of the other kind is refused)."""
    path = Path(folder) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: {folder} is not a Medusa or Hydra head folder")
    try:
        raw = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e})") from e
    got = raw.get("model_type")
    if got not in KINDS or (kind is not None and got != kind):
        want = repr(kind) if kind else " or ".join(map(repr, KINDS))
        raise ValueError(f"{path}: model_type is {got!r}, not {want}")
    if field(raw, path, "medusa_fc_bias") is not True:
        raise ValueError(f"{path}: medusa_fc_bias must be true (our residual layers carry biases)")
    ours = field(raw, path, OUR_KEY)
    args = [field(raw, path, n) for n in ("num_heads", "num_hidden_layers", "hidden_size", "vocab_size",
                                          "truncated_vocab_size")]
    args += [field(ours, path, n, f"{OUR_KEY}.") for n in ("feature_layer", "max_positions")]
    try:
        return MLPHeadConfig(got, *args), raw
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e


def load_heads(folder: Path, embedding: Tensor, dtype: torch.dtype | None = None, kind: str | None = None) -> MLPHeads:
    """A head folder under the target's ``embedding`` (in ``dtype``, default the embedding's), eval mode; ``kind``
    as ``read_config``."""
    from safetensors.torch import load_file

    c, _ = read_config(folder, kind)
    heads = MLPHeads(c, embedding)
    path = Path(folder) / "model.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: {folder} holds no head weights")
    tensors = load_file(str(path))
    want = {k: tuple(v.shape) for k, v in heads.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in tensors.items()}
    if want != got:
        bad = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
        raise ValueError(f"{path}: tensors do not fit the heads of its config.json "
                         f"({', '.join(f'{k}: {got.get(k)} for {want.get(k)}' for k in bad[:4])})")
    ids = tensors["token_map"]
    if ids.dtype != torch.long or not bool((ids[1:] > ids[:-1]).all()) or int(ids.min()) < 0 \
            or int(ids.max()) >= c.target_vocab:
        raise ValueError(f"{path}: token_map must hold ascending distinct int64 token ids in [0, {c.target_vocab})")
    heads.load_state_dict(tensors)
    return heads.to(dtype or embedding.dtype).eval()
