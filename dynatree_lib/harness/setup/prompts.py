"""Prompts of every workload and split: what an experiment decodes (``workloads`` declares where each workload's
prompts come from, ``splits`` says which prompt is in which split). A continuation prompt is ``L_max`` tokens of
human text; a question prompt is the question's first turn through the target's chat template, carrying its
category.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch

from .data import chat_prompt, load_texts
from .splits import CATEGORIES, load_splits
from .workloads import WORKLOADS, workload as workload_of

SPLITS = ("tuning", "dev", "test")


@dataclass
class Prompt:
    id: str
    ids: torch.Tensor  # 1-D long
    category: str | None = None  # Spec-Bench's category (None for continuations and questions without categories)


def candidates(workload: str, split: str, source: str = "local", data_dir: Path | None = None) -> list[str]:
    """The prompt ids of a split, in file order (tuning, dev) or in the workload's order (test: every other one)."""
    w = workload_of(workload)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    named = load_splits()[workload]
    if split != "test":
        return list(named[split])
    pool = w.pool(source, data_dir)
    held = set(named["tuning"]) | set(named["dev"])
    return [p for p in pool if p not in held]


def load_prompts(workload: str, tokenizer, n: int, L_max: int = 0, split: str = "test", *, seed: int = 0,
                 source: str = "local", data_dir: Path | None = None) -> list[Prompt]:
    """``n`` prompts of ``split`` in an order seeded by ``seed``: continuations of exactly ``L_max`` tokens (texts
    shorter than that are skipped); questions whole, ``n`` per category where they have categories (round-robin
    order: Spec-Bench), else ``n``."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"need n >= 1 prompts, got {n!r}")
    ids = candidates(workload, split, source, data_dir)
    random.Random(seed).shuffle(ids)
    w = workload_of(workload)
    if not w.continuation:
        return _questions(workload, ids, tokenizer, n, data_dir)
    if L_max < 1:
        raise ValueError(f"{workload} prompts need L_max >= 1 tokens, got {L_max!r}")
    texts = dict(load_texts(workload, source, data_dir))
    out = []
    for pid in ids:
        toks = tokenizer(w.text(pid, texts), add_special_tokens=False)["input_ids"]
        if len(toks) >= L_max:
            out.append(Prompt(pid, torch.tensor(toks[:L_max])))
            if len(out) == n:
                return out
    raise ValueError(f"{workload} has only {len(out)} {split} prompts of >= {L_max} tokens (asked for {n}); "
                     "lower L_max or n")


def _questions(workload: str, ids: list[str], tokenizer, n: int, data_dir) -> list[Prompt]:
    """``n`` questions per category, categories interleaved so that a partial run covers all of them (``n`` in
    all where the workload has no categories)."""
    w = workload_of(workload)
    qs = w.questions(data_dir)
    if not w.per_category:
        if len(ids) < n:
            raise ValueError(f"{workload} has only {len(ids)} prompts in this split (asked for {n}); lower n")
        return [Prompt(pid, torch.tensor(chat_prompt(tokenizer, qs[pid]["turns"][0]))) for pid in ids[:n]]
    by_cat: dict[str, list[str]] = {}
    for pid in ids:
        by_cat.setdefault(CATEGORIES[qs[pid]["category"]], []).append(pid)
    short = {c: len(v) for c, v in by_cat.items() if len(v) < n}
    if short:
        raise ValueError(f"{workload} has fewer than {n} prompts in this split for {short}; lower n")
    order = [pid for row in zip(*(v[:n] for v in by_cat.values())) for pid in row]
    return [Prompt(pid, torch.tensor(chat_prompt(tokenizer, qs[pid]["turns"][0])),
                   CATEGORIES[qs[pid]["category"]]) for pid in order]


def authors_prompts(workload: str, tokenizer, n: int, chars: int, source: str = "local",
                    *, data_dir: Path | None = None, min_chars: int = 200) -> list[Prompt]:
    """The authors' prompts (their ``papers/benchmark_main_D8B3.py`` and ``benchmark_adaptive_pg19.py``;
    ``docs/fidelity.md``; ``Workload.authors`` says how each workload's are cut): the first ``n`` texts of at least
    ``min_chars`` characters, each cut to its first ``chars`` characters. Lengths are characters, not tokens."""
    w = workload_of(workload)
    if w.authors is None:
        with_authors = [name for name, x in WORKLOADS.items() if x.authors is not None]
        raise ValueError(f"the authors' protocol has no {workload!r} prompts; use one of {with_authors}")
    texts = w.authors(n, chars, source, data_dir, min_chars)
    return [Prompt(pid, torch.tensor(tokenizer(t, add_special_tokens=False)["input_ids"])) for pid, t in texts]
