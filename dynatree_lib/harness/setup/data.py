"""The evaluation and training text through ``datasets``: the hub in the ``paper`` profile, local files offline
(same code, ``load_dataset`` on parquet/json instead of a hub id). WikiText-2's test split is cut into articles at
top-level `` = Title = `` headings; PG-19's test split is a list of books; Spec-Bench's questions come from its
question file, HumanEval's problems and UltraChat's evaluation questions from theirs (refused unless the file's
sha256 is the one data/README.md gives). Prompts are built from these in ``prompts`` (which split a prompt belongs
to: ``splits``).

Local files live in the repository's ``data/`` folder (provenance, licences and hashes in data/README.md);
``$DYNATREE_DATA`` points the loaders at another folder laid out the same way.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
from pathlib import Path


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


# sha256 of the question files shipped byte for byte from their sources (data/README.md); a loader refuses another file
HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"
ULTRACHAT_EVAL_SHA256 = "6a2130a6dca31ceb501b4c497c94dc6e3a41df7fee6ae04fcfe199e631cc1906"


def verified(path: Path, sha256: str) -> bytes:
    """The bytes of ``path`` (a local data file), refused with both hashes named unless they hash to ``sha256``."""
    data = _require(path).read_bytes()
    if (found := hashlib.sha256(data).hexdigest()) != sha256:
        raise ValueError(f"local data file corrupt or replaced: {path} has sha256 {found}, expected {sha256} "
                         "(data/README.md); restore it from the repository or the source named there")
    return data


def humaneval_problems(data_dir: Path | None = None) -> list[dict]:
    """HumanEval's 164 problems (``task_id``, ``prompt``, ``entry_point``, ``canonical_solution``, ``test``), as
    shipped in ``data/humaneval`` (openai/human-eval's file, byte for byte)."""
    f = _dir(data_dir) / "humaneval" / "HumanEval.jsonl.gz"
    text = gzip.decompress(verified(f, HUMANEVAL_SHA256)).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def ultrachat_eval_questions(data_dir: Path | None = None) -> list[dict]:
    """UltraChat's evaluation set: 385 single-turn instructions (``class``, ``data``) in file order, as shipped in
    ``data/ultrachat_eval`` (thunlp/UltraChat's ``data/ultra_eval.json``, byte for byte)."""
    f = _dir(data_dir) / "ultrachat_eval" / "ultra_eval.json"
    return json.loads(verified(f, ULTRACHAT_EVAL_SHA256).decode("utf-8"))
