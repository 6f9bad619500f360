"""Training Medusa and Hydra heads with the EAGLE-3 head's pipeline (``train.mlp_heads``): the teacher-forced heads
compute what the drafter computes (head k at row t is the node k levels below committed token t + 1, on true
tokens); they start as the target's own next-token law; a run is seeded and resumes to the same weights; the export
drafts exactly; every kind of head has a training spec."""
import json

import pytest
import torch

from dynatree_lib import DynaTreeConfig, generate
from dynatree_lib.core.drafts.heads.kinds import HEAD_KINDS
from dynatree_lib.core.drafts.heads.mlp_runner import MLPHeadRunner
from dynatree_lib.core.drafts.heads.mlp import KINDS, load_heads
from dynatree_lib.train import mlp_heads as M
from dynatree_lib.train.eagle3 import train_head  # the pipeline's loop, shared by every kind of head
from dynatree_lib.train.mlp_card import card
from dynatree_lib.train.publish import publish
from dynatree_lib.harness.setup.tiny import tiny_mlp_heads

from ..conftest import prompts
from .test_eagle3_train import tiny_text
from ..core.test_mlp_heads import from_scratch


def spec(kind: str) -> M.MLPHeadSpec:
    return M.MLPHeadSpec(kind=kind, heads=3, draft_vocab=64, steps=40, seqs_per_step=3, seq_len=30, lr=3e-3,
                         warmup=2, ckpt_every=2, matmul_dtype="float32")


@torch.no_grad()
def last_hidden(target, x: torch.Tensor) -> torch.Tensor:
    return target(input_ids=x[None], output_hidden_states=True).hidden_states[-1]


@pytest.mark.parametrize("kind", KINDS)
@torch.no_grad()
def test_each_teacher_forced_head_is_a_drafted_node(llama_target, kind):
    heads = tiny_mlp_heads(llama_target, kind, heads=3, draft_vocab=80, seed=5)
    x = prompts(1, seed=4, lo=14, hi=15)[0]
    outs = heads(last_hidden(llama_target, x), x[None])
    assert [o.shape[1] for o in outs] == [13, 12, 11]
    for k, out in enumerate(outs):
        for t in (0, 5, out.shape[1] - 1):
            want = from_scratch(heads, llama_target, x[:t + 2].tolist(), x[t + 2:t + 2 + k].tolist())
            torch.testing.assert_close(out[0, t], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
@torch.no_grad()
def test_new_heads_start_as_the_targets_next_token_law(llama_target, kind):
    """Medusa's initialisation: every head is the target's output layer over the draft vocabulary (Hydra's
    residual input passes the hidden state through)."""
    vocab = torch.randperm(96, generator=torch.Generator().manual_seed(0))[:64]
    heads = M.new_heads(llama_target, spec(kind), vocab)
    x = prompts(1, seed=2, lo=10, hi=11)[0]
    h = last_hidden(llama_target, x)
    want = llama_target(input_ids=x[None]).logits[..., heads.vocab()]
    for k, out in enumerate(heads(h, x[None])):
        torch.testing.assert_close(out, want[:, :out.shape[1]], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_resumes_to_the_weights_of_an_uninterrupted_one(llama_target, tmp_path, kind):
    seqs = tiny_text(llama_target)
    a_dir = train_head(spec(kind), target=llama_target, steps=6, out=tmp_path / "whole", seqs=seqs)
    train_head(spec(kind), target=llama_target, steps=3, out=tmp_path / "split", seqs=seqs)
    b_dir = train_head(spec(kind), target=llama_target, steps=3, out=tmp_path / "split", seqs=seqs)
    a, b = (torch.load(sorted(f.parent.glob("ckpt-*.pt"))[-1]) for f in (a_dir, b_dir))
    assert [r["loss"] for r in a["log"]] == [r["loss"] for r in b["log"]] and len(a["log"]) == 6
    assert {f"agree{k}" for k in range(3)} <= set(a["log"][0])
    for key in a["head"]:
        assert torch.equal(a["head"][key], b["head"][key]), key
    assert a["log"][-1]["loss"] < a["log"][0]["loss"]
    other = next(k for k in KINDS if k != kind)
    with pytest.raises(ValueError, match="holds a head trained with"):
        train_head(spec(other), target=llama_target, steps=1, out=tmp_path / "whole", seqs=seqs)


@pytest.mark.parametrize("kind", KINDS)
def test_the_exported_heads_draft_exactly(llama_target, tmp_path, kind):
    folder = train_head(spec(kind), target=llama_target, steps=2, out=tmp_path, seqs=tiny_text(llama_target, 4))
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model_type"] == kind and cfg["dtype"] == "bfloat16"
    assert cfg["dynatree_lib"]["training"]["rebuild"].endswith(f"--head {kind} --draft-vocab 64 --heads 3")
    heads = load_heads(folder, llama_target.get_input_embeddings().weight, torch.float32, kind=kind)
    assert heads.cfg.heads == 3 and heads.cfg.feature_layer == 3 and heads.cfg.draft_vocab == 64
    p = prompts(1, seed=9)[0]
    out = generate(llama_target, p, 20, draft=MLPHeadRunner(heads), method=DynaTreeConfig())
    assert out.tokens == generate(llama_target, p, 20).tokens
    text = card(cfg)  # the published folder's model card, from the training record the export carries
    assert f"# {HEAD_KINDS[kind].label} heads for " in text and "2 steps of the schedule's 40" in text
    assert "per head: " in text and text.count(" / ") >= 2 and f"--head {kind} --publish" in text


def test_every_kind_of_head_has_a_training_spec_and_a_build_command():
    from dynatree_lib.cli import parser

    assert set(M.SPECS) == set(HEAD_KINDS)
    assert M.training_spec("hydra", heads=2, draft_vocab=1024).folder().parts[-2:] == ("hydra", "v1k")
    assert M.training_spec("eagle3", draft_vocab=1024).kind == "eagle3"
    with pytest.raises(ValueError, match="the eagle3 head's training has no heads to set"):
        M.training_spec("eagle3", heads=3)
    with pytest.raises(ValueError, match="kind must be one of medusa, hydra"):
        M.MLPHeadSpec(kind="eagle3")
    for kind in HEAD_KINDS:
        args = parser().parse_args(["build-draft", "--head", kind, "--steps", "3"])
        assert args.head == kind and args.steps == 3


def test_publishing_needs_an_export_and_a_head(tmp_path, monkeypatch, capsys):
    from dynatree_lib import cli

    monkeypatch.setattr(M.MLPHeadSpec, "folder", lambda self: tmp_path / self.kind)
    with pytest.raises(FileNotFoundError, match="holds no exported hydra head: train one first"):
        publish("hydra")
    with pytest.raises(SystemExit):
        cli.main(["build-draft", "--publish"])
    assert "argument --publish: names no head; add --head eagle3|medusa|hydra" in capsys.readouterr().err
