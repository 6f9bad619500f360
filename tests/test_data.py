import pytest

from dynatree_lib.data import load_prompts, load_texts, shared_data_dir
from dynatree_lib.models import _tiny_tokenizer

needs_data = pytest.mark.skipif(not (shared_data_dir() / "pg19").exists(), reason="shared/data not beside the checkout")


@pytest.fixture(scope="module")
def tok():
    return _tiny_tokenizer()


@needs_data
def test_local_wikitext_matches_the_raw_file():
    arts = load_texts("wikitext2")
    raw = (shared_data_dir() / "wikitext-2" / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8")
    joined = "".join(t for _, t in arts)
    assert joined.replace("\n", "").replace(" ", "") == raw.replace("\n", "").replace(" ", "")
    assert arts[1][1].startswith(" = Robert Boulter = ")


@needs_data
def test_local_pg19_is_the_test_split():
    books = load_texts("pg19")
    assert sorted(b for b, _ in books) == ["10146", "10321", "10356", "10762"]


@needs_data
@pytest.mark.parametrize("dataset", ["wikitext2", "pg19"])
def test_prompts_deterministic_and_truncated(tok, dataset):
    a = load_prompts(dataset, tok, n=5, L_max=64, seed=3)
    b = load_prompts(dataset, tok, n=5, L_max=64, seed=3)
    c = load_prompts(dataset, tok, n=5, L_max=64, seed=4)
    assert [p.id for p in a] == [p.id for p in b] and all((x.ids == y.ids).all() for x, y in zip(a, b))
    assert [p.id for p in a] != [p.id for p in c]
    assert all(p.ids.numel() == 64 for p in a) and len({p.id for p in a}) == 5
    assert all(p.id.startswith(dataset + ":") for p in a)


def test_missing_local_data_is_a_clear_error(tmp_path, tok):
    with pytest.raises(FileNotFoundError, match="local data file missing"):
        load_prompts("pg19", tok, 2, 16, data_dir=tmp_path)


def test_bad_dataset_and_sizes(tok):
    with pytest.raises(ValueError, match="unknown dataset"):
        load_texts("c4")
    with pytest.raises(ValueError, match="source must be"):
        load_texts("pg19", source="ftp")
    with pytest.raises(ValueError, match="L_max >= 1"):
        load_prompts("pg19", tok, 2, 0)


@needs_data
def test_too_long_L_max(tok):
    with pytest.raises(ValueError, match="lower L_max or n"):
        load_prompts("wikitext2", tok, 3, 10**7)
