"""The llama.cpp peer (``harness.peers.llamacpp_server``) without llama.cpp: the server's command line, request and the parsing of
recorded responses (``tests/data/llamacpp``), the build and GGUF locations and their errors when llama.cpp or a
converted GGUF is absent, and llama.cpp as a registered method (``harness.peers.llamacpp``). The command-line examples' tests:
``test_llamacpp_run.py``."""
import hashlib
import json
from pathlib import Path

import pytest

from dynatree_lib import Sampling
from dynatree_lib.harness.peers import llamacpp_server as L
from dynatree_lib.harness.setup.paths import DRAFT_DIR

DATA = Path(__file__).parents[1] / "data" / "llamacpp"
AR_TEXT = (" British military might .\n\nThe military history of Gibraltar during World War II is a testament to the "
           "bravery and sacrifice of the people of Gibraltar and the bravery of")


def test_server_command_request_and_response():
    argv = L.server_command("draft-chain", "/b", "/t.gguf", 8123, draft="/d.gguf", n_draft=3)
    assert argv[0] == "/b/llama-server" and argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("-np") + 1] == "1" and argv[argv.index("--spec-draft-n-max") + 1] == "3"
    with pytest.raises(ValueError):
        L.server_command("lookahead", "/b", "/t.gguf", 1)
    body = L.completion_request([1, 2, 3], 32)
    assert body["prompt"] == [1, 2, 3] and body["n_predict"] == 32 and body["temperature"] == 0
    assert body["top_k"] == 1 and body["ignore_eos"] and not body["cache_prompt"] and body["return_tokens"]

    ar = L.parse_completion(json.loads((DATA / "server-ar-bf16.response.json").read_text()), "ar")
    assert ar["tokens"] == 32 and ar["prompt_tokens"] == 64 and ar["text"] == AR_TEXT
    assert len(ar["token_ids"]) == 32 and ar["iterations"] == 32
    resp = json.loads((DATA / "server-draft-chain-3.response.json").read_text())
    spec = L.parse_completion(resp, "draft-chain")
    t = resp["timings"]
    assert spec["prefill_s"] == pytest.approx(t["prompt_ms"] / 1e3) and spec["decode_s"] == t["predicted_ms"] / 1e3
    assert (spec["n_drafted"], spec["n_accepted"], spec["iterations"]) == (59, 10, 22)
    assert spec["token_ids"] == ar["token_ids"] and spec["text"] == AR_TEXT
    eagle3 = L.parse_completion(json.loads((DATA / "server-draft-eagle3-3.response.json").read_text()), "draft-eagle3")
    assert eagle3["token_ids"] == ar["token_ids"] and eagle3["n_drafted"] > 0  # greedy: the head drafts, AR's tokens
    argv = L.server_command("draft-eagle3", "/b", "/t.gguf", 8123, draft="/h.gguf", n_draft=3)
    assert argv[argv.index("--spec-type") + 1] == "draft-eagle3" and argv[argv.index("-md") + 1] == "/h.gguf"


def test_a_sampled_request_draws_at_the_temperature_alone():
    body = L.completion_request([1, 2], 8, temperature=1.0, seed=7)
    assert (body["temperature"], body["top_k"], body["top_p"], body["min_p"], body["seed"]) == (1.0, 0, 1.0, 0.0, 7)
    assert L.completion_request([1, 2], 8)["top_k"] == 1  # greedy: top-1


def test_absent_llamacpp(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNATREE_LLAMACPP", str(tmp_path / "nowhere"))
    assert L.find_llamacpp() is None
    with pytest.raises(L.LlamaCppMissing, match="llama-speculative-simple.*build_llamacpp.sh"):
        L.binary("llama-speculative-simple")
    monkeypatch.delenv("DYNATREE_LLAMACPP")
    monkeypatch.setenv("DYNATREE_CACHE", str(tmp_path / "cache"))
    assert L.find_llamacpp() is None and L.default_root() == tmp_path / "cache" / "llama.cpp" / L.VERSION
    assert "build_llamacpp.sh" in L.how_to_get() and "pip install sentencepiece" in L.how_to_get()


def test_absent_gguf(tmp_path, monkeypatch):
    """A build without conversions, or with the conversion of an older draft, says what to run."""
    monkeypatch.delenv("DYNATREE_LLAMACPP", raising=False)  # the build is found under the cache, as by default
    monkeypatch.setenv("DYNATREE_CACHE", str(tmp_path / "cache"))
    bin_dir = L.default_root() / "build" / "bin"
    bin_dir.mkdir(parents=True)
    for b in ("llama-completion", "llama-speculative-simple"):
        (bin_dir / b).write_text("")
    assert L.find_llamacpp() == bin_dir
    q4 = tmp_path / "t.gguf"
    q4.write_bytes(b"q4_1")
    with pytest.raises(L.LlamaCppMissing, match="BF16 target"):
        L.target_gguf("bf16", bin_dir, q4_1=q4)
    assert L.target_gguf("q4_1", bin_dir, q4_1=q4) == q4
    draft = tmp_path / "new-draft"
    draft.mkdir()
    (draft / "model.safetensors").write_bytes(b"weights v2")
    with pytest.raises(L.LlamaCppMissing, match=f"--draft {draft}"):
        L.draft_gguf(draft, bin_dir)
    sha = hashlib.sha256(b"weights v2").hexdigest()
    (L.default_root() / L.gguf_name("draft", sha)).write_bytes(b"gguf")
    assert L.draft_gguf(draft, bin_dir).name == f"draft-{sha[:12]}-bf16.gguf"
    assembled = tmp_path / "smollm2-draft-0123"  # the committed draft's copy in the cache: the plain command
    assembled.mkdir()
    (assembled / "model.safetensors").write_bytes(b"weights v3")
    (assembled / "provenance.json").write_text(json.dumps({"draft": str(DRAFT_DIR)}))
    with pytest.raises(L.LlamaCppMissing, match=r"rerun `bash tools/build_llamacpp.sh`, which"):
        L.draft_gguf(assembled, bin_dir)


# ---- the peer as a registered method (harness.peers.llamacpp) ---------------------------------------------------------------

class RecordedServer:
    """Answers every completion with a recorded llama-server response."""

    argv, target, draft = ["llama-server", "-m", "target.gguf"], "target.gguf", "draft.gguf"

    def __init__(self, name):
        self.resp = json.loads((DATA / f"{name}.response.json").read_text())

    def complete(self, prompt, n_new, ignore_eos=True, temperature=0.0, seed=0):
        self.law = (temperature, seed)
        row = L.parse_completion(self.resp, "draft-chain")
        return {**row, "version": L.version_string({})}


def test_the_peer_decodes_through_the_registry(monkeypatch):
    import torch

    from dynatree_lib import generate
    from dynatree_lib.harness.peers import llamacpp as peers

    from dynatree_lib import methods as registry

    assert peers.METHOD in registry.REGISTRY  # registered where it is declared, as the library is imported
    srv = RecordedServer("server-draft-chain-3")
    monkeypatch.setattr(peers, "server", lambda cfg: srv)
    cfg = peers.LlamaCppConfig("draft-chain", n_draft=3)
    res = generate(None, torch.arange(5), 32, method=cfg)
    row = L.parse_completion(RecordedServer("server-draft-chain-3").resp, "draft-chain")
    assert res.tokens == row["token_ids"] and res.wall_s == pytest.approx(row["prefill_s"] + row["decode_s"])
    assert res.accepted == row["n_accepted"] and res.iterations == len(res.tokens) - row["n_accepted"]
    assert res.engine.startswith("llama.cpp")
    from dynatree_lib.harness.measure.cell import Cell, engine_info

    at = dict(dataset="wikitext2", T=32, L_max=8, dtype="bfloat16")
    info = engine_info(Cell(method="llamacpp", variant=peers.PEERS[0].variant, config=cfg, **at))["engine_info"]
    assert info["command"] == "llama-server -m target.gguf" and info["version"].startswith("llama.cpp")
    assert engine_info(Cell(method="dynatree", config=None, **at)) == {}
    assert srv.law == (0.0, 0)
    gen = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    generate(None, torch.arange(5), 32, method=cfg, sampling=Sampling(1.0), generator=gen())
    temperature, seed = srv.law
    generate(None, torch.arange(5), 32, method=cfg, sampling=Sampling(1.0), generator=gen())
    assert temperature == 1.0 and srv.law == (1.0, seed)  # sampled, seeded by the cell's generator
    with pytest.raises(ValueError, match="temperature alone"):
        generate(None, torch.arange(5), 32, method=cfg, sampling=Sampling(1.0, top_k=5))
    with pytest.raises(ValueError, match="mode must be one of"):
        peers.LlamaCppConfig("lookahead")


def test_eos_is_kept_as_our_decoders_keep_it():
    from dynatree_lib.harness.peers import llamacpp as peers

    row = {"token_ids": [5, 6], "stop_type": "eos", "wall_s": 1.0, "prefill_s": 0.1, "version": "v"}
    assert peers.result_of(row, eos=2).tokens == [5, 6, 2]
    assert peers.result_of({**row, "stop_type": "limit"}, eos=2).tokens == [5, 6]


def test_the_peers_cells_do_not_depend_on_the_build(monkeypatch):
    """Whether llama.cpp is built decides what is measured, never which cells (and so which records render): the
    cpu profile's cells put llama.cpp beside our AR on every workload, its own AR tagged as its reference."""
    from dynatree_lib.harness.experiments import catalog as experiments
    from dynatree_lib.harness.peers import llamacpp as peers
    from dynatree_lib.harness.setup.profiles import get_profile

    prof = get_profile("cpu", candidates=None)
    monkeypatch.setattr(peers, "available", lambda: False)
    without = experiments.cells("peers", prof)
    monkeypatch.setattr(peers, "available", lambda: True)
    assert experiments.cells("peers", prof) == without
    for ws in prof.workloads:
        mine = [c for c in without if c.dataset == ws]
        assert {c.method for c in mine} >= {"ar", "dynatree", "llamacpp"}
        assert sum(c.tags["own_ar"] for c in mine if c.method == "llamacpp") == prof.protocol.replicates
    assert experiments.prompts("peers", prof, without[0]) == prof.settings_for("peers")["n_prompts"]
    assert experiments.cells("peers", get_profile("smoke", candidates=None)) == []


def test_without_llamacpp_its_cells_are_skipped_by_name_and_a_rerun_keeps_its_records(monkeypatch, tmp_path, capsys):
    from dynatree_lib.harness.experiments import catalog as experiments
    from dynatree_lib.harness.peers import llamacpp as peers
    from dynatree_lib.harness.setup.profiles import get_profile

    prof = get_profile("cpu", candidates=None)
    monkeypatch.setattr(peers, "available", lambda: False)
    from dynatree_lib.harness.measure.bench import measurable
    from dynatree_lib.harness.measure.store import results_path

    cells = experiments.cells("peers", prof)
    kept = measurable("peers", [(c, str(i)) for i, c in enumerate(cells)], prof)
    assert [c for c, _ in kept] == [c for c in cells if c.method != "llamacpp"] and kept
    out = capsys.readouterr().out
    assert "'llamacpp' not measured on this machine" in out and "tools/build_llamacpp.sh" in out

    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "costs.json").write_bytes((results_path("costs", prof)).read_bytes())
    committed = tmp_path / "cpu" / "peers.json"
    committed.write_text('{"schema": 2, "records": []}')
    measured = []
    monkeypatch.setattr(experiments, "in_fresh_process", lambda *a: measured.append(a[-1]))
    experiments.run("peers", prof, rerun=True, root=tmp_path)
    assert committed.exists() and not list((tmp_path / "cpu").glob("*.bak.json"))
    assert measured == list(range(prof.protocol.replicates))  # our cells still measured, llama.cpp's not
    assert "rerun of 'peers' skipped" in capsys.readouterr().out


def test_llamacpps_eagle3_mode_takes_a_head_gguf_never_our_draft():
    for draft in (None, "weights/smollm2-draft"):
        with pytest.raises(ValueError, match="EAGLE-3 head's GGUF"):
            L.draft_file("draft-eagle3", draft, None)
    assert L.draft_file("ar", None, None) is None
