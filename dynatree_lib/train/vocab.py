"""The draft head's token ranking (``token_counts.json``): token frequencies of the draft's training text."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .teacher import BUILD, TEACHER, teacher_files

VOCAB = 49152  # SmolLM2's vocabulary


def count_tokens(teacher: Path = TEACHER, out: Path = BUILD / "token_counts.json", keep: int = 16384) -> Path:
    """How often each token occurs in the draft's training text (the teacher shards: prompts, continuations
    and answers; no experiment's text); the ``keep`` most frequent ids, ranked (ties by id), with their
    counts. The draft head's token subset (FR-Spec, the ``cpu`` profile's ``draft_vocab``) is the top of it;
    ``card.export`` ships it beside the weights."""
    counts = torch.zeros(VOCAB, dtype=torch.long)
    add = lambda ids: counts.add_(torch.bincount(torch.as_tensor(ids, dtype=torch.long).flatten(), minlength=VOCAB))
    files = teacher_files(teacher)
    if not files:
        raise FileNotFoundError(f"no teacher shards in {teacher}: run the teacher phase first")
    for f in files:
        shard = torch.load(f)
        if shard.get("kind") == "instruction":
            for ids in shard["prompts"] + shard["answers"]:
                add(ids)
        else:
            add(shard["tokens"])
    order = sorted(range(counts.numel()), key=lambda t: (-int(counts[t]), t))[:keep]
    out.write_text(json.dumps({
        "source": "the draft's teacher data (models/draft-build-v3/teacher): prompts and the target's continuations "
                  "of PG-19 books outside the test split and WikiText-2 validation, and the instructions of "
                  "data/instructions with the target's answers; no experiment's text",
        "rebuild": "python -m dynatree_lib build-draft --vocab-only", "vocab_size": counts.numel(),
        "total_tokens": int(counts.sum()), "ids": order, "counts": [int(counts[t]) for t in order]}) + "\n")
    return out
