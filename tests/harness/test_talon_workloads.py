"""TALON's workload set (issue 57): the two of its benchmarks that Spec-Bench lacks, HumanEval and UltraChat's
evaluation set (TALON's "Alpaca" column), shipped byte for byte with their hashes and read only when they hash
right; their tuning, dev and test prompts are disjoint and stable; no test prompt is in any text the committed
drafts were trained on; and no profile runs them, so every committed render stays as it is."""
import bisect
import gzip
import hashlib
import itertools
import json
import shutil

import pytest
import torch

from dynatree_lib.train import instructions
from dynatree_lib.harness.setup import data
from dynatree_lib.harness.setup import splits
from dynatree_lib.harness.setup.data import REPO_DATA, chat_prompt, training_text, wikitext_valid_articles
from dynatree_lib.harness.setup.profiles import PROFILES
from dynatree_lib.harness.setup.prompts import SPLITS, candidates, load_prompts
from dynatree_lib.harness.setup.tiny import tiny_tokenizer
from dynatree_lib.harness.setup.workloads import (HUMANEVAL, HUMANEVAL_INSTRUCTION, SPEC_BENCH, TALON_BENCHMARKS,
                                            TALON_MAX_NEW_TOKENS, TALON_WORKLOADS, ULTRACHAT_EVAL, WORKLOADS, workload)

NEW = (HUMANEVAL, ULTRACHAT_EVAL)


def test_humaneval_is_openais_file_with_eagles_turn():
    f = REPO_DATA / "humaneval" / "HumanEval.jsonl.gz"
    assert hashlib.sha256(f.read_bytes()).hexdigest() == data.HUMANEVAL_SHA256
    problems = data.humaneval_problems()
    assert [p["task_id"] for p in problems] == [f"HumanEval/{i}" for i in range(164)]
    qs = workload(HUMANEVAL).questions(None)
    assert list(qs) == [f"{HUMANEVAL}:{i}" for i in range(164)]
    assert all(qs[f"{HUMANEVAL}:{i}"]["turns"] == [HUMANEVAL_INSTRUCTION + p["prompt"]] for i, p in enumerate(problems))
    assert (REPO_DATA / "humaneval" / "LICENSE").read_text().startswith("The MIT License")


def test_ultrachat_eval_is_thunlps_file_each_instruction_once():
    rows = data.ultrachat_eval_questions()
    assert len(rows) == 385 and sum(r["class"].strip() == "Vicuna" for r in rows) == 80
    qs = workload(ULTRACHAT_EVAL).questions(None)
    assert len(qs) == len({r["data"] for r in rows}) == 381
    firsts = {}
    for i, r in enumerate(rows):
        firsts.setdefault(r["data"], i)
    assert sorted(int(p.split(":")[1]) for p in qs) == sorted(firsts.values())
    assert (REPO_DATA / "ultrachat_eval" / "LICENSE").read_text().startswith("MIT License")


@pytest.mark.parametrize("folder, name, load", [("humaneval", "HumanEval.jsonl.gz", data.humaneval_problems),
                                                ("ultrachat_eval", "ultra_eval.json", data.ultrachat_eval_questions)])
def test_a_missing_or_corrupt_file_is_refused_by_name(tmp_path, folder, name, load):
    with pytest.raises(FileNotFoundError, match="local data file missing"):
        load(tmp_path)
    (tmp_path / folder).mkdir()
    shutil.copyfile(REPO_DATA / folder / name, tmp_path / folder / name)
    assert load(tmp_path) == load()
    bad = bytearray((tmp_path / folder / name).read_bytes())
    bad[-2] ^= 1
    (tmp_path / folder / name).write_bytes(bytes(bad))
    with pytest.raises(ValueError, match="corrupt") as e:
        load(tmp_path)
    assert str(tmp_path / folder / name) in str(e.value)
    assert hashlib.sha256(bytes(bad)).hexdigest() in str(e.value)
    assert hashlib.sha256((REPO_DATA / folder / name).read_bytes()).hexdigest() in str(e.value)


@pytest.mark.parametrize("name", NEW)
def test_splits_are_disjoint_complete_and_rebuilt_as_committed(name):
    sets = {s: set(candidates(name, s)) for s in SPLITS}
    assert not sets["tuning"] & sets["dev"] and not sets["tuning"] & sets["test"] and not sets["dev"] & sets["test"]
    assert set.union(*sets.values()) == set(workload(name).pool("local", None))
    assert len(sets["tuning"]) == splits.SIZES[name]["tuning"]
    assert len(sets["dev"]) == splits.SIZES[name]["dev"] + len(splits.IN_TRAINING.get(name, []))
    assert splits.question_split(name) == splits.load_splits()[name]  # deterministic: the committed file


@pytest.mark.parametrize("name", NEW)
def test_prompts_go_through_the_chat_template(name):
    tok = tiny_tokenizer()
    a, b = (load_prompts(name, tok, 5, split="test", seed=1) for _ in range(2))
    assert [p.id for p in a] == [p.id for p in b] and len({p.id for p in a}) == 5
    qs = workload(name).questions(None)
    assert all(torch.equal(p.ids, torch.tensor(chat_prompt(tok, qs[p.id]["turns"][0]))) for p in a)
    assert all(p.category is None for p in a) and not {p.id for p in a} & set(candidates(name, "dev"))
    with pytest.raises(ValueError, match="lower n"):
        load_prompts(name, tok, 10_000, split="test")


def found(texts: list[str], names=NEW) -> dict[str, set[int]]:
    """{prompt id: indices of the texts holding it}: a prompt is held where it shares a 13-word sequence with a
    text, or, shorter than that, where its words stand in a text in a row (lower-cased, punctuation dropped)."""
    owner: dict[int, set[str]] = {}
    short: dict[str, str] = {}
    for name in names:
        for pid, q in workload(name).questions(None).items():
            turn = q["turns"][0]
            if len(instructions.words(turn)) < instructions.NGRAM:
                short[" " + " ".join(instructions.words(turn)) + " "] = pid
            for h in instructions.ngram_hashes(turn):
                owner.setdefault(h, set()).add(pid)
    out: dict[str, set[int]] = {}
    for i, text in enumerate(texts):
        for h in instructions.ngram_hashes(text) & owner.keys():
            for pid in owner[h]:
                out.setdefault(pid, set()).add(i)
    norm = [" " + " ".join(instructions.words(t)) + " " for t in texts]
    starts = list(itertools.accumulate((len(t) + 1 for t in norm), initial=0))  # where each text begins in joined
    joined = "|".join(norm)
    for words, pid in short.items():
        at = joined.find(words)
        while at >= 0:
            out.setdefault(pid, set()).add(bisect.bisect_right(starts, at) - 1)
            at = joined.find(words, at + 1)
    return out


def teacher_texts() -> list[str]:
    """Every committed teacher text (v3's shards, v4's text, the sampled answers), decoded."""
    from transformers import AutoTokenizer

    from dynatree_lib.harness.setup.weights import smollm2_folder

    tok = AutoTokenizer.from_pretrained(smollm2_folder())
    v4 = REPO_DATA / "draft_teacher_v4" / "teacher_text.json.gz"
    seqs = json.loads(gzip.decompress(v4.read_bytes()))["tokens"]
    for f in sorted([*(REPO_DATA / "draft_teacher").glob("*.json.gz"),
                     *(REPO_DATA / "draft_teacher_sampled").glob("*.json.gz")]):
        shard = json.loads(gzip.decompress(f.read_bytes()))
        seqs += ([p + a for p, a in zip(shard["prompts"], shard["answers"])] if "answers" in shard else shard["tokens"])
    return tok.batch_decode(seqs)


@pytest.mark.full
def test_no_test_prompt_is_in_any_training_text():
    """The draft's instructions, its continuation text and every committed teacher text (the target's answers the
    drafts and the EAGLE-3 head were trained on) hold exactly the prompts ``splits.IN_TRAINING`` names, dev prompts."""
    texts = [r["text"] for r in instructions.load()] + training_text() + wikitext_valid_articles(raw=True)
    texts += teacher_texts()
    held = set(found(texts))
    assert held == {f"{name}:{i}" for name, ids in splits.IN_TRAINING.items() for i in ids}
    assert all(pid in candidates(pid.split(":")[0], "dev") for pid in held)
    assert not held & {p for name in NEW for p in candidates(name, "test")}


def test_the_overlap_check_finds_a_planted_prompt():
    he, uc = candidates(HUMANEVAL, "test")[0], candidates(ULTRACHAT_EVAL, "test")[0]
    long_turn = workload(HUMANEVAL).questions(None)[he]["turns"][0]
    short_turn = workload(ULTRACHAT_EVAL).questions(None)[uc]["turns"][0]
    texts = ["nothing here", "Some text. " + long_turn[40:400] + " More.", f"Q: {short_turn.upper()}!"]
    assert {he: {1}, uc: {2}}.items() <= found(texts).items()
    assert not found(["nothing here"])


def test_talon_benchmarks_and_limits():
    assert set(TALON_BENCHMARKS) == {"Alpaca", "GSM8K", "HumanEval", "MT-Bench", "QA", "CNN/DM"}
    assert {w for w, _ in TALON_BENCHMARKS.values()} == set(TALON_WORKLOADS)
    for w, category in TALON_BENCHMARKS.values():
        assert category is None if w != SPEC_BENCH else category in splits.CATEGORIES.values()
    assert TALON_MAX_NEW_TOKENS == 1024
    for name, w in WORKLOADS.items():
        assert w.talon_T == (TALON_MAX_NEW_TOKENS if name in TALON_WORKLOADS else None)
        assert w.stop_at_eos or name not in TALON_WORKLOADS


def test_no_profile_runs_the_new_workloads():
    """The committed renders are the profiles' runs: a workload no profile names changes none of them."""
    for prof in PROFILES.values():
        assert not set(prof.protocol.workloads) & set(NEW), prof.name
