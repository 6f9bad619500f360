import gzip
import hashlib
import os
import re
import subprocess
import sys

import pytest

from dynatree_lib.harness.setup.data import REPO_DATA, data_dir, load_texts, training_text, wikitext_valid_text
from dynatree_lib.harness.setup.prompts import load_prompts
from dynatree_lib.harness.setup.tiny import tiny_tokenizer

from ..conftest import REPO, needs_git_checkout

needs_data = pytest.mark.skipif(not (data_dir() / "pg19").exists(),
                                reason=f"needs the data sets in {data_dir()} (data/, or $DYNATREE_DATA)")


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@needs_data
def test_local_wikitext_matches_the_raw_file():
    # the canonical wiki.test.raw (wikitext-2-raw-v1.zip, sha256 in data/README.md) is the parquet's rows
    # joined, each blank row read as " \n"; the articles are those rows, cut at the headings
    from datasets import load_dataset

    rows = load_dataset("parquet", data_files=str(data_dir() / "wikitext-2" / "test.parquet"), split="train")["text"]
    raw = "".join(r if r else " \n" for r in rows)
    assert len(rows) == 4358 and len(raw.encode("utf-8")) == 1_290_590
    assert hashlib.sha256(raw.encode("utf-8")).hexdigest() == \
        "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08"
    arts = load_texts("wikitext2")
    assert "".join(t for _, t in arts) == "".join(rows)
    assert arts[1][1].startswith(" = Robert Boulter = ")


@needs_data
def test_local_pg19_is_the_test_split():
    books = load_texts("pg19")
    assert sorted(b for b, _ in books) == ["10146", "10321", "10356", "10762"]


@needs_data
@pytest.mark.parametrize("dataset", ["wikitext2", "pg19"])
def test_prompts_deterministic_and_truncated(tok, dataset):
    a = load_prompts(dataset, tok, n=5, L_max=64, split="dev", seed=3)
    b = load_prompts(dataset, tok, n=5, L_max=64, split="dev", seed=3)
    c = load_prompts(dataset, tok, n=5, L_max=64, split="dev", seed=4)
    assert [p.id for p in a] == [p.id for p in b] and all((x.ids == y.ids).all() for x, y in zip(a, b))
    assert [p.id for p in a] != [p.id for p in c]
    assert all(p.ids.numel() == 64 for p in a) and len({p.id for p in a}) == 5
    assert all(p.id.startswith(dataset + ":") for p in a)


def test_missing_local_data_is_a_clear_error(tmp_path, tok):
    with pytest.raises(FileNotFoundError, match="local data file missing"):
        load_prompts("pg19", tok, 2, 16, split="dev", data_dir=tmp_path)


@pytest.mark.parametrize("load", [lambda: load_texts("wikitext2"), lambda: load_texts("pg19"), training_text,
                                  wikitext_valid_text])
def test_DYNATREE_DATA_on_an_empty_folder_is_a_clear_error(tmp_path, monkeypatch, load):
    monkeypatch.setenv("DYNATREE_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    with pytest.raises(FileNotFoundError, match="DYNATREE_DATA") as e:
        load()
    assert str(tmp_path) in str(e.value)


def test_data_dir_defaults_to_the_repository(monkeypatch):
    monkeypatch.delenv("DYNATREE_DATA", raising=False)
    assert data_dir() == REPO_DATA == REPO / "data"


def test_stored_files_match_the_hashes_in_data_readme():
    rows = re.findall(r"^\| `([^`]+)` \| ([\d,]+) \| `([0-9a-f]{64})` \|", (REPO_DATA / "README.md").read_text(),
                      re.M)
    listed = set()  # files a folder's SHA256SUMS covers (the README hashes that manifest)
    complete = set()  # manifests that list every other file of their folder: one of a folder still growing
    for sums in REPO_DATA.rglob("SHA256SUMS"):  # needs no README row (its hash changes with each batch committed)
        names = set()
        for line in sums.read_text().splitlines():
            digest, name = line.split("  ", 1)
            assert hashlib.sha256((sums.parent / name).read_bytes()).hexdigest() == digest, sums.parent / name
            listed.add((sums.parent / name).relative_to(REPO_DATA).as_posix())
            names.add(name)
        if names == {p.name for p in sums.parent.iterdir() if p.is_file() and p != sums}:
            complete.add(sums.relative_to(REPO_DATA).as_posix())
    assert {f for f, _, _ in rows} | listed | complete == {p.relative_to(REPO_DATA).as_posix()
                                                           for p in REPO_DATA.rglob("*")
                                                           if p.is_file() and p.name != "README.md"}
    for f, size, digest in rows:
        b = (REPO_DATA / f).read_bytes()
        assert len(b) == int(size.replace(",", "")) and hashlib.sha256(b).hexdigest() == digest, f


def test_tokenized_wikitext_files():
    valid = wikitext_valid_text(REPO_DATA)
    assert hashlib.sha256(valid.encode("utf-8")).hexdigest() == \
        "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8"
    test = gzip.decompress((REPO_DATA / "wikitext-2" / "wiki.test.tokens.gz").read_bytes())
    assert hashlib.sha256(test).hexdigest() == "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0"


def test_training_text_is_the_36_other_books():
    texts = training_text(REPO_DATA)
    test_books = dict(load_texts("pg19", data_dir=REPO_DATA))
    assert len(texts) == 36 and not set(texts) & set(test_books.values())


_CLONE_SNIPPET = """
import sys
from pathlib import Path
clone = Path(sys.argv[1]).resolve()
import dynatree_lib
from dynatree_lib.harness.setup import data
from dynatree_lib.harness.setup import models
from dynatree_lib.harness.setup import prompts
from dynatree_lib.reporting import tables
assert clone in Path(dynatree_lib.__file__).resolve().parents, dynatree_lib.__file__
assert data.data_dir() == clone / "data", data.data_dir()
tok = models.load_model("tiny:target")[1]
for ds in data.DATASETS:
    ps = prompts.load_prompts(ds, tok, n=2, L_max=24, split="dev")
    assert len(ps) == 2 and all(p.ids.numel() == 24 for p in ps), ps
    print(ds, [p.id for p in ps])
rep = tables.reported()
assert "table1_throughput_tokens_per_s" in rep, list(rep)
print("ok")
"""


@pytest.mark.full
@needs_git_checkout
def test_a_bare_clone_runs_on_its_own(tmp_path):
    """Only committed files: a clone with nothing beside it loads prompts and the paper's numbers."""
    clone = tmp_path / "alone" / "dynatree"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k != "DYNATREE_DATA"}
    env.update(PYTHONPATH=str(clone), HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-c", _CLONE_SNIPPET, str(clone)], cwd=clone, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("ok") and "pg19 ['pg19:" in r.stdout


def test_bad_dataset_and_sizes(tok):
    with pytest.raises(ValueError, match="unknown dataset"):
        load_texts("c4")
    with pytest.raises(ValueError, match="source must be"):
        load_texts("pg19", source="ftp")
    with pytest.raises(ValueError, match="L_max >= 1"):
        load_prompts("pg19", tok, 2, 0)
    with pytest.raises(ValueError, match="unknown workload"):
        load_prompts("c4", tok, 2, 8)
    with pytest.raises(ValueError, match="unknown split"):
        load_prompts("pg19", tok, 2, 8, split="validation")


@needs_data
def test_too_long_L_max(tok):
    with pytest.raises(ValueError, match="lower L_max or n"):
        load_prompts("wikitext2", tok, 3, 10**7, split="dev")
