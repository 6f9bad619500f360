"""The draft's teacher data survives a session: each shard's greedy text is committed, and the soft targets rebuilt
from it by a teacher-forced forward equal those recorded while generating (same tokens, log-probs up to rounding)."""
import gzip
import json
from dataclasses import replace

import pytest
import torch

from dynatree_lib.draft import teacher
from dynatree_lib.draft.teacher import (ContinuationSpec, InstructionSpec, answer_batch, build_shards,
                                        continuation_shard, load_text, save_text, soft_targets, text_path)
from dynatree_lib.harness.tiny import tiny_llama

V = 64


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=0, vocab_size=V, hidden_size=32, layers=2, max_positions=96).eval()


def continuation(model, spec=ContinuationSpec(batch=3, prompt_lens=(8,), cont=6, k=5, raw_from=None)):
    g = torch.Generator().manual_seed(0)
    corpora = {src: [torch.randint(V, (40,), generator=g).tolist() for _ in range(3)]
               for src in ("wiki_valid", "wiki_valid_raw", "pg19_train")}
    return spec, continuation_shard(model, corpora, spec, 0)


def instruction(model, spec=InstructionSpec(k=5, max_new=7)):
    prompts = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12]]
    answers = answer_batch(model, prompts, spec.max_new, eos=1, pad=0, k=spec.k)
    return spec, {"kind": "instruction", "ids": ["a", "b", "c"], "prompts": prompts,
                  "answers": [a["answer"] for a in answers], "top_lp": [a["top_lp"] for a in answers],
                  "top_ids": [a["top_ids"] for a in answers], "shard": 0}


def assert_same_soft_targets(a, b):
    for lp_a, lp_b, id_a, id_b in zip(*(x if isinstance(x, list) else list(x) for x in
                                        (a["top_lp"], b["top_lp"], a["top_ids"], b["top_ids"]))):
        assert lp_a.shape == lp_b.shape
        assert torch.equal(id_a[:, 0], id_b[:, 0])
        assert torch.allclose(lp_a.float(), lp_b.float(), atol=2e-3)


@pytest.mark.parametrize("make", [continuation, instruction])
def test_soft_targets_from_the_committed_text_equal_the_recording(model, make, tmp_path):
    spec, shard = make(model)
    path = tmp_path / "x.json.gz"
    save_text(shard, spec, path)
    rebuilt = soft_targets(model, load_text(path, spec), spec.k)
    assert set(rebuilt) == set(shard)
    if "answers" in shard:
        assert rebuilt["answers"] == shard["answers"]
    else:
        assert torch.equal(rebuilt["tokens"], shard["tokens"])
    assert_same_soft_targets(shard, rebuilt)


def test_text_files_are_byte_stable_and_hold_no_soft_targets(model, tmp_path):
    spec, shard = continuation(model)
    save_text(shard, spec, tmp_path / "a.json.gz")
    save_text(shard, spec, tmp_path / "b.json.gz")
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()
    row = json.loads(gzip.decompress((tmp_path / "a.json.gz").read_bytes()))
    assert "top_lp" not in row and row["kind"] == "continuation" and row["spec"]["cont"] == spec.cont


def test_a_text_of_another_spec_or_no_text_is_refused_by_name(model, tmp_path):
    spec, shard = continuation(model)
    save_text(shard, spec, tmp_path / "shard-0000.json.gz")
    with pytest.raises(ValueError, match="shard-0000.json.gz was generated with"):
        load_text(tmp_path / "shard-0000.json.gz", replace(spec, cont=7))
    assert load_text(tmp_path / "shard-0000.json.gz", replace(spec, threads=1))["tokens"] == shard["tokens"].tolist()
    (tmp_path / "bad.json.gz").write_text("not gzip")
    with pytest.raises(ValueError, match="bad.json.gz: not a teacher text file"):
        load_text(tmp_path / "bad.json.gz", spec)


def test_a_build_writes_missing_texts_and_rebuilds_shards_from_texts(model, tmp_path, monkeypatch):
    """A shard generated before texts were committed gets its text; a lost shard comes back from its text, not
    from generation."""
    spec, shard = continuation(model)
    out, text = tmp_path / "teacher", tmp_path / "text"
    out.mkdir()
    torch.save(shard, out / "shard-0000.pt")
    monkeypatch.setattr(teacher, "load_target", lambda dtype: (model, None))
    generated = []
    make = lambda m, tok, s: generated.append(s) or continuation_shard(m, {}, spec, s)
    build_shards(["shard-0000"], spec, make, out, text, "test")
    assert text_path(text, "shard-0000").exists() and not generated
    (out / "shard-0000.pt").unlink()
    build_shards(["shard-0000"], spec, make, out, text, "test")
    assert not generated
    assert_same_soft_targets(shard, torch.load(out / "shard-0000.pt"))
