"""Tuning, dev and test prompts are disjoint for every workload; every prompt an earlier version measured or
named is a tuning or dev prompt; and no file outside results/ names a test prompt."""
import re
import subprocess

import pytest

from dynatree_lib.harness.setup import splits
from dynatree_lib.harness.setup.prompts import SPLITS, WORKLOADS, candidates, load_prompts
from dynatree_lib.harness.setup.tiny import tiny_tokenizer

from ..conftest import REPO, needs_git_checkout


@pytest.mark.parametrize("workload", WORKLOADS)
def test_splits_are_disjoint(workload):
    sets = {s: set(candidates(workload, s)) for s in SPLITS}
    assert all(sets.values())
    assert not sets["tuning"] & sets["dev"] and not sets["tuning"] & sets["test"] and not sets["dev"] & sets["test"]


def test_burned_prompts_are_never_test_prompts():
    test = set(candidates("wikitext2", "test"))
    assert not {f"wikitext2:{i}" for i in splits.BURNED["wikitext2"]} & test
    held = set(candidates("pg19", "tuning")) | set(candidates("pg19", "dev"))
    named = splits.load_splits()
    assert named["pg19"]["tuning"] and all(c in held for c in named["pg19"]["dev"])


def test_the_authors_prompts_are_never_test_prompts():
    """The authors' PG-19 prompts are each test book's head: the chunk holding it is a tuning or dev prompt."""
    from dynatree_lib.harness.setup.data import load_texts

    held = set(candidates("pg19", "tuning")) | set(candidates("pg19", "dev"))
    assert {f"pg19:{bid}@c0" for bid, _ in load_texts("pg19")} <= held
    assert splits.CHUNK >= 1000  # the authors cut 1000 characters: one chunk holds the whole prompt


def test_spec_bench_split_per_category():
    tok = tiny_tokenizer()
    per = {}
    for p in load_prompts("spec_bench", tok, 10, split="test"):
        per[p.category] = per.get(p.category, 0) + 1
    assert per == {c: 10 for c in set(splits.CATEGORIES.values())}


@needs_git_checkout
def test_no_file_outside_results_names_a_test_prompt():
    """Test prompts appear only in the measured JSON (results/): tables and figures never print their ids, and
    code, notes, notebooks and the tree drawings use dev prompts."""
    test_ids = {p for w in WORKLOADS for p in candidates(w, "test")}
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert len(files) > 100, files  # the whole repository was listed
    allowed = ("results/",)
    pattern = re.compile(rf"(?:{'|'.join(map(re.escape, WORKLOADS))}):\d+(?:@c\d+)?\b")  # every workload's ids
    bad = []
    for f in files:
        if f.startswith(allowed) or not (REPO / f).is_file() or f.endswith((".safetensors", ".parquet", ".gz")):
            continue
        text = (REPO / f).read_text(errors="ignore")
        bad += [(f, m) for m in set(pattern.findall(text)) if m in test_ids]
    assert not bad, bad
