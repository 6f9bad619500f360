"""tools/gpu_eagle3.py, the EAGLE-3 head's GPU run, on a CPU and a tiny target: it samples answers, trains the
committed head with the library's step, sends the head back in pieces that join to it, and ``finish`` exports it
as the CPU build does, with both runs' logs."""
import argparse

import pytest
import torch

from dynatree_lib.core.drafts.heads.eagle3 import load_head, read_config
from dynatree_lib.train import eagle3 as E
from dynatree_lib.train import head_card
from dynatree_lib.train.head_checkpoints import spec_record

from ..conftest import load_tool, prompts
from .test_eagle3_train import SPEC, tiny_text


@pytest.fixture(scope="module")
def tool():
    return load_tool("gpu_eagle3")


def args(tmp_path, **kw):
    base = dict(bundle=str(tmp_path / "bundle.pt"), gguf="unused", out=str(tmp_path / "out"), seconds=600,
                gen_share=0.5, gen_batch=4, seqs_per_step=3, lr=1e-3, seed=1, reserve=0, no_committed_text=False,
                rounds=1, steps=3, heldout=None)
    return argparse.Namespace(**base | kw)


def bundle(target, tmp_path, seqs) -> dict:
    head = SPEC.new_head(target, E.frequent_tokens(seqs, SPEC.draft_vocab, target.config.vocab_size))
    b = {"instr": [p.tolist() for p in prompts(6, seed=3, lo=3, hi=8)], "instr_ids": [f"i{k}" for k in range(6)],
         "config": None, "eos": 0, "pad": 0, "max_new": 8, "temperature": 1.0, "head": head.state_dict(),
         "cpu_steps": 2, "spec": spec_record(SPEC), "checkpoint": "v0k.pt"}
    torch.save(b, tmp_path / "bundle.pt")
    return b


def test_the_run_trains_the_committed_head_and_sends_it_back_whole(tool, llama_target, tmp_path):
    seqs = tiny_text(llama_target, 8)
    b = bundle(llama_target, tmp_path, seqs)
    held = [("instruction", s) for s in seqs[:2]]
    result = tool.run(args(tmp_path), target=llama_target, committed=seqs[2:], held=held)
    out = tmp_path / "out"
    assert result["gpu_steps"] == 3 and result["train_sequences"] == {"committed": 6, "sampled": 6}
    assert set(result["heldout_agreement"]["before"]) == {"instruction", "all", "rows"}
    sampled = torch.load(out / "sampled_text.pt")
    order = sorted(range(6), key=lambda i: len(b["instr"][i]))
    assert sampled["starts"] == [len(b["instr"][i]) - 1 for i in order]
    assert sampled["ids"] == [f"i{i}#0" for i in order]
    state = torch.load(tool.device_payload.join(out / tool.HEAD_FILE, tmp_path / "joined.pt"))
    assert [r["step"] for r in state["log"]] == [0, 1, 2]
    assert torch.equal(state["head"]["d2t"], b["head"]["d2t"])
    assert not torch.equal(state["head"]["fc.weight"], b["head"]["fc.weight"])  # trained


def test_a_piece_bigger_than_the_device_returns_is_split(tool, llama_target, tmp_path, monkeypatch):
    monkeypatch.setattr(tool, "PIECE_MIB", 0.05)
    seqs = tiny_text(llama_target, 6)
    bundle(llama_target, tmp_path, seqs)
    tool.run(args(tmp_path, steps=1, rounds=0), target=llama_target, committed=seqs, held=[])
    pieces = sorted((tmp_path / "out").glob("head.pt.part*"))
    assert len(pieces) > 1 and all(p.stat().st_size <= 0.05 * 2**20 for p in pieces)


def test_finish_exports_the_head_with_both_logs(tool, llama_target, tmp_path, monkeypatch):
    seqs = tiny_text(llama_target, 6)
    bundle(llama_target, tmp_path, seqs)
    tool.run(args(tmp_path, steps=2), target=llama_target, committed=seqs, held=[])
    cpu = {"log": [{"step": 0, "seconds": 5.0}, {"step": 1, "seconds": 9.0}]}
    torch.save(cpu, tmp_path / "committed.pt")
    monkeypatch.setattr(E, "HeadSpec", lambda: SPEC)
    monkeypatch.setattr("dynatree_lib.train.head_checkpoints.committed_checkpoint",
                        lambda spec: tmp_path / "committed.pt")
    (tmp_path / "out").chmod(0o555)  # what comes back from the device is read-only
    try:
        dest = tool.finish(tmp_path / "out", target=llama_target, out=tmp_path / "head")
    finally:
        (tmp_path / "out").chmod(0o755)
    _, cfg = read_config(dest)
    training = cfg[E.OUR_KEY]["training"]
    assert training["steps"] == 4 and training["gpu"]["gpu_steps"] == 2 and training["gpu"]["cpu_seconds"] == 9.0
    assert [r.get("where") for r in training["last"]] == [None, None, "gpu", "gpu"]
    assert training["last"][-1]["step"] == 3 and training["last"][2]["seconds"] >= 9.0
    head = load_head(dest, llama_target.get_input_embeddings().weight, torch.float32)
    assert head.cfg.draft_vocab == SPEC.draft_vocab
    kept = torch.load(tmp_path / "committed.pt")  # a rebuild resumes from the GPU's head, not the CPU's
    assert len(kept["log"]) == 4 and kept["spec"] == spec_record(SPEC) and kept["gpu"]["gpu_steps"] == 2
    assert all(torch.equal(kept["head"][k], v.float()) for k, v in head.state_dict().items() if k.endswith("d2t"))
    assert "Then 2 steps on cpu" in head_card.gpu_section(training["gpu"]) and head_card.gpu_section(None) == ""
    cpu["log"].append({"step": 2, "seconds": 12.0})  # the committed head moved on since the bundle
    torch.save(cpu, tmp_path / "committed.pt")
    with pytest.raises(ValueError, match="holds 3 steps; the GPU run started from 2"):
        tool.finish(tmp_path / "out", target=llama_target, out=tmp_path / "head2")


def test_sampled_text_is_written_only_where_it_comes_back(tool, tmp_path):
    examples = [{"tokens": [1, 2, 3], "start": 1, "kind": "instruction_t1", "id": "a#0"}] * 50
    assert tool.gpu_distill.save_teacher(examples, tmp_path / "s.pt")
    assert not tool.gpu_distill.save_teacher(examples, tmp_path / "t.pt", limit=100)
    assert not (tmp_path / "t.pt").exists()
    assert torch.load(tmp_path / "s.pt")["lengths"] == [3] * 50


def test_the_held_out_cap_takes_each_kind():
    pairs = [("continuation", 1), ("continuation", 2), ("instruction", 3), ("sampled", 4), ("instruction", 5)]
    tool = load_tool("gpu_eagle3")
    assert tool.first_of_each_kind(pairs, 1) == [("continuation", 1), ("instruction", 3), ("sampled", 4)]
    assert tool.first_of_each_kind(pairs, None) == sorted(pairs, key=lambda p: ["continuation", "instruction",
                                                                                   "sampled"].index(p[0]))
