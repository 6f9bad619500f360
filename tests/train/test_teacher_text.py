"""The draft's teacher data survives a session: each shard's greedy (or sampled) text is committed, and the soft
targets rebuilt from it by a teacher-forced forward equal those recorded while generating (same tokens, log-probs up
to rounding). A sampled shard is its seed's: the same spec and shard give the same answers, another seed others."""
import gzip
import hashlib
import json
from dataclasses import replace

import pytest
import torch

from dynatree_lib.train import instructions, teacher
from dynatree_lib.train.teacher import (SAMPLED_TEXT, TEXT, ContinuationSpec, InstructionSpec, SampledAnswerSpec,
                                        answer_batch, build_sampled_teacher, build_shards, continuation_shard,
                                        instruction_groups, load_text, sampled_files, sampled_name, sampled_seed,
                                        sampled_shard, save_text, soft_targets, teacher_files, text_path)
from dynatree_lib.harness.setup.data import chat_prompt
from dynatree_lib.harness.setup.tiny import tiny_llama, tiny_tokenizer

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


def sampled(model, spec=SampledAnswerSpec(k=5, max_new=7, temperature=0.5)):
    """Sampled at a temperature other than 1, so a recorder that saw warped scores would differ from the
    teacher-forced (raw) recomputation."""
    prompts = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12]]
    answers = answer_batch(model, prompts, spec.max_new, eos=1, pad=0, k=spec.k, temperature=spec.temperature, seed=7)
    return spec, {"kind": "sampled", "ids": ["a", "b", "c"], "prompts": prompts,
                  "answers": [a["answer"] for a in answers], "top_lp": [a["top_lp"] for a in answers],
                  "top_ids": [a["top_ids"] for a in answers], "shard": 0, "sample": 0, "seed": 7}


def assert_same_soft_targets(a, b):
    for lp_a, lp_b, id_a, id_b in zip(*(x if isinstance(x, list) else list(x) for x in
                                        (a["top_lp"], b["top_lp"], a["top_ids"], b["top_ids"]))):
        assert lp_a.shape == lp_b.shape
        assert torch.equal(id_a[:, 0], id_b[:, 0])
        assert torch.allclose(lp_a.float(), lp_b.float(), atol=2e-3)


@pytest.mark.parametrize("make", [continuation, instruction, sampled])
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
    build_shards(["shard-0000"], spec, make, out, text, desc="test")
    assert text_path(text, "shard-0000").exists() and not generated
    (out / "shard-0000.pt").unlink()
    build_shards(["shard-0000"], spec, make, out, text, desc="test")
    assert not generated
    assert_same_soft_targets(shard, torch.load(out / "shard-0000.pt"))


# ---------------------------------------------------------------- sampled answers (the draft head's T = 1 text)

SAMPLED = SampledAnswerSpec(batch=3, max_new=6, k=5, max_prompt=16, shards=1)
ROWS = [{"id": "q1", "text": "Name a colour."}, {"id": "q2", "text": "Add two and three."}, {"id": "q3", "text": "Hi"}]


@pytest.fixture(scope="module")
def byte_model():
    """A tiny model over the tiny tokenizer's 257 ids (the sampled shards go through a chat template)."""
    return tiny_llama(seed=1, vocab_size=257, hidden_size=32, layers=2, max_positions=64).eval()


def test_sampling_at_temperature_1_draws_from_the_recorded_distribution(model, monkeypatch):
    """transformers samples from exactly the distribution the recorder keeps (the model's own, k = the whole
    vocabulary): no top-k / top-p cut, no temperature."""
    drawn, real = [], torch.multinomial
    monkeypatch.setattr(torch, "multinomial", lambda probs, *a, **kw: drawn.append(probs.clone()) or real(probs, *a,
                        **kw))
    rows = answer_batch(model, [[3, 4, 5], [6, 7]], 4, eos=1, pad=0, k=V, temperature=1.0, seed=0)
    for b, row in enumerate(rows):
        for t in range(len(row["answer"])):
            recorded = torch.zeros(V).scatter(0, row["top_ids"][t].long(), row["top_lp"][t].float().exp())
            assert (drawn[t][b] > 0).all() and torch.allclose(drawn[t][b], recorded, atol=1e-3)


def test_a_sampled_shard_is_its_seeds_and_leaves_the_callers_random_state(byte_model):
    tok = tiny_tokenizer()
    before = torch.get_rng_state()
    a, again = (sampled_shard(byte_model, tok, ROWS, SAMPLED, 0, group=0) for _ in range(2))
    assert torch.equal(torch.get_rng_state(), before)
    assert a["answers"] == again["answers"] and all(map(torch.equal, a["top_lp"], again["top_lp"]))
    other_sample, other_group = sampled_shard(byte_model, tok, ROWS, SAMPLED, 1, group=0), \
        sampled_shard(byte_model, tok, ROWS, SAMPLED, 0, group=1)
    assert other_sample["answers"] != a["answers"] and other_group["answers"] != a["answers"]
    assert len({a["seed"], other_sample["seed"], other_group["seed"]}) == 3
    assert a["ids"] == ["q3", "q1", "q2"]  # shortest first: less padding


def test_a_sampled_text_is_byte_stable_and_refused_under_another_spec(byte_model, tmp_path):
    shard = sampled_shard(byte_model, tiny_tokenizer(), ROWS, SAMPLED, 1, group=0)
    save_text(shard, SAMPLED, tmp_path / "a.json.gz")
    save_text(shard, SAMPLED, tmp_path / "b.json.gz")
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()
    row = json.loads(gzip.decompress((tmp_path / "a.json.gz").read_bytes()))
    assert "top_lp" not in row and (row["kind"], row["sample"], row["seed"]) == ("sampled", 1, shard["seed"])
    for other in (replace(SAMPLED, temperature=0.8), replace(SAMPLED, seed=1), InstructionSpec(k=5, max_new=6)):
        with pytest.raises(ValueError, match="a.json.gz was generated with"):
            load_text(tmp_path / "a.json.gz", other)
    longer = replace(SAMPLED, samples=3, shards=None, threads=1)  # a longer build keeps the shards it has
    assert load_text(tmp_path / "a.json.gz", longer)["answers"] == shard["answers"]
    with pytest.raises(ValueError, match="temperature must be > 0"):
        replace(SAMPLED, temperature=0.0)


def test_the_sampled_build_answers_the_committed_instructions_resumably(byte_model, tmp_path, monkeypatch):
    """Every sampled prompt is a committed instruction's (test_instructions.py: none from an evaluation set), group
    g holds instr-g's instructions, the manifest lists every text, a rerun generates nothing, and v3's
    training files leave the sampled shards out."""
    tok = tiny_tokenizer()
    monkeypatch.setattr(teacher, "load_target", lambda dtype: (byte_model, tok))
    out, text, spec = tmp_path / "teacher", tmp_path / "text", replace(SAMPLED, shards=2)
    build_sampled_teacher(out, spec, text)
    names = ["sampled-0000-0", "sampled-0000-1", "sampled-0001-0", "sampled-0001-1"]
    assert sampled_files(out, spec) == [out / f"{n}.pt" for n in names] and not teacher_files(out)
    assert sampled_files(out, replace(spec, samples=1, shards=1)) == [out / "sampled-0000-0.pt"]
    committed = {r["id"]: r["text"] for r in instructions.load()}
    groups = instruction_groups(spec)
    for name in names:
        row = load_text(text_path(text, name), spec)
        assert name == sampled_name(row["shard"], row["sample"]) and row["seed"] == sampled_seed(spec, row["sample"],
                                                                                                 row["shard"])
        assert sorted(row["ids"]) == sorted(r["id"] for r in groups[row["shard"]])
        assert row["prompts"] == [chat_prompt(tok, committed[i])[-spec.max_prompt:] for i in row["ids"]]
    sums = dict(line.split("  ")[::-1] for line in (text / "SHA256SUMS").read_text().splitlines())
    assert sums == {f"{n}.json.gz": hashlib.sha256(text_path(text, n).read_bytes()).hexdigest() for n in names}
    monkeypatch.setattr(teacher, "load_target", lambda dtype: pytest.fail("a rerun loaded the target"))
    build_sampled_teacher(out, spec, text)


def test_sampled_groups_are_the_greedy_shards_groups():
    greedy = json.loads(gzip.decompress(text_path(TEXT, "instr-0000").read_bytes()))
    assert sorted(greedy["ids"]) == sorted(r["id"] for r in instruction_groups(SampledAnswerSpec())[0])
    assert len(instruction_groups(SampledAnswerSpec())) == -(-len(instructions.load()) // SampledAnswerSpec().batch)


def test_the_committed_sampled_texts_answer_their_groups():
    files = sorted(SAMPLED_TEXT.glob("*.json.gz"))
    if not files:
        pytest.skip(f"no sampled teacher text in {SAMPLED_TEXT} yet")
    spec = SampledAnswerSpec()
    groups = instruction_groups(spec)
    for f in files:
        row = load_text(f, spec)
        assert f.name == text_path(f.parent, sampled_name(row["shard"], row["sample"])).name
        assert sorted(row["ids"]) == sorted(r["id"] for r in groups[row["shard"]]), f
        assert len(row["answers"]) == len(row["prompts"]) == len(row["ids"]), f
