"""``python -m dynatree_lib build-draft``: every phase of the cpu profile's draft (v4), each skipped when done.

1. ``instructions``: the instruction set (``train.instructions``; committed, so a rebuild reuses it).
2. ``teacher``: instruction-answer and continuation shards (``train.teacher``): v3's training data, kept for the
   temperature fit (its held-out shards) and the head's token ranking. ``--sampled-teacher-only``: the target's
   answers to the same instructions sampled at temperature 1 (``train.teacher.build_sampled_teacher``), for a
   draft head trained on sampled text too; no other phase reads them.
3. ``vocab``: the draft head's token ranking (``train.vocab``).
4. ``distil``: ``tools/gpu_distill.py prepare`` here, then ``run`` where a GPU is (on a CPU the same command
   runs, for as long as ``--seconds`` allows); its files go to ``models/draft-build-v4/gpu/``.
5. ``calibrate`` and ``publish``: ``train.early_exit`` (``weights/smollm2-draft/``, the context lookup
   (``train.lookup_fit``), the held-out evaluation and the model card (``train.card``)).
Everything but ``publish`` writes under ``models/`` (git-ignored). v3's recipe (a 6-layer network from scratch,
``train.train`` on 2 CPU cores, resumable) stays as ``build_v3``.
"""
from __future__ import annotations

from pathlib import Path

from . import instructions
from .calibrate import calibrate
from .card import export
from .teacher import (build_continuation_teacher, build_instruction_teacher, build_sampled_teacher, german,
                      load_target, write_manifest)
from .train import train_draft
from .vocab import count_tokens


def build_instructions() -> Path:
    """The instruction file, unless committed already (its German sentences are the target's own)."""
    if instructions.BUILT.exists():
        return instructions.BUILT
    model, tok = load_target("bfloat16")
    return instructions.build(to_german=lambda sentences: german(model, tok, sentences))


def build_teacher() -> Path:
    build_instructions()
    build_instruction_teacher()
    out = build_continuation_teacher()
    write_manifest()
    return out


def build_sampled_text() -> Path:
    """The sampled-answer shards (resumable; their texts and manifest in ``data/draft_teacher_sampled/``)."""
    build_instructions()
    return build_sampled_teacher()


def build_v3() -> Path:
    build_teacher()
    count_tokens()
    return export(calibrate(train_draft()))


def build_all(from_gpu: str | Path | None = None) -> Path:
    """Finish the v4 draft from ``tools/gpu_distill.py``'s output (``from_gpu``, default ``early_exit.GPU``)."""
    from .early_exit import GPU, build_from_gpu

    folder = Path(from_gpu) if from_gpu else GPU
    if not (folder / "result.json").exists():
        raise FileNotFoundError(
            f"{folder / 'result.json'} is missing: distil first. Here: `python tools/gpu_distill.py prepare --out "
            f".xfer`; where a GPU is (torch, transformers, llama.cpp's gguf-py and this tree's dynatree_lib/train/loss.py): "
            f"`python tools/gpu_distill.py run --bundle .xfer/bundle.pt --gguf <SmolLM2 Q4_1 GGUF> --out {folder}`")
    build_teacher()
    count_tokens()
    return build_from_gpu(folder)
