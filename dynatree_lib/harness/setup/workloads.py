"""Every workload, declared once: what it is called, where its prompts come from and how it is decoded and reported.

- ``wikitext2``, ``pg19``: the paper's continuation protocol: ``L_max`` tokens of human text, continued for exactly
  T tokens.
- ``spec_bench``: Spec-Bench's questions, the first turn through the target's chat template, answered to EOS (at most
  T tokens); each prompt carries its category, and its cells count questions per category.
- ``humaneval``, ``ultrachat_eval``: the two of TALON's six benchmarks that Spec-Bench lacks (``TALON_BENCHMARKS``),
  decoded as Spec-Bench's questions are, without categories. HumanEval's turn is EAGLE's: "Complete the code I
  provided." followed by the problem's prompt verbatim (a signature and docstring), sent through the chat template
  as the user's turn. UltraChat's evaluation instructions stand for TALON's "Alpaca" column (data/README.md: the
  Alpaca sets are CC BY-NC 4.0 and not shipped). Neither is in any profile's ``workloads``: the ``talon``
  experiment (``experiments.talon``, notebook 14) names them.

Profiles, prompts, experiments, the runner and the tables read ``WORKLOADS``; no other module tests a workload's
name. Prompt ids name their workload (``<workload>:<id in the source>``; ``splits`` says which is in which split).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .data import humaneval_problems, load_texts, spec_bench_questions, ultrachat_eval_questions, wikitext_valid_text


CHUNK, MAX_CHARS = 8000, 200_000  # PG-19 prompts: a book's first MAX_CHARS characters in CHUNK-character chunks


@dataclass(frozen=True, kw_only=True)
class Workload:
    """One workload. ``continuation``: its prompts are ``L_max`` tokens of a text (else whole questions);
    ``stop_at_eos``: a generation ends at the tokenizer's EOS (else exactly T tokens); ``per_category``: its prompts
    carry a category, its cells count prompts per category and its tables report each category.
    ``pool(source, data_dir)``: every prompt id in the workload's order; ``text(id, texts)``: a continuation
    prompt's text, from ``data.load_texts``' (document id, text) pairs as a dict; ``questions(data_dir)``: a question
    workload's questions by prompt id (``question_id``, ``category``, ``turns``); ``authors(n, chars, source,
    data_dir, min_chars)``: (id, text) of the authors' protocol's prompts (None: it has none). ``bits_docs`` and
    ``bits_tokens``: the held-out text whose bits per byte the pair report gives (the first that many documents,
    None: all joined into one text) and the tokens scored per text. ``talon_T``: TALON's generation limit on the
    workload (most new tokens; None where TALON has no such benchmark)."""

    name: str
    label: str
    continuation: bool
    stop_at_eos: bool = False
    per_category: bool = False
    pool: Callable[[str, Path | None], list[str]]
    text: Callable[[str, dict], str] | None = None
    questions: Callable[[Path | None], dict[str, dict]] | None = None
    authors: Callable | None = None
    bits_docs: int | None = None
    bits_tokens: int = 0
    talon_T: int | None = None


def _article_pool(name: str) -> Callable:
    return lambda source, data_dir: [f"{name}:{i}" for i, _ in load_texts(name, source, data_dir)]


def _article_text(pid: str, texts: dict) -> str:
    return texts[pid.split(":")[1]]


def _chunk_pool(name: str) -> Callable:
    """A book's first ``MAX_CHARS`` characters in ``CHUNK``-character chunks (``<name>:<book>@c<start>``)."""
    return lambda source, data_dir: [f"{name}:{b}@c{c}" for b, t in load_texts(name, source, data_dir)
                                     for c in range(0, min(len(t), MAX_CHARS), CHUNK)]


def _chunk_text(pid: str, texts: dict) -> str:
    book, start = pid.split(":")[1].split("@c")
    return texts[book][int(start):int(start) + CHUNK]


def _spec_bench(name: str) -> Callable:
    return lambda data_dir: {f"{name}:{q['question_id']}": q for q in spec_bench_questions(data_dir)}


HUMANEVAL_INSTRUCTION = "Complete the code I provided."  # EAGLE's turn: this sentence, then the prompt verbatim


def _humaneval(name: str) -> Callable:
    """HumanEval's problems as questions (``<name>:<number in HumanEval/number>``), one turn each."""
    return lambda data_dir: {f"{name}:{p['task_id'].split('/')[1]}": {
        "question_id": p["task_id"], "category": "code", "turns": [HUMANEVAL_INSTRUCTION + p["prompt"]]}
        for p in humaneval_problems(data_dir)}


def _ultrachat_eval(name: str) -> Callable:
    """UltraChat's evaluation instructions as questions (``<name>:<row in the file>``); an instruction the file
    holds twice is one question, its first row."""
    def questions(data_dir: Path | None) -> dict[str, dict]:
        out, seen = {}, set()
        for i, r in enumerate(ultrachat_eval_questions(data_dir)):
            if r["data"] not in seen:
                seen.add(r["data"])
                out[f"{name}:{i}"] = {"question_id": i, "category": r["class"].strip(), "turns": [r["data"]]}
        return out
    return questions


def _question_pool(questions: Callable) -> Callable:
    return lambda source, data_dir: list(questions(data_dir))


def _valid_blocks(name: str) -> Callable:
    """The authors' WikiText-2 prompts: the validation file (the non-raw text) cut into blocks of lines between blank
    or heading lines, the first ``n`` blocks of at least ``min_chars`` characters, each cut to ``chars``."""
    def texts(n: int, chars: int, source: str, data_dir: Path | None, min_chars: int) -> list[tuple[str, str]]:
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
        return [(f"{name}:valid-block{i}", b[:chars]) for i, b in enumerate(blocks) if len(b) >= min_chars][:n]
    return texts


def _book_heads(name: str) -> Callable:
    """The authors' PG-19 prompts: the test books in dataset order, the first ``n`` of at least ``min_chars``
    characters, stripped and cut to ``chars`` characters."""
    def texts(n: int, chars: int, source: str, data_dir: Path | None, min_chars: int) -> list[tuple[str, str]]:
        return [(f"{name}:{b}@head", t.strip()[:chars]) for b, t in load_texts(name, source, data_dir)
                if len(t) >= min_chars][:n]
    return texts


WORKLOADS: dict[str, Workload] = {}


def register(w: Workload) -> Workload:
    """Add a workload (its position is its order in tables)."""
    if w.name in WORKLOADS:
        raise ValueError(f"workload {w.name!r} is already registered")
    if (w.text if w.continuation else w.questions) is None:
        raise ValueError(f"workload {w.name!r} needs a text(id, texts) function (continuation) or questions(data_dir)")
    WORKLOADS[w.name] = w
    return w


WIKITEXT2, PG19, SPEC_BENCH = "wikitext2", "pg19", "spec_bench"
HUMANEVAL, ULTRACHAT_EVAL = "humaneval", "ultrachat_eval"
TALON_MAX_NEW_TOKENS = 1024  # TALON's appendix E.1.2: "set to 1024 tokens for standard benchmarks" (EAGLE's default)
for _w in (
    Workload(name=WIKITEXT2, label="WikiText-2", continuation=True, pool=_article_pool(WIKITEXT2),
             text=_article_text, authors=_valid_blocks(WIKITEXT2), bits_tokens=8192),
    Workload(name=PG19, label="PG-19", continuation=True, pool=_chunk_pool(PG19), text=_chunk_text,
             authors=_book_heads(PG19), bits_docs=4, bits_tokens=2048),
    Workload(name=SPEC_BENCH, label="Spec-Bench", continuation=False, stop_at_eos=True, per_category=True,
             pool=_question_pool(_spec_bench(SPEC_BENCH)), questions=_spec_bench(SPEC_BENCH),
             talon_T=TALON_MAX_NEW_TOKENS),
    Workload(name=HUMANEVAL, label="HumanEval", continuation=False, stop_at_eos=True,
             pool=_question_pool(_humaneval(HUMANEVAL)), questions=_humaneval(HUMANEVAL), talon_T=TALON_MAX_NEW_TOKENS),
    Workload(name=ULTRACHAT_EVAL, label="UltraChat eval", continuation=False, stop_at_eos=True,
             pool=_question_pool(_ultrachat_eval(ULTRACHAT_EVAL)), questions=_ultrachat_eval(ULTRACHAT_EVAL),
             talon_T=TALON_MAX_NEW_TOKENS),
):
    register(_w)

# TALON's six benchmarks (its Tables 1 and 3): column -> (workload, Spec-Bench category or None). Spec-Bench covers
# four; "Alpaca" is UltraChat's evaluation set, the work TALON cites for it (Ding et al., 2023), not EAGLE's Alpaca
# questions (CC BY-NC 4.0, not shipped). Each is decoded greedy (Table 1) and at T = 1 without top-k or top-p
# (Table 3), to EOS or ``Workload.talon_T`` new tokens; MT-Bench as Spec-Bench's first turns (EAGLE's scripts,
# which TALON's baseline runs, answer both turns).
TALON_BENCHMARKS: dict[str, tuple[str, str | None]] = {
    "Alpaca": (ULTRACHAT_EVAL, None), "GSM8K": (SPEC_BENCH, "math_reasoning"), "HumanEval": (HUMANEVAL, None),
    "MT-Bench": (SPEC_BENCH, "multi-turn"), "QA": (SPEC_BENCH, "qa"), "CNN/DM": (SPEC_BENCH, "summarization")}
TALON_WORKLOADS = (SPEC_BENCH, HUMANEVAL, ULTRACHAT_EVAL)
TALON_TEMPERATURES = (0.0, 1.0)

POOLED = "continuations"  # a report's scope pooling every continuation workload (the pair report's)
POOLED_LABEL = "Continuations (WikiText-2 + PG-19)"


def workload(name: str) -> Workload:
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose one of {tuple(WORKLOADS)}")
    return WORKLOADS[name]


def labels() -> dict[str, str]:
    """What tables call each workload, and the pooled scope, in table order."""
    return {**{w.name: w.label for w in WORKLOADS.values()}, POOLED: POOLED_LABEL}


def label(name: str) -> str:
    return labels()[name]


def continuations() -> tuple[str, ...]:
    return tuple(n for n, w in WORKLOADS.items() if w.continuation)


def eos(name: str, tokenizer) -> int | None:
    """The token a generation on workload ``name`` stops at: the tokenizer's EOS where the workload stops at EOS,
    else None (exactly T tokens)."""
    return tokenizer.eos_token_id if workload(name).stop_at_eos else None


def count(name: str, texts: int, questions: int) -> int:
    """A cell's prompt count on workload ``name``: ``questions`` per category where it has categories, else
    ``texts``."""
    return questions if workload(name).per_category else texts
