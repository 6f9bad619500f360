"""``python -m dynatree_lib build-draft``: every phase of the cpu profile's draft, each resumed or skipped when done.

1. ``instructions``: the instruction set (``draft.instructions``; committed, so a rebuild reuses it).
2. ``teacher``: instruction-answer and continuation shards (``draft.teacher``).
3. ``vocab``: the draft head's token ranking (``draft.vocab``).
4. ``train``: distillation (``draft.train``), checkpointed.
5. ``calibrate``: one temperature (``draft.calibrate``).
6. ``export``: ``weights/smollm2-draft/``, the context lookup (``draft.lookup_fit``), the held-out evaluation and
   the model card (``draft.card``).
Everything but ``export`` writes under ``models/draft-build-v3/`` (git-ignored).
"""
from __future__ import annotations

from pathlib import Path

from . import instructions
from .calibrate import calibrate
from .card import export
from .teacher import build_continuation_teacher, build_instruction_teacher, german, load_target, write_manifest
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


def build_all() -> Path:
    build_teacher()
    count_tokens()
    return export(calibrate(train_draft()))
