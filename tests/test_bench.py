import json
import math

import pytest

from dynatree_lib import experiments
from dynatree_lib.bench import ResultStore
from dynatree_lib.decoders import GenerationResult
from dynatree_lib.metrics import aggregate, prompt_metrics
from dynatree_lib.profiles import get_profile


def test_metric_arithmetic_on_a_hand_made_log():
    res = GenerationResult(tokens=list(range(10)), draft_nodes=[6, 6, 4], tree_depth=[4, 4, 2],
                           accepted=[3, 4, 0], committed=[4, 5, 1], draft_forwards=[4, 4, 2],
                           ttft_s=0.1, wall_s=1.0, target_forwards=4)
    m = prompt_metrics(res)
    assert m["tps"] == 10.0 and m["iterations"] == 3
    assert m["L_bar"] == pytest.approx(10 / 3)
    assert m["ell_bar"] == pytest.approx(7 / 3)
    assert m["accept_rate"] == pytest.approx(7 / 10)
    assert m["node_efficiency"] == pytest.approx(7 / 16)
    assert m["draft_forwards_per_iter"] == pytest.approx(10 / 3)
    assert m["draft_nodes_per_iter"] == pytest.approx(16 / 3)
    assert m["ttft_ms"] == pytest.approx(100.0) and m["tpot_ms"] == pytest.approx(100.0)


def test_ar_metrics():
    res = GenerationResult(tokens=[1, 2, 3, 4], draft_nodes=[0] * 4, tree_depth=[0] * 4, accepted=[0] * 4,
                           committed=[1] * 4, draft_forwards=[0] * 4, ttft_s=0.5, wall_s=2.0)
    m = prompt_metrics(res)
    assert m["L_bar"] == 1 and m["ell_bar"] == 0 and math.isnan(m["accept_rate"]) and m["tpot_ms"] == 500.0


def test_aggregate_mean_std():
    rows = [{"tps": 1.0, "equals_ar": True}, {"tps": 3.0, "equals_ar": False}]
    agg = aggregate(rows)
    assert agg["tps"]["mean"] == 2.0 and agg["tps"]["std"] == pytest.approx(math.sqrt(2))
    assert agg["equals_ar"] == 1 and agg["n"] == 2


def test_store_refuses_overwrite_and_archives(tmp_path):
    s = ResultStore(tmp_path / "x.json")
    s.add({"key": "a", "v": 1})
    with pytest.raises(ValueError, match="refusing to overwrite"):
        s.add({"key": "a", "v": 2})
    assert ResultStore(tmp_path / "x.json").get("a")["v"] == 1
    bak = s.archive()
    assert bak.exists() and json.loads(bak.read_text())["records"][0]["key"] == "a"
    assert not (tmp_path / "x.json").exists() and s.records == []


def test_schema_mismatch(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"schema": 99, "records": []}))
    with pytest.raises(ValueError, match="schema"):
        ResultStore(tmp_path / "x.json")


@pytest.fixture(scope="module")
def smoke_main(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    prof = get_profile("smoke", n_prompts=2, T=12)
    path = experiments.run("main", prof, root=root, verbose=False)
    return prof, root, path


def test_main_json_schema(smoke_main):
    prof, _, path = smoke_main
    data = json.loads(path.read_text())
    recs = data["records"]
    assert data["schema"] == 1 and len(recs) == len(prof.datasets) * 7
    for r in recs:
        for k in ("key", "dataset", "method", "config", "T", "L_max", "prompt_ids", "rows", "aggregate",
                  "environment", "target", "draft", "warmup", "kv_mode"):
            assert k in r, k
        for k in ("device", "torch", "transformers", "python", "git_commit", "date"):
            assert k in r["environment"], k
        assert len(r["rows"]) == len(r["prompt_ids"]) == 2
        if r["method"] == "streaming_spec":  # not exact once its window slides: agreement is measured
            assert all(0 <= row["ar_agreement"] <= 1 for row in r["rows"])
        else:
            assert all(row["equals_ar"] and row["ar_agreement"] == 1 for row in r["rows"]), r["method"]
        assert all(row["tokens"] == prof.T for row in r["rows"])
        assert r["aggregate"]["tps"]["mean"] > 0


def test_resume_skips_finished_and_appends_missing(smoke_main, monkeypatch):
    prof, root, path = smoke_main
    data = json.loads(path.read_text())
    dropped = data["records"].pop()            # simulate a record that never finished
    path.write_text(json.dumps(data))
    calls = []
    real = experiments.bench.measure
    monkeypatch.setattr(experiments.bench, "measure", lambda c, *a, **k: calls.append(c.method) or real(c, *a, **k))
    experiments.run("main", prof, root=root, verbose=False)
    assert calls == [dropped["method"]] * 2    # its two prompts, nothing else
    after = json.loads(path.read_text())
    assert [r["key"] for r in after["records"][:-1]] == [r["key"] for r in data["records"]]
    assert after["records"][-1]["key"] == dropped["key"] and not after.get("partial")
    assert [r["tokens_sha"] for r in after["records"][-1]["rows"]] == [r["tokens_sha"] for r in dropped["rows"]]
    experiments.run("main", prof, root=root, verbose=False)
    assert len(calls) == 2                      # nothing left to do


def test_interrupted_interleaved_run_resumes_from_checkpointed_rows(tmp_path, monkeypatch):
    prof = get_profile("smoke", n_prompts=2, T=8)
    real = experiments.bench.measure
    calls = []

    def flaky(c, *a, **k):
        if len(calls) == 5:
            raise KeyboardInterrupt
        calls.append(c.method)
        return real(c, *a, **k)

    monkeypatch.setattr(experiments.bench, "measure", flaky)
    with pytest.raises(KeyboardInterrupt):
        experiments.run("ablation", prof, root=tmp_path, verbose=False)
    data = json.loads((tmp_path / "smoke" / "ablation.json").read_text())
    assert data["records"] == [] and sum(map(len, data["partial"].values())) == 5  # round 0: 4 cells, round 1: AR
    monkeypatch.setattr(experiments.bench, "measure", lambda c, *a, **k: calls.append(c.method) or real(c, *a, **k))
    experiments.run("ablation", prof, root=tmp_path, verbose=False)
    assert len(calls) == 8                      # the 3 missing rows only
    data = json.loads((tmp_path / "smoke" / "ablation.json").read_text())
    assert len(data["records"]) == 4 and not data["partial"]
    assert all(r["aggregate"]["equals_ar"] == 2 for r in data["records"])


def test_context_override_lets_a_long_run_through():
    from dynatree_lib.models import load_pair

    target, draft, _ = load_pair("tiny:target", "tiny:draft", context_override=1024)
    assert target.config.max_position_embeddings == draft.config.max_position_embeddings == 1024
    assert get_profile("paper").context_override >= 1000 + 1500


def test_profiles_and_bad_names():
    assert get_profile("paper").T == 1500 and get_profile("paper").fixed.D == 8
    assert get_profile("cpu", T=64).T == 64
    with pytest.raises(ValueError, match="unknown profile"):
        get_profile("gpu-fast")
    with pytest.raises(ValueError, match="unknown profile field"):
        get_profile("cpu", Tmax=3)
    with pytest.raises(ValueError, match="unknown experiment"):
        experiments.run("table9", get_profile("smoke"))
    with pytest.raises(ValueError, match="unknown method"):
        get_profile("cpu").method("medusa", "pg19")
