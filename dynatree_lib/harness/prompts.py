"""Prompts of every workload and split: what an experiment decodes (``splits`` says which prompt is in which split).

- ``wikitext2``, ``pg19``: the paper's continuation protocol: ``L_max`` tokens of human text, continued for T tokens.
- ``spec_bench``: Spec-Bench's questions, the first turn through the target's chat template, answered to EOS (at
  most T tokens); each prompt carries its category.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch

from .data import chat_prompt, load_texts, spec_bench_questions
from .splits import CATEGORIES, CHUNK, MAX_CHARS, load_splits

WORKLOADS = ("wikitext2", "pg19", "spec_bench")
CONTINUATION = ("wikitext2", "pg19")
SPLITS = ("tuning", "dev", "test")


@dataclass
class Prompt:
    id: str
    ids: torch.Tensor  # 1-D long
    category: str | None = None  # Spec-Bench's category (None for continuations)


def candidates(workload: str, split: str, source: str = "local", data_dir: Path | None = None) -> list[str]:
    """The prompt ids of a split, in file order (tuning, dev) or in the workload's order (test: every other one)."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose one of {WORKLOADS}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    named = load_splits()[workload]
    if split != "test":
        return list(named[split])
    if workload == "wikitext2":
        pool = [f"wikitext2:{i}" for i, _ in load_texts(workload, source, data_dir)]
    elif workload == "pg19":
        pool = [f"pg19:{b}@c{c}" for b, t in load_texts(workload, source, data_dir)
                for c in range(0, min(len(t), MAX_CHARS), CHUNK)]
    else:
        pool = [f"spec_bench:{q['question_id']}" for q in spec_bench_questions(data_dir)]
    held = set(named["tuning"]) | set(named["dev"])
    return [p for p in pool if p not in held]


def load_prompts(workload: str, tokenizer, n: int, L_max: int = 0, split: str = "test", seed: int = 0,
                 source: str = "local", data_dir: Path | None = None) -> list[Prompt]:
    """``n`` prompts of ``split`` in an order seeded by ``seed``: continuations of exactly ``L_max`` tokens (texts
    shorter than that are skipped); Spec-Bench questions whole, ``n`` per category (round-robin order)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"need n >= 1 prompts, got {n!r}")
    ids = candidates(workload, split, source, data_dir)
    random.Random(seed).shuffle(ids)
    if workload == "spec_bench":
        return _questions(ids, tokenizer, n, data_dir)
    if L_max < 1:
        raise ValueError(f"{workload} prompts need L_max >= 1 tokens, got {L_max!r}")
    texts = dict(load_texts(workload, source, data_dir))
    out = []
    for pid in ids:
        toks = tokenizer(_text(pid, texts), add_special_tokens=False)["input_ids"]
        if len(toks) >= L_max:
            out.append(Prompt(pid, torch.tensor(toks[:L_max])))
            if len(out) == n:
                return out
    raise ValueError(f"{workload} has only {len(out)} {split} prompts of >= {L_max} tokens (asked for {n}); "
                     "lower L_max or n")


def _text(pid: str, texts: dict) -> str:
    if pid.startswith("wikitext2:"):
        return texts[pid.split(":")[1]]
    book, start = pid.split(":")[1].split("@c")
    return texts[book][int(start):int(start) + CHUNK]


def _questions(ids: list[str], tokenizer, n: int, data_dir) -> list[Prompt]:
    """``n`` questions per category, categories interleaved so that a partial run covers all of them."""
    qs = {f"spec_bench:{q['question_id']}": q for q in spec_bench_questions(data_dir)}
    by_cat: dict[str, list[str]] = {}
    for pid in ids:
        by_cat.setdefault(CATEGORIES[qs[pid]["category"]], []).append(pid)
    short = {c: len(v) for c, v in by_cat.items() if len(v) < n}
    if short:
        raise ValueError(f"spec_bench has fewer than {n} prompts in this split for {short}; lower n")
    order = [pid for row in zip(*(v[:n] for v in by_cat.values())) for pid in row]
    return [Prompt(pid, torch.tensor(chat_prompt(tokenizer, qs[pid]["turns"][0])),
                   CATEGORIES[qs[pid]["category"]]) for pid in order]


def authors_prompts(workload: str, tokenizer, n: int, chars: int, source: str = "local",
                    data_dir: Path | None = None, min_chars: int = 200) -> list[Prompt]:
    """The authors' prompts (their ``papers/benchmark_main_D8B3.py`` and ``benchmark_adaptive_pg19.py``;
    ``docs/fidelity.md``): WikiText-2's *validation* file (the non-raw text), cut into blocks of lines between blank
    or heading lines, the first ``n`` blocks of at least ``min_chars`` characters, each cut to its first ``chars``
    characters; PG-19's test books in dataset order, the first ``n`` of at least ``min_chars`` characters, stripped
    and cut to ``chars`` characters. Lengths are characters, not tokens."""
    from .data import wikitext_valid_text

    if workload == "wikitext2":
        blocks, current = [], ""
        for line in wikitext_valid_text(data_dir).splitlines(keepends=True):
            if not line.strip() or line.startswith(" ="):
                if current and len(current) >= min_chars:
                    blocks.append(current.strip())
                current = ""
                if len(blocks) >= 3 * n:
                    break
            else:
                current += " " + line
        texts = [(f"wikitext2:valid-block{i}", b[:chars]) for i, b in enumerate(blocks) if len(b) >= min_chars][:n]
    elif workload == "pg19":
        texts = [(f"pg19:{b}@head", t.strip()[:chars]) for b, t in load_texts(workload, source, data_dir)
                 if len(t) >= min_chars][:n]
    else:
        raise ValueError(f"the authors' protocol has no {workload!r} prompts; use wikitext2 or pg19")
    return [Prompt(pid, torch.tensor(tokenizer(t, add_special_tokens=False)["input_ids"])) for pid, t in texts]
