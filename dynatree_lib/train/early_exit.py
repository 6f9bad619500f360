"""The v4 draft: SmolLM2's own first layers, distilled, under SmolLM2's input embedding and tied head.

Distillation runs in ``tools/gpu_distill.py`` (a lent GPU writes its own teacher text and distils online; the
same command runs on a CPU, slowly). This module takes what it wrote (one fp32 file per trained layer plus the
final norm, ``result.json``) and finishes the build here:

1. ``load_distilled``: the trained tensors under the target's embedding, as a plain fp32 Llama;
2. ``calibrate_distilled``: one temperature on v3's held-out teacher shards (``train.calibrate``; their
   instructions were kept out of the GPU's training set), baked into the final norm;
3. ``card.publish``: ``weights/smollm2-draft/`` without the embedding (``harness.setup.weights`` adds the target's
   when it loads the draft: the embedding alone would be 56 MB in bf16), the lookup, pair report, costs, card.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..harness.setup.paths import DRAFT_DIR, REPO
from .calibrate import fit_temperature
from .teacher import TEACHER, load_target
from .train import DraftSpec, Head, shard_files

BUILD = REPO / "models" / "draft-build-v4"  # git-ignored: the GPU's files, the calibrated fp32 draft
GPU = BUILD / "gpu"
TEXT = REPO / "data" / "draft_teacher_v4"  # committed: the teacher text the GPU wrote
EMBEDDING_FROM = "embedded:target"


def load_distilled(folder: Path):
    """The distilled draft (fp32 LlamaForCausalLM, the target's embedding and tied head) and the run's record."""
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    record = folder / "result.json"
    if not record.exists():
        raise FileNotFoundError(f"{record} is missing: {folder} is not the output of tools/gpu_distill.py run")
    result = json.loads(record.read_text())
    tensors = {}
    for name in result["files"]:
        tensors.update(load_file(str(folder / name)))
    target, _ = load_target()
    cfg = {k: v for k, v in target.config.to_dict().items() if k not in ("architectures", "_name_or_path")}
    cfg["num_hidden_layers"] = result["args"]["layers"]
    model = LlamaForCausalLM(LlamaConfig(**cfg))
    embedding = {"model.embed_tokens.weight": target.get_input_embeddings().weight.detach()}
    missing, unexpected = model.load_state_dict({**tensors, **embedding}, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ValueError(f"{folder}: tensors do not fit a {cfg['num_hidden_layers']}-layer SmolLM2 prefix "
                         f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
    model.tie_weights()
    return model.eval(), result


def calibrate_distilled(folder: Path, out: Path = BUILD / "calibrated") -> Path:
    """Fit the temperature on the held-out teacher shards and bake it into the final norm (as ``calibrate``)."""
    if (out / "model.safetensors").exists():
        return out
    model, result = load_distilled(folder)
    spec = DraftSpec(head_vocab=result["args"]["head_vocab"])
    held = [torch.load(f) for f in shard_files(TEACHER, spec, heldout=True)]
    if not held:
        raise FileNotFoundError(f"no held-out teacher shards in {TEACHER}: build them with "
                                "`python -m dynatree_lib build-draft --teacher-only`")
    head = Head.of(spec, model.config.vocab_size, DRAFT_DIR / "token_counts.json")
    torch.set_num_threads(spec.threads)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        temp, fit = fit_temperature(model, held, spec, head)
    with torch.no_grad():
        model.model.norm.weight.div_(temp)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    (out / "calibration.json").write_text(json.dumps({"temperature": temp, **fit}, indent=1))
    (out / "distillation.json").write_text(json.dumps(result, indent=1))
    return out


def instructions_used(folder: Path) -> list[str]:
    """Ids (in ``data/instructions``) of the instructions whose answers the GPU run wrote (the draft was distilled
    on all but the run's own held-out share)."""
    text = torch.load(folder / "teacher_text.pt")
    return sorted({i for i, kind in zip(text["ids"], text["kinds"]) if kind.startswith("instruction")})


def training_record(calibrated: Path, folder: Path) -> dict:
    """``training.json`` of an early-exit draft: the GPU run's record, the calibration, the recipe, the
    instructions it was trained on."""
    run = json.loads((calibrated / "distillation.json").read_text())
    hist = run["history"]
    return {"recipe": "early-exit", "embedding_from": EMBEDDING_FROM, "layers": run["args"]["layers"],
            "head_vocab": run["args"]["head_vocab"], "distillation": {k: v for k, v in run.items() if k != "history"},
            "steps": run["steps"], "wall_s": run["seconds"],
            "final_loss": sum(r["loss"] for r in hist[-10:]) / max(1, len(hist[-10:])), "history": hist,
            "calibration": json.loads((calibrated / "calibration.json").read_text()),
            "instruction_ids": instructions_used(folder),
            "rebuild": "python tools/gpu_distill.py prepare/run, then python -m dynatree_lib build-draft --from-gpu DIR"}


def commit_teacher_text(folder: Path, out: Path = TEXT) -> Path:
    """The GPU run's teacher text as gzip'd JSON (ids, kinds, first loss rows, token sequences), byte-stable,
    with its sha256 in ``SHA256SUMS``."""
    import gzip
    import hashlib

    text = torch.load(folder / "teacher_text.pt")
    flat = text["tokens_u16"].to(torch.int32).remainder(65536).tolist()
    seqs, at = [], 0
    for n in text["lengths"]:
        seqs.append(flat[at:at + n])
        at += n
    row = {"source": "tools/gpu_distill.py run (result.json beside the draft: training.json's distillation)",
           "ids": text["ids"], "kinds": text["kinds"], "starts": text["starts"], "tokens": seqs}
    out.mkdir(parents=True, exist_ok=True)
    path = out / "teacher_text.json.gz"
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(json.dumps(row, separators=(",", ":")).encode())
    (out / "SHA256SUMS").write_text(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n")
    return path


def build_from_gpu(folder: Path) -> Path:
    """Calibrate and publish a draft distilled by ``tools/gpu_distill.py`` (``build-draft --from-gpu DIR``)."""
    from transformers import LlamaForCausalLM

    from .card import publish

    calibrated = calibrate_distilled(Path(folder))
    commit_teacher_text(Path(folder))
    model = LlamaForCausalLM.from_pretrained(calibrated, dtype=torch.float32)
    return publish(model, training_record(calibrated, Path(folder)))
