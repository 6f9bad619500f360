"""Disjoint tuning, dev and test prompts for every workload (``data/splits.json``).

- WikiText-2 (test split): a prompt is the first L_max tokens of an article (``wikitext2:<article index>``).
- PG-19 (test books): a book's first ``MAX_CHARS`` characters are cut into ``CHUNK`` -character chunks; a prompt
  is the first L_max tokens of a chunk (``pg19:<book id>@c<chunk start>``), so prompts of different chunks never
  share text whatever the tokenizer.
- Spec-Bench: a prompt is a question's first turn through the target's chat template
  (``spec_bench:<question id>``), in one of six categories (MT-bench's eight sub-categories are Spec-Bench's
  "multi-turn conversation").
- HumanEval (``humaneval:<problem number>``) and UltraChat's evaluation set (``ultrachat_eval:<row>``, an
  instruction held twice counted once): questions without categories, drawn in an order seeded by the workload's
  name alone, so adding a workload moves no other workload's prompts; a prompt that a training text holds
  (``IN_TRAINING``) is a dev prompt.

The file lists the tuning and dev prompts; the test split is every other prompt of the workload, drawn in a
seeded order at run time, so no file outside ``results/`` names a test prompt. Prompts that an earlier version of
this repository measured or named (``BURNED``: they were seen while designing), and the chunks holding the
authors' PG-19 prompts (each test book's head, ``harness.setup.prompts.authors_prompts``), are dev or tuning prompts,
never test ones. ``python -m dynatree_lib.harness.setup.splits`` rebuilds the file (deterministic).
"""
from __future__ import annotations

import json
import random

from .data import REPO_DATA, load_texts, spec_bench_questions
from .workloads import CHUNK, MAX_CHARS, WORKLOADS

SPLITS_FILE = REPO_DATA / "splits.json"
SEED = 2026
CATEGORIES = {"writing": "multi-turn", "roleplay": "multi-turn", "reasoning": "multi-turn", "math": "multi-turn",
              "coding": "multi-turn", "extraction": "multi-turn", "stem": "multi-turn", "humanities": "multi-turn",
              "translation": "translation", "summarization": "summarization", "qa": "qa",
              "math_reasoning": "math_reasoning", "rag": "rag"}
# prompts measured or named in this repository before the splits existed (token offsets with SmolLM2's tokenizer)
BURNED = {
    "wikitext2": [3, 4, 5, 7, 27, 28, 33, 40, 41, 44, 51, 53, 58, 60],
    "pg19": [("10146", 16968), ("10146", 25247), ("10146", 26475), ("10146", 27562), ("10146", 31845),
             ("10146", 55340), ("10321", 5306), ("10321", 24953), ("10321", 33506), ("10321", 49673),
             ("10321", 50494), ("10321", 53075), ("10356", 13112), ("10356", 16968), ("10356", 27562),
             ("10356", 31845), ("10356", 49673), ("10762", 2653), ("10762", 26537), ("10762", 33506),
             ("10762", 58343)],
}
# question prompts a training text holds word for word (tests/harness/test_talon_workloads.py finds them): dev prompts
IN_TRAINING = {"ultrachat_eval": [305]}  # "Write a short story about gravity.": the draft's template:1317
SIZES = {"wikitext2": {"tuning": 6, "dev": 12}, "pg19": {"tuning": 6, "dev": 12},
         "spec_bench": {"tuning": 2, "dev": 6},  # spec_bench: per category
         "humaneval": {"tuning": 6, "dev": 12}, "ultrachat_eval": {"tuning": 6, "dev": 12}}


def load_splits() -> dict:
    if not SPLITS_FILE.exists():
        raise FileNotFoundError(f"{SPLITS_FILE} is missing: rebuild it with python -m dynatree_lib.harness.setup.splits")
    return json.loads(SPLITS_FILE.read_text())


def _burned_chunks(tok) -> set[str]:
    """The PG-19 chunks that a burned window (token offset, 250 tokens) touched."""
    books = dict(load_texts("pg19"))
    spans_of = {bid: tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
                for bid, text in books.items()}
    out = set()
    for bid, off in BURNED["pg19"]:
        spans = spans_of[bid][off:off + 250]
        for c in range(spans[0][0] // CHUNK, spans[-1][1] // CHUNK + 1):
            out.add(f"pg19:{bid}@c{c * CHUNK}")
    return out


def build(tok) -> dict:
    """The splits, from the local data (``tok``: the cpu profile's tokenizer, which the burned offsets used)."""
    rng = random.Random(SEED)
    out = {"seed": SEED, "chunk_chars": CHUNK, "max_chars": MAX_CHARS,
           "rule": "test = every other prompt of the workload, in an order seeded by the profile; "
                   "dev and tuning include every prompt measured or named before the splits existed"}
    heads = {f"pg19:{bid}@c0" for bid, _ in load_texts("pg19")}  # the authors' protocol's PG-19 prompts
    for ds, burned in (("wikitext2", {f"wikitext2:{i}" for i in BURNED["wikitext2"]}),
                       ("pg19", _burned_chunks(tok) | heads)):
        if ds == "wikitext2":
            pool = [f"wikitext2:{i}" for i, _ in load_texts(ds)]
        else:
            pool = [f"pg19:{bid}@c{c}" for bid, text in load_texts(ds) for c in range(0, min(len(text), MAX_CHARS), CHUNK)]
        fresh = [p for p in pool if p not in burned]
        rng.shuffle(fresh)
        old = sorted(burned & set(pool))
        rng.shuffle(old)
        n_tune, n_dev = SIZES[ds]["tuning"], SIZES[ds]["dev"]
        tuning = (old + fresh)[:n_tune]
        rest = (old + fresh)[n_tune:]
        dev = rest[:max(n_dev, len(old) - n_tune)]
        out[ds] = {"tuning": sorted(tuning), "dev": sorted(dev)}
    qs = spec_bench_questions()
    out["spec_bench"] = {"tuning": [], "dev": []}
    for cat in dict.fromkeys(CATEGORIES.values()):
        ids = [f"spec_bench:{q['question_id']}" for q in qs if CATEGORIES[q["category"]] == cat]
        rng.shuffle(ids)
        k, d = SIZES["spec_bench"]["tuning"], SIZES["spec_bench"]["dev"]
        out["spec_bench"]["tuning"] += ids[:k]
        out["spec_bench"]["dev"] += ids[k:k + d]
    out["spec_bench"] = {k: sorted(v, key=_number) for k, v in out["spec_bench"].items()}
    for name, w in WORKLOADS.items():
        if name not in out and not w.continuation and not w.per_category:
            out[name] = question_split(name)
    return out


def question_split(name: str) -> dict[str, list[str]]:
    """Tuning and dev prompts of a question workload without categories: its pool in an order seeded by its name,
    the prompts a training text holds (``IN_TRAINING``) added to dev."""
    seen = {f"{name}:{i}" for i in IN_TRAINING.get(name, [])}
    ids = WORKLOADS[name].pool("local", None)
    random.Random(f"{SEED}:{name}").shuffle(ids)
    fresh, k, d = [p for p in ids if p not in seen], SIZES[name]["tuning"], SIZES[name]["dev"]
    return {"tuning": sorted(fresh[:k], key=_number), "dev": sorted([*seen, *fresh[k:k + d]], key=_number)}


def _number(pid: str) -> int:
    return int(pid.split(":")[1])


if __name__ == "__main__":
    from .weights import smollm2_folder
    from transformers import AutoTokenizer

    SPLITS_FILE.write_text(json.dumps(build(AutoTokenizer.from_pretrained(smollm2_folder())), indent=1) + "\n")
    print(SPLITS_FILE)
