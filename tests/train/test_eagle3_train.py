"""Training the EAGLE-3 head (``train.eagle3``): the unrolled training-time steps compute what the drafter computes
(row t at step i is the node i levels below committed token t + 1, on true tokens); a run is seeded and resumes to
the same weights; the export drafts exactly; the held-out shards stay out of the training text."""
import re

import pytest
import torch

from dynatree_lib import DynaTreeConfig, generate
from dynatree_lib.core.drafts.heads.eagle3_runner import Eagle3Runner
from dynatree_lib.core.drafts.heads.eagle3 import load_head
from dynatree_lib.train import eagle3 as E

from ..conftest import prompts
from ..core.test_eagle3 import from_scratch, target_features


def tiny_text(target, n: int = 12) -> list[E.Sequence]:
    """The tiny target's own greedy continuations of random prompts (loss after the prompt)."""
    out = []
    for p in prompts(n, seed=11, lo=3, hi=12):
        out.append(E.Sequence(tuple(p.tolist() + generate(target, p, 24).tokens), p.numel() - 1))
    return out


SPEC = E.HeadSpec(draft_vocab=64, steps=40, seqs_per_step=3, seq_len=30, lr=3e-3, warmup=2, ckpt_every=2,
                  matmul_dtype="float32", init="tied", ttt_steps=3)


@torch.no_grad()
def test_each_unrolled_step_is_a_drafted_node(llama_target, eagle3_head):
    x = prompts(1, seed=4, lo=14, hi=15)[0]
    feats = target_features(llama_target, x, eagle3_head.cfg.aux_layers)[None]
    outs = E.ttt_outputs(eagle3_head, feats, x[None], 3)
    for i, out in enumerate(outs):
        for t in (0, 5, out.shape[1] - 1):
            want = from_scratch(eagle3_head, llama_target, x[:t + 2].tolist(), x[t + 2:t + 2 + i].tolist())
            torch.testing.assert_close(eagle3_head.logits(out[0, t]), want, rtol=1e-4, atol=1e-4)


def test_a_run_resumes_to_the_weights_of_an_uninterrupted_one(llama_target, tmp_path):
    seqs = tiny_text(llama_target)
    whole = E.train_head(SPEC, target=llama_target, steps=6, out=tmp_path / "whole", seqs=seqs)
    E.train_head(SPEC, target=llama_target, steps=3, out=tmp_path / "split", seqs=seqs)
    split = E.train_head(SPEC, target=llama_target, steps=3, out=tmp_path / "split", seqs=seqs)
    a, b = (torch.load(sorted(f.parent.glob("ckpt-*.pt"))[-1]) for f in (whole, split))
    assert [r["loss"] for r in a["log"]] == [r["loss"] for r in b["log"]] and len(a["log"]) == 6
    for k in a["head"]:
        assert torch.equal(a["head"][k], b["head"][k]), k
    assert a["log"][-1]["loss"] < a["log"][0]["loss"]


def test_a_machine_without_checkpoints_resumes_from_the_committed_copy(llama_target, tmp_path):
    seqs, kept = tiny_text(llama_target), tmp_path / "checkpoints" / "v0k.pt"
    E.train_head(SPEC, target=llama_target, steps=3, out=tmp_path / "a", seqs=seqs, committed=kept)
    st = torch.load(kept)
    assert "opt" not in st and len(st["log"]) == 3 and st["optimizer_since"] == 0
    E.train_head(SPEC, target=llama_target, steps=2, out=tmp_path / "b", seqs=seqs, committed=kept)
    b = torch.load(sorted((tmp_path / "b").glob("ckpt-*.pt"))[-1])
    assert len(b["log"]) == 5 and b["optimizer_since"] == 3 and b["log"][:3] == st["log"]
    assert E.learning_rate(SPEC, 3, since=3) < E.learning_rate(SPEC, 4, since=3)  # warmed up again
    E.train_head(SPEC, target=llama_target, steps=1, out=tmp_path / "a", seqs=seqs, committed=kept)
    a = torch.load(sorted((tmp_path / "a").glob("ckpt-*.pt"))[-1])
    assert len(a["log"]) == 6 and a["log"][:5] == b["log"]  # the committed copy was further on than a's own
    other = E.HeadSpec(**{**SPEC.__dict__, "seed": 1})
    with pytest.raises(ValueError, match=re.escape(str(kept))):
        E.train_head(other, target=llama_target, steps=1, out=tmp_path / "c", seqs=seqs, committed=kept)


@pytest.mark.parametrize("bf16_cpu", [False, True])
def test_a_bf16_spec_trains_in_fp32_where_the_cpu_lacks_bf16(llama_target, tmp_path, monkeypatch, bf16_cpu):
    import copy

    from dynatree_lib.core.engines import kernels

    monkeypatch.setattr(kernels, "cpu_has_avx512_bf16", lambda: bf16_cpu)
    target = copy.deepcopy(llama_target).to(torch.bfloat16)
    spec = E.HeadSpec(**{**SPEC.__dict__, "matmul_dtype": "bfloat16"})
    E.train_head(spec, target=target, steps=1, out=tmp_path, seqs=tiny_text(llama_target, 4))
    row = torch.load(sorted(tmp_path.glob("ckpt-*.pt"))[-1])["log"][-1]
    want = "bfloat16" if bf16_cpu else "float32"
    assert (row["matmuls"], row["teacher"], target.dtype) == (want, want, getattr(torch, want))


def test_the_exported_head_drafts_exactly(llama_target, tmp_path):
    folder = E.train_head(SPEC, target=llama_target, steps=2, out=tmp_path, seqs=tiny_text(llama_target, 4))
    head = load_head(folder, llama_target.get_input_embeddings().weight, torch.float32)
    assert head.cfg.draft_vocab == 64 and head.cfg.aux_layers == (0, 1, 2)
    p = prompts(1, seed=9)[0]
    out = generate(llama_target, p, 20, draft=Eagle3Runner(head), method=DynaTreeConfig())
    assert out.tokens == generate(llama_target, p, 20).tokens


def test_the_draft_vocabulary_is_the_most_frequent_loss_tokens():
    seqs = [E.Sequence((1, 2, 3, 3, 3, 4, 4), 2), E.Sequence((9, 9, 9, 5), 0)]
    # twice each (ties by id); 1, 2 and a 3 precede the loss
    assert E.frequent_tokens(seqs, 3, 10).tolist() == [3, 4, 9]


def test_windows_keep_loss_tokens_and_draws_are_seeded_by_the_step():
    s = E.Sequence(tuple(range(100)), 60)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        w = E.window(s, 30, g)
        assert len(w.tokens) == 30 and w.start < 29
    seqs = [E.Sequence(tuple(range(k, k + 50)), 10) for k in range(7)]
    assert E.draw(seqs, SPEC, 5) == E.draw(seqs, SPEC, 5) != E.draw(seqs, SPEC, 6)


def test_held_out_shards_stay_out_of_the_training_text():
    from dynatree_lib.train.train import DraftSpec, is_heldout

    spec = E.HeadSpec()
    held = {f.name for f in E.TEXT.glob("*.json.gz") if is_heldout(f.name, DraftSpec())}
    assert held  # v3's held-out shards exist
    train = {s.tokens for s in E.teacher_text(spec)}
    for f in sorted(held)[:2]:
        assert not train & {s.tokens for s in E.shard_sequences(E.read_gz(E.TEXT / f), spec.prompt_tail)}


def test_the_temperature_fit_finds_the_temperature_that_calibrates():
    """Logits twice too sharp (their halves are the law the agreement is drawn from) fit T = 2; calibrated ones fit
    T = 1; a fitter that multiplied instead of dividing would pick the grid's other end."""
    from dynatree_lib.train.calibrate import fit_on_rows

    g = torch.Generator().manual_seed(0)
    z = 1.5 * torch.randn(40000, 8, generator=g)
    agree = torch.rand(40000, generator=g) < z.softmax(-1).max(-1).values
    temps = (0.5, 1.0, 2.0)
    assert fit_on_rows([(2 * z, agree, "a")], temps)[0] == 2.0
    best, fit = fit_on_rows([(z[:20000], agree[:20000], "a"), (z[20000:], agree[20000:], "b")], temps)
    assert best == 1.0 and fit["heldout_positions"] == 40000 and set(fit["heldout_by_kind"]) == {"a", "b"}


def test_held_out_rows_are_the_pair_reports_first_drafts(llama_target, eagle3_head):
    """``heldout_rows`` row by row: the first drafted token after each loss prefix
    (``core.drafts.heads.eagle3.first_drafts``,
    what the pair report and the drafter compute) and whether it is the target's greedy token."""
    from dynatree_lib.core.drafts.heads.eagle3 import first_drafts

    x = prompts(1, seed=3, lo=20, hi=21)[0]
    held = [("instruction", E.Sequence(tuple(x.tolist()), 4))]
    spec = E.HeadSpec(**{**SPEC.__dict__, "draft_vocab": 80})
    [(logits, agree, kind)] = list(E.heldout_rows(eagle3_head, llama_target, spec, held))
    with torch.no_grad():
        want = first_drafts(eagle3_head, x, target_features(llama_target, x, eagle3_head.cfg.aux_layers))[4:-1]
        greedy = llama_target(input_ids=x[None]).logits[0, 4:-1].argmax(-1)
    assert kind == "instruction" and logits.shape == want.shape == (x.numel() - 5, 80)
    torch.testing.assert_close(logits, want, rtol=1e-4, atol=1e-4)
    assert torch.equal(agree, eagle3_head.vocab()[want.argmax(-1)] == greedy)


def test_publishing_calibrates_a_head_once(llama_target, tmp_path, monkeypatch):
    """``calibrate_export`` divides the head's logits by the fitted temperature (baked into its final norm), records
    the fit, drafts exactly after it, and refuses a folder it already calibrated."""
    import json
    import shutil

    seqs = tiny_text(llama_target, 6)
    folder = E.train_head(SPEC, target=llama_target, steps=2, out=tmp_path / "run", seqs=seqs)
    monkeypatch.setattr(E, "shard_text", lambda spec, heldout: [("continuation", s) for s in seqs])
    dest = shutil.copytree(folder, tmp_path / "published")
    emb = llama_target.get_input_embeddings().weight
    before = load_head(dest, emb, torch.float32)
    whole = E.HeadSpec(**{**SPEC.__dict__, "seq_len": 64})  # no windows: every loss row counts
    fitted = E.fit_on_rows
    monkeypatch.setattr(E, "fit_on_rows", lambda rows: (1.6, fitted(rows)[1]))  # a temperature far from 1
    fit = E.calibrate_export(dest, whole, target=llama_target)
    assert fit["temperature"] == 1.6
    after = load_head(dest, emb, torch.float32)
    out = torch.randn(5, after.cfg.hidden)
    with torch.no_grad():
        torch.testing.assert_close(after.logits(out), before.logits(out) / fit["temperature"], rtol=2e-2, atol=2e-2)
    assert json.loads((dest / "config.json").read_text())["dynatree_lib"]["calibration"] == fit
    assert fit["heldout_positions"] == sum(len(s.tokens) - s.start - 1 for s in seqs)
    p = prompts(1, seed=9)[0]
    drafted = generate(llama_target, p, 20, draft=Eagle3Runner(after), method=DynaTreeConfig())
    assert drafted.tokens == generate(llama_target, p, 20).tokens
    with pytest.raises(ValueError, match="already calibrated"):
        E.calibrate_export(dest, whole, target=llama_target)
    monkeypatch.setattr(E, "shard_text", lambda spec, heldout: [])
    with pytest.raises(FileNotFoundError, match="no held-out teacher shards"):
        E.calibrate_export(shutil.copytree(folder, tmp_path / "again"), whole, target=llama_target)
