"""Prompts from WikiText-2 and PG-19 through ``datasets``: the hub in the ``paper`` profile, local files
offline (same code, ``load_dataset`` on parquet/json instead of a hub id).

Prompt construction (the paper does not specify it; ours, deterministic by seed):
- WikiText-2 (test split): the split is cut into articles at top-level `` = Title = `` headings; articles
  with at least ``L_max`` tokens are eligible; ``n`` of them are drawn by seed; a prompt is the first
  ``L_max`` tokens of its article. Prompt id: ``wikitext2:<article index>``.
- PG-19 (test split): each book is tokenized (its first ``max_chars`` characters); prompts are
  ``L_max``-token windows at seeded offsets, drawn round-robin over books so that few books still give
  ``n`` prompts. Prompt id: ``pg19:<book id>@<token offset>``.

Local files live in the repository's ``data/`` folder (provenance, licences and hashes in data/README.md);
``$DYNATREE_DATA`` points the loaders at another folder laid out the same way.
"""
from __future__ import annotations

import gzip
import json
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from .paths import REPO

DATASETS = ("wikitext2", "pg19")
# Hub ids. DeepMind's own PG-19 repository on the hub is a loading-script dataset, which `datasets` 4 refuses; these are
# parquet copies of the same data (PG-19's test split, 100 books; WikiText's canonical id).
HUB_IDS = {"wikitext2": "Salesforce/wikitext", "pg19": "emozilla/pg19-test"}
_HEADING = re.compile(r"^ = [^=].* = $")


REPO_DATA = REPO / "data"


def data_dir() -> Path:
    """``$DYNATREE_DATA`` if set, else the repository's own ``data/`` folder."""
    env = os.environ.get("DYNATREE_DATA")
    return Path(env) if env else REPO_DATA


def _dir(explicit: Path | None) -> Path:  # the loaders' ``data_dir`` argument shadows data_dir()
    return Path(explicit) if explicit else data_dir()


@dataclass
class Prompt:
    id: str
    ids: torch.Tensor  # 1-D long


def _require(path: Path) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"local data file missing: {path}. The repository ships it under data/; "
                                f"DYNATREE_DATA (now {os.environ.get('DYNATREE_DATA')!r}) must name a folder laid "
                                "out like data/ (or unset it), or use source='hub'.")
    return path


def load_texts(dataset: str, source: str = "local", data_dir: Path | None = None) -> list[tuple[str, str]]:
    """(document id, text) pairs of the test split: WikiText-2 articles or PG-19 books."""
    import datasets
    from datasets import load_dataset

    datasets.disable_progress_bars()

    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {DATASETS}")
    if source not in ("local", "hub"):
        raise ValueError(f"source must be 'local' or 'hub', got {source!r}")
    d = _dir(data_dir)
    if dataset == "wikitext2":
        if source == "hub":
            ds = load_dataset(HUB_IDS["wikitext2"], "wikitext-2-raw-v1", split="test")
        else:
            f = _require(d / "wikitext-2" / "test.parquet")
            ds = load_dataset("parquet", data_files=str(f), split="train")
        return _articles(ds["text"])
    if source == "hub":
        ds = load_dataset(HUB_IDS["pg19"], split="test")  # the parquet copy of PG-19's test split
        return [(r["url"].rstrip("/").split("/")[-1], r["text"]) for r in ds]
    f = _require(d / "pg19" / "books.parquet")
    ds = load_dataset("parquet", data_files=str(f), split="train").filter(lambda r: r["pg19_split"] == "test")
    return [(r["book_id"], r["text"]) for r in ds]


def _articles(lines: list[str]) -> list[tuple[str, str]]:
    arts: list[list[str]] = []
    for line in lines:
        if _HEADING.match(line.rstrip("\n")) or not arts:
            arts.append([])
        arts[-1].append(line)
    return [(str(i), "".join(a)) for i, a in enumerate(arts)]


def load_prompts(dataset: str, tokenizer, n: int, L_max: int, seed: int = 0, source: str = "local",
                 data_dir: Path | None = None, max_chars: int = 200_000) -> list[Prompt]:
    """``n`` prompts of exactly ``L_max`` tokens, chosen deterministically by ``seed``."""
    if n < 1 or L_max < 1:
        raise ValueError(f"need n >= 1 and L_max >= 1, got n={n}, L_max={L_max}")
    rng = random.Random(seed)
    docs = load_texts(dataset, source, data_dir)
    out: list[Prompt] = []
    if dataset == "wikitext2":
        order = list(range(len(docs)))
        rng.shuffle(order)
        for i in order:
            ids = tokenizer(docs[i][1], add_special_tokens=False)["input_ids"]
            if len(ids) >= L_max:
                out.append(Prompt(f"wikitext2:{docs[i][0]}", torch.tensor(ids[:L_max])))
                if len(out) == n:
                    return out
    else:
        books = [(bid, tokenizer(text[:max_chars], add_special_tokens=False)["input_ids"]) for bid, text in docs]
        books = [(bid, ids) for bid, ids in books if len(ids) >= L_max]
        used: set[tuple[str, int]] = set()
        for k in range(n * 20):
            if not books:
                break
            bid, ids = books[k % len(books)]
            off = rng.randrange(0, len(ids) - L_max + 1)
            if (bid, off) not in used:
                used.add((bid, off))
                out.append(Prompt(f"pg19:{bid}@{off}", torch.tensor(ids[off:off + L_max])))
                if len(out) == n:
                    return out
    raise ValueError(f"{dataset} has only {len(out)} prompts of >= {L_max} tokens (asked for {n}); lower L_max or n")


def training_text(data_dir: Path | None = None) -> list[str]:
    """Texts of the local PG-19 books that are *not* in the PG-19 test split (embedded models' training set)."""
    from datasets import load_dataset

    f = _require(_dir(data_dir) / "pg19" / "books.parquet")
    ds = load_dataset("parquet", data_files=str(f), split="train").filter(lambda r: r["pg19_split"] != "test")
    return list(ds["text"])


def wikitext_valid_text(data_dir: Path | None = None) -> str:
    """The official tokenized WikiText-2 validation file (``wiki.valid.tokens``), decompressed."""
    f = _require(_dir(data_dir) / "wikitext-2" / "wiki.valid.tokens.gz")
    return gzip.decompress(f.read_bytes()).decode("utf-8")


_WIKI_FIXES = [(" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), (" , ", ", "), (" . ", ". "), (" ; ", "; "),
               (" : ", ": "), (" 's", "'s"), (" n't", "n't"), ("( ", "("), (" )", ")"), ('" ', '"')]


def wikitext_valid_articles(raw: bool = False, data_dir: Path | None = None) -> list[str]:
    """WikiText-2 validation articles, raw or roughly detokenized (the draft's training text, no experiment's)."""
    out = []
    for _, text in _articles(wikitext_valid_text(data_dir).splitlines(keepends=True)):
        for x, y in ([] if raw else _WIKI_FIXES):
            text = text.replace(x, y)
        out.append(text)
    return out


def chat_prompt(tokenizer, text: str) -> list[int]:
    """Token ids of one user turn through the tokenizer's chat template, ending where the assistant's answer
    begins (exactly what the instruction workload decodes from and the draft's teacher data was made with)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the instruction workload needs a tokenizer with a chat template; this one has none")
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def spec_bench_questions(data_dir: Path | None = None) -> list[dict]:
    """Spec-Bench's 480 questions (``question_id``, ``category``, ``turns``), as shipped in ``data/spec_bench``."""
    f = _require(_dir(data_dir) / "spec_bench" / "question.jsonl")
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
