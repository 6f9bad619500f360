"""An EAGLE-3 head folder (vLLM speculators format, ``core/drafts/heads/eagle3.py``) to a llama.cpp GGUF with
llama.cpp's own converter, and the converted file checked tensor by tensor against the folder: what llama.cpp's EAGLE-3
mode drafts with (``llamacpp.LlamaServer("draft-eagle3")``, the talon experiment's peer row; the ``llamacpp_eagle3``
experiment's exactness record).

What llama.cpp (the source ``tools/build_llamacpp.sh`` builds: llama-cpp-python 0.3.36's vendored
ggml-org/llama.cpp@0c1e57098) does with the folder, read from that source:

- ``convert_hf_to_gguf.py`` maps ``Eagle3Speculator`` to ``conversion/llama.py``'s ``LlamaModel``, which merges
  ``transformer_layer_config`` into the config, detects EAGLE-3 by ``draft_vocab_size`` and a one-layer
  ``num_hidden_layers``, and then needs ``--target-model-dir`` (the target's ``config.json`` and tokenizer: the
  vocabulary is the target's). It writes ``eagle3.target_layers`` (``eagle_aux_hidden_state_layer_ids``),
  ``eagle3.target_hidden_size``, ``eagle3.norm_before_residual`` and ``norm_before_fc``; renames ``layers.0.*`` to
  ``blk.0.*`` (``hidden_norm`` -> ``attn_norm_2``), ``fc.weight``, ``norm`` -> ``output_norm``, ``lm_head`` ->
  ``output``; stores ``d2t`` as absolute target ids (I64) and drops ``t2d``. No embedding: at run time the head reads
  the target's ``token_embd`` (``src/models/eagle3.cpp``).
- At run time the target's features are the *inputs* of the layers named by ``target_layers`` (``t_layer_inp``),
  as ours (``core/drafts/heads/eagle3.py``: the hidden state entering layer i), and the pair at position P is (feature
  of token P, token P + 1) with RoPE at P, as ours (``common/speculative.cpp``,
  ``common_speculative_impl_draft_eagle3``).

So our export converts as it is (nothing to add: ``check_head`` lists what the converter reads and ``verify_gguf``
compares every converted tensor with the folder's). The GGUF goes beside the build's other conversions:
``<DEST>/eagle3-<sha12 of model.safetensors>-<outtype>.gguf``; the converter runs with the dequantized target
folder (``harness.setup.weights.smollm2_folder``) as ``--target-model-dir``.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from . import llamacpp_server as H
from ..setup.paths import HEAD_DIR

HEAD = HEAD_DIR
# what the converter reads from config.json (top level, or merged from transformer_layer_config) and the tensors
CONFIG_KEYS = ("draft_vocab_size", "target_hidden_size", "eagle_aux_hidden_state_layer_ids", "norm_before_residual",
               "transformer_layer_config")
LAYER_KEYS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
              "rms_norm_eps", "vocab_size")
TENSORS = {  # speculators name -> GGUF name (q and k are permuted for llama.cpp's RoPE layout)
    "fc.weight": "fc.weight", "norm.weight": "output_norm.weight", "lm_head.weight": "output.weight",
    "layers.0.input_layernorm.weight": "blk.0.attn_norm.weight",
    "layers.0.hidden_norm.weight": "blk.0.attn_norm_2.weight",
    "layers.0.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    "layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight", "layers.0.self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "layers.0.self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "layers.0.self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "layers.0.mlp.gate_proj.weight": "blk.0.ffn_gate.weight", "layers.0.mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "layers.0.mlp.down_proj.weight": "blk.0.ffn_down.weight",
}


# ---- the head folder and its conversion ---------------------------------------------------------------------------

def check_head(folder: Path | str) -> dict:
    """What llama.cpp's converter reads from a speculators EAGLE-3 folder, checked before it runs (its own errors
    are a KeyError deep in the converter): ``config.json`` with ``CONFIG_KEYS``, a one-layer
    ``transformer_layer_config`` with ``LAYER_KEYS``, three aux layer ids, and ``model.safetensors`` with every
    tensor of ``TENSORS`` plus ``d2t``. Returns the config (ValueError / FileNotFoundError naming what is missing)."""
    folder = Path(folder)
    for f in ("config.json", "model.safetensors"):
        if not (folder / f).is_file():
            raise FileNotFoundError(f"{folder / f} is missing: {folder} is not an EAGLE-3 head folder "
                                    "(speculators format: config.json + model.safetensors)")
    cfg = json.loads((folder / "config.json").read_text())
    if cfg.get("speculators_model_type") != "eagle3" or "Eagle3Speculator" not in cfg.get("architectures", []):
        raise ValueError(f"{folder}/config.json is not a speculators Eagle3Speculator config")
    missing = [k for k in CONFIG_KEYS if k not in cfg]
    missing += [f"transformer_layer_config.{k}" for k in LAYER_KEYS if k not in cfg.get("transformer_layer_config", {})]
    if missing:
        raise ValueError(f"{folder}/config.json lacks what llama.cpp's converter reads: {', '.join(missing)}")
    if cfg["transformer_layer_config"]["num_hidden_layers"] != 1 or len(cfg["eagle_aux_hidden_state_layer_ids"]) != 3:
        raise ValueError(f"{folder}: llama.cpp's EAGLE-3 needs one decoder layer and three aux layer ids")
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    lacking = sorted((set(TENSORS) | {"d2t"}) - names)
    if lacking:
        raise ValueError(f"{folder}/model.safetensors lacks tensors llama.cpp's EAGLE-3 loads: {', '.join(lacking)}")
    return cfg


def source_dir(bin_dir: Path | None = None) -> Path:
    """The llama.cpp source the build script extracted (its converter and gguf-py), or ``LlamaCppMissing``."""
    bin_dir = bin_dir or H.find_llamacpp()
    src = H.root_of(Path(bin_dir)) / "src" if bin_dir else H.default_root() / "src"
    if not (src / "convert_hf_to_gguf.py").is_file():
        raise H.LlamaCppMissing(f"{src / 'convert_hf_to_gguf.py'} is missing. {H.how_to_get()}")
    return src


def gguf_path(head: Path | str, outtype: str = "bf16", bin_dir: Path | None = None) -> Path:
    """``<DEST>/eagle3-<sha12 of the head's model.safetensors>-<outtype>.gguf`` (a new head, a new file)."""
    root = H.root_of(Path(bin_dir)) if bin_dir else H.default_root()
    return root / f"eagle3-{H._sha256(Path(head) / 'model.safetensors')[:12]}-{outtype}.gguf"


def convert_command(src: Path, head: Path, target_dir: Path, out: Path, outtype: str = "bf16") -> list[str]:
    return [sys.executable, str(src / "convert_hf_to_gguf.py"), str(head), "--target-model-dir", str(target_dir),
            "--outtype", outtype, "--outfile", str(out)]


def convert(head: Path | str = HEAD, outtype: str = "bf16", bin_dir: Path | None = None, force: bool = False,
            target_dir: Path | None = None) -> tuple[Path, list[str]]:
    """Convert ``head`` to GGUF beside the build (skipped when the file exists) and verify it (``verify_gguf``);
    returns the GGUF and the converter's argv."""
    from ..setup.weights import smollm2_folder

    if outtype not in ("bf16", "f32"):
        raise ValueError(f"outtype must be bf16 or f32, got {outtype!r}")
    head = Path(head)
    check_head(head)
    src, out = source_dir(bin_dir), gguf_path(head, outtype, bin_dir)
    target_dir = Path(target_dir or smollm2_folder())
    argv = convert_command(src, head, target_dir, Path(str(out) + ".part"), outtype)
    if force or not out.is_file():
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"llama.cpp's converter failed ({r.returncode}) on {head}:\n{r.stderr[-3000:]}")
        Path(argv[-1]).replace(out)
    verify_gguf(out, head, src)
    return out, argv[:-1] + [str(out)]


def mode_draft(mode: str, draft: Path | str | None = None, bin_dir: Path | None = None) -> Path | str | None:
    """``draft`` as a llama.cpp mode takes it (``llamacpp.draft_file`` resolves it): for ``draft-eagle3``, the head
    folder (default the committed head, ``HEAD``) converted by llama.cpp's own converter (``convert``); else as
    given."""
    if mode == "draft-eagle3" and (draft is None or Path(draft).suffix != ".gguf"):
        return convert(draft or HEAD, bin_dir=bin_dir)[0]
    return draft


def _permute(w, n_head: int, n_kv: int | None):
    """``conversion/llama.py``'s ``LlamaModel.permute`` (rows regrouped for llama.cpp's RoPE), in numpy."""
    n = n_kv if n_kv is not None and n_kv != n_head else n_head
    return w.reshape(n, 2, w.shape[0] // n // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def verify_gguf(gguf: Path | str, head: Path | str, src: Path | None = None) -> dict:
    """The converted file against the folder: architecture ``eagle3``, ``target_layers`` = the aux layer ids,
    ``target_hidden_size``, ``norm_before_residual``, ``d2t`` = the draft columns' target ids (our
    ``arange + d2t``, which ``t2d`` marks), and every tensor of ``TENSORS`` bit-equal (bf16) or value-equal (f32)
    to ours. Returns what it checked; ValueError on the first mismatch."""
    import numpy as np
    import torch
    from safetensors.torch import load_file

    sys.path.insert(0, str((src or source_dir()) / "gguf-py"))
    from gguf import GGUFReader

    cfg = json.loads((Path(head) / "config.json").read_text())
    layer = cfg["transformer_layer_config"]
    r = GGUFReader(str(gguf))
    meta = {k: r.fields[k].contents() for k in ("general.architecture", "eagle3.target_layers",
                                                 "eagle3.target_hidden_size", "eagle3.norm_before_residual")}
    want = {"general.architecture": "eagle3", "eagle3.target_layers": cfg["eagle_aux_hidden_state_layer_ids"],
            "eagle3.target_hidden_size": cfg["target_hidden_size"],
            "eagle3.norm_before_residual": cfg["norm_before_residual"]}
    bad = {k: (meta[k], v) for k, v in want.items() if meta[k] != v}
    if bad:
        raise ValueError(f"{gguf}: metadata differs from {head}/config.json (got, want): {bad}")
    ours = load_file(str(Path(head) / "model.safetensors"))
    theirs = {t.name: t for t in r.tensors}
    d2t = np.asarray(theirs["d2t"].data)
    vocab = (torch.arange(ours["d2t"].numel()) + ours["d2t"]).numpy()
    if not np.array_equal(d2t, vocab) or not ours["t2d"][vocab].all() or int(ours["t2d"].sum()) != vocab.size:
        raise ValueError(f"{gguf}: d2t is not the head's draft vocabulary")
    types = {}
    for name, gname in TENSORS.items():
        t, w = theirs[gname], ours[name]
        if t.tensor_type.name == "BF16" and w.dtype == torch.bfloat16:
            a, b = np.frombuffer(t.data.tobytes(),
                                 np.uint16).reshape(w.shape), w.view(torch.int16).numpy().view(np.uint16)
        else:
            a, b = np.asarray(t.data, np.float32).reshape(w.shape), w.float().numpy()
        if name.endswith("q_proj.weight"):
            b = _permute(b, layer["num_attention_heads"], layer["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            b = _permute(b, layer["num_attention_heads"], layer["num_key_value_heads"])
        if not np.array_equal(a, b):
            raise ValueError(f"{gguf}: {gname} differs from {name} of {head}")
        types[gname] = t.tensor_type.name
    return {"metadata": meta, "d2t": f"{vocab.size} target ids, equal to the head's", "tensors_equal": types,
            "not_converted": ["t2d (unused by llama.cpp; d2t carries the vocabulary)"]}
