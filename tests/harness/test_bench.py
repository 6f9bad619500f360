import dataclasses
import json
import math
import shutil

import pytest

from dynatree_lib.harness.experiments import catalog as experiments
from dynatree_lib.harness.experiments import tuning as tuning_exp
from dynatree_lib.harness.measure import cell as measure
from dynatree_lib.harness.experiments import tuning
from dynatree_lib.harness.setup import variants
from dynatree_lib.reporting.records import steady
from dynatree_lib.harness.setup import workloads
from dynatree_lib.reporting import tables
from dynatree_lib.harness.setup.paths import written_whole
from dynatree_lib.harness.measure.store import ResultStore
from dynatree_lib.core.engines.static import FUSED
from dynatree_lib.harness.measure.cell import agreement
from dynatree_lib.harness.measure.store import config_dict as bench_config
from dynatree_lib.core.result import GenerationResult, IterationLog, Totals
from dynatree_lib.harness.measure.metrics import aggregate, prompt_metrics
from dynatree_lib.harness.setup.profiles import get_profile

from ..tiers import tiered


def test_metric_arithmetic_on_a_hand_made_log():
    log = IterationLog(nodes=[6, 6, 4], depth=[4, 4, 2], accepted=[3, 4, 0], committed=[4, 5, 1],
                       draft_forwards=[4, 4, 2], draft_s=[0.1] * 3, verify_s=[0.2] * 3, commit_s=[0.01] * 3)
    res = GenerationResult(tokens=list(range(10)), ttft_s=0.1, wall_s=1.0, prefill_s=0.2, target_forwards=4, log=log)
    assert res.totals == Totals(iterations=3, accepted=7, drafted_nodes=16, drafted_depth=10, draft_forwards=10)
    m = prompt_metrics(res)
    assert m["tps"] == 10.0 and m["iterations"] == 3
    assert m["L_bar"] == pytest.approx(10 / 3)
    assert m["ell_bar"] == pytest.approx(7 / 3)
    assert m["accept_rate"] == pytest.approx(7 / 10)
    assert m["node_efficiency"] == pytest.approx(7 / 16)
    assert m["draft_forwards_per_iter"] == pytest.approx(10 / 3)
    assert m["draft_nodes_per_iter"] == pytest.approx(16 / 3)
    assert m["depth_per_iter"] == pytest.approx(10 / 3)
    assert m["ttft_ms"] == pytest.approx(100.0) and m["tpot_ms"] == pytest.approx(100.0)
    assert m["ms_per_token"] == pytest.approx(80.0)
    assert m["draft_s"] == pytest.approx(0.3) and m["verify_s"] == pytest.approx(0.6)


def test_ar_metrics():
    res = GenerationResult(tokens=[1, 2, 3, 4], ttft_s=0.5, wall_s=2.0)
    assert res.iterations == 4  # AR: one iteration per token
    m = prompt_metrics(res)
    assert m["L_bar"] == 1 and m["ell_bar"] == 0 and math.isnan(m["accept_rate"]) and m["tpot_ms"] == 500.0
    assert "draft_s" not in m  # AR logs no per-iteration phases


def test_agreement_with_ar():
    assert agreement([1, 2, 3, 4], [1, 2, 3, 4]) == {"equals_ar": True, "ar_agreement": 1.0, "first_divergence": 4}
    assert agreement([1, 2, 3, 4], [1, 2, 9, 4]) == {"equals_ar": False, "ar_agreement": 0.75, "first_divergence": 2}


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


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "x.json"
    with written_whole(path) as tmp:
        tmp.write_text("old")
    with pytest.raises(RuntimeError, match="killed"):
        with written_whole(path) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("killed mid-write")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


def test_schema_mismatch(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"schema": 99, "records": []}))
    with pytest.raises(ValueError, match="schema"):
        ResultStore(tmp_path / "x.json")


@pytest.fixture(scope="module")
def smoke_main(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    prof = get_profile("smoke", n_prompts=2, T=12, replicates=tiered(1, 2), **{"tuning.T": 8})
    path = experiments.run("main", prof, root=root)
    return prof, root, path


def expected_rows(prof, rec) -> int:
    """Prompts behind a record: its cell's count, times the categories for Spec-Bench."""
    from dynatree_lib.harness.setup.splits import CATEGORIES

    from dynatree_lib.harness.measure.cell import Cell

    cell = Cell(dataset=rec["dataset"], method=rec["method"], variant=rec["variant"], config=None,
                T=rec["T"], L_max=rec["L_max"], dtype=rec["dtype"], tags=rec["tags"])
    per = len(set(CATEGORIES.values())) if rec["dataset"] == "spec_bench" else 1
    return experiments.prompts("main", prof, cell) * per


def test_main_json_schema(smoke_main):
    prof, root, path = smoke_main
    data = json.loads(path.read_text())
    recs = data["records"]
    assert data["schema"] == 2 and len(recs) == len(experiments.cells("main", prof, root))
    assert {r["dtype"] for r in recs} == {"bfloat16", "float32"}
    assert {r["dataset"] for r in recs} == set(prof.workloads)
    assert {r["tags"].get("replicate") for r in recs if r["tags"]["role"] == "timed"} == set(range(prof.protocol.replicates))
    for r in recs:
        for k in ("key", "dataset", "method", "variant", "label", "config", "T", "L_max", "dtype", "prompt_ids", "rows",
                  "aggregate", "environment", "target", "draft", "warmup", "kv_mode", "engine", "weights", "bound",
                  "split", "temperature", "replicate"):
            assert k in r, k
        for k in ("device", "device_name", "torch", "transformers", "python", "git_commit", "date"):
            assert k in r["environment"], k
        assert r["bound"]["ms_per_token"] > 0 and r["bound"]["weight_bytes"] > 0 and r["split"] == "test"
        exact = r["tags"]["role"] == "exact"
        assert len(r["rows"]) == len(r["prompt_ids"]) == expected_rows(prof, r), r["label"]
        for row in r["rows"]:
            if r["dataset"] == "spec_bench":  # instructions stop at EOS
                assert 1 <= row["tokens"] <= prof.protocol.T
            else:
                assert row["tokens"] == prof.protocol.T
            assert 0 <= row["ar_agreement"] <= 1
            if exact and r["method"] != "streaming_spec":  # fp32: asserted; bf16: measured
                assert row["equals_ar"] and row["first_divergence"] == row["tokens"], r["label"]
            assert (row.get("read_bandwidth_gbs", 0) > 0) == (r["method"] == "ar")  # AR's bound, probed per row
            assert ("host_s" in row) == (row["engine"] == FUSED)  # the host's share, where the forwards are calls
            assert 0 <= row.get("host_s", 0) <= row["wall_s"]
        assert r["aggregate"]["tps"]["mean"] > 0
    assert (root / "smoke" / "tuning.json").exists()  # main ran the tuning it depends on
    for r in recs:  # AR's bound comes from its rows' probes
        bws = [row["read_bandwidth_gbs"] for row in r["rows"]] if r["method"] == "ar" else None
        want = r["bound"]["weight_bytes"] / (sum(bws) / len(bws)) / 1e6 if bws else r["bound"]["ms_per_token"]
        assert tables.bound_ms(r) == pytest.approx(want)
        per = tables.bound_ratios(r)  # each steady AR generation against its own probes; None for the others
        assert (per is None) == (bws is None)
        if bws:
            wb, rows = r["bound"]["weight_bytes"], [row for row in r["rows"] if steady(row)]
            both = [(row["read_bandwidth_gbs"] + row["read_bandwidth_before_gbs"]) / 2 for row in rows]
            assert per == pytest.approx([row["tpot_ms"] / (wb / bw / 1e6) for row, bw in zip(rows, both)])


def test_tuned_settings_come_from_the_tuning_json(smoke_main):
    prof, root, _ = smoke_main
    recs = json.loads((root / "smoke" / "tuning.json").read_text())["records"]
    recs = [r for r in recs if r.get("temperature", 0.0) == 0.0]  # greedy tuning (sampled: tested in test_sampling)
    for ds in prof.workloads:
        for fam in ("linear", "fixed_tree", "dynatree", "talon", "hf_assisted"):
            cands = [r for r in recs if r["dataset"] == ds and r["method"] == fam]
            assert len(cands) == len(prof.tuning.candidates[fam])  # equal budget: every candidate measured
            best = max(cands, key=lambda r: r["aggregate"]["tps"]["mean"])
            assert bench_config(tuning_exp.tuned(prof, fam, ds, root)) == best["config"]
            assert all(r["prompt_ids"] == cands[0]["prompt_ids"] for r in cands)
        # the extension: DynaTree's candidates with the cut on, the same budget; main runs the fastest
        cands = [r for r in recs if r["dataset"] == ds and r["method"] == "dynatree_cost"]
        assert len(cands) == len(prof.tuning.candidates["dynatree"])
        best = max(cands, key=lambda r: r["aggregate"]["tps"]["mean"])
        assert bench_config(tuning_exp.cost_aware(prof, ds, prof.models.dtype, root)) == best["config"]
    main = json.loads((root / "smoke" / "main.json").read_text())["records"]
    tuning_prompts = {p for r in recs for p in r["prompt_ids"]}
    assert not tuning_prompts & {p for r in main for p in r["prompt_ids"]}  # disjoint from the test prompts


def test_a_tuning_json_from_other_candidates_is_refused(smoke_main, tmp_path):
    """An older tuning's records (other candidates, no tuning split, or another draft's weights) never pick a
    setting, however fast they were; a file holding only those says to run the tuning."""
    prof, root, _ = smoke_main
    data = json.loads((root / "smoke" / "tuning.json").read_text())
    want = tuning_exp.tuned(prof, "linear", "wikitext2", root)
    old = [json.loads(json.dumps(r)) for r in data["records"] if r["method"] == "linear"]
    for i, r in enumerate(old):
        r["aggregate"]["tps"]["mean"] *= 100
        if i % 3 == 0:
            r.pop("split")
        elif i % 3 == 1:
            r["config"]["K"] += 100
        else:
            r["weights"]["draft"] = {"file": "an/earlier/draft.safetensors", "sha256": "0" * 64}
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "tuning.json").write_text(json.dumps({**data, "records": data["records"] + old}))
    assert tuning_exp.tuned(prof, "linear", "wikitext2", tmp_path) == want
    (tmp_path / "smoke" / "tuning.json").write_text(json.dumps({**data, "records": [r for r in old if "split" not in r
                                                                                     or r["config"]["K"] > 100]}))
    with pytest.raises(ValueError, match="no tuning records of this code's linear candidates"):
        tuning_exp.tuned(prof, "linear", "wikitext2", tmp_path)


def test_a_tuning_of_an_earlier_draft_is_used_only_when_there_is_none_of_this_draft(smoke_main, tmp_path, capsys):
    """After a draft is rebuilt, its settings come from the earlier draft's tuning (said so) until it is tuned again."""
    prof, root, _ = smoke_main
    data = json.loads((root / "smoke" / "tuning.json").read_text())
    old = [json.loads(json.dumps(r)) for r in data["records"] if r["method"] == "fixed_tree"
           and r["dataset"] == "wikitext2" and r.get("temperature", 0.0) == 0.0]
    for r in old:
        r["weights"]["draft"] = {"file": "an/earlier/draft.safetensors", "sha256": "0" * 64}
    slowest = min(old, key=lambda r: r["aggregate"]["tps"]["mean"])
    slowest["aggregate"]["tps"]["mean"] *= 1000
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "tuning.json").write_text(json.dumps({**data, "records": old}))
    tuning.warn_once.cache_clear()  # said once a process: an earlier test may have said it for tuning.json already
    assert bench_config(tuning_exp.tuned(prof, "fixed_tree", "wikitext2", tmp_path)) == slowest["config"]
    assert "tuned with an earlier draft's records" in capsys.readouterr().out


def test_tuning_labels_say_what_they_run():
    """(The paper profile once labelled an n_max=64 tree "paper".) Labels are made from the configs."""
    for c in experiments.cells("tuning", get_profile("cpu")):
        cfg = c.config.base if c.method == "dynatree_cost" else c.config  # the extension: its DynaTree settings
        for k, v in bench_config(cfg).items():
            if k not in ("type", "dynamic_breadth", "dynamic_depth", "history", "W", "a_star", "eta_D", "eta_h") and cfg:
                assert f"{k}={v}" in c.label, (c.label, k)


def test_main_runs_the_extension_also_without_its_lookup_skip():
    """Where the draft has a context lookup, main has two more extension rows per dataset and precision: one
    differs from the first in ``lookup_skip`` alone (what the skipped draft forwards are worth), one in
    ``skip_window`` alone (what the record of the copies is worth)."""
    prof = get_profile("cpu", candidates=None)  # the paper settings stand in for the tuned ones
    cells = [c for c in experiments.cells("main", prof) if c.method == "dynatree_cost" and not c.tags.get("control")]
    assert prof.models.draft_lookup and len(cells) == 3 * len(prof.workloads) * (prof.protocol.replicates + 1)
    for ext, off, blind in zip(cells[::3], cells[1::3], cells[2::3]):
        assert ext.config.lookup_skip < 1.0 and off.config == dataclasses.replace(ext.config, lookup_skip=1.0)
        assert ext.config.skip_window > 0 and blind.config == dataclasses.replace(ext.config, skip_window=0)
        assert {(c.dataset, c.dtype) for c in (ext, off, blind)} == {(ext.dataset, ext.dtype)}
        assert (off.variant, blind.variant) == (variants.EVERY_LEVEL_DRAFTED, variants.NO_COPY_RECORD)
    assert not get_profile("smoke").models.draft_lookup  # smoke's tiny draft has none: one extension row


@pytest.mark.full
def test_tables_pick_the_current_profiles_run(smoke_main, capsys):
    """One file holding two runs of the same cells (other prompt counts) is read without mixing them."""
    prof, root, path = smoke_main
    small = get_profile("smoke", n_prompts=1, T=12, **{"tuning.T": 8})
    experiments.run("main", small, root=root)
    df = tables.load(path, prof)
    assert len(df) == len(experiments.cells("main", prof, root))
    ours = (df.tag_role == "timed") & (df.dataset != "spec_bench") & (df.impl == "ours")
    assert set(df[ours].n) == {2}
    assert "skipped" in capsys.readouterr().out
    df1 = tables.load(path, small)
    assert set(df1[(df1.tag_role == "timed") & (df1.dataset != "spec_bench") & (df1.impl == "ours")].n) == {1}
    table = tables.table1(df)  # rendered from the current run: its prompt counts, not the small run's
    assert set(table.index) == set(df[df.tag_role == "timed"].label)
    agree = table[(workloads.label("wikitext2"), "= AR")]
    mine = set(df[ours & (df.dataset == "wikitext2") & (df.method != "ar")].label)
    assert mine and all(agree[lab].split()[0].endswith("/2") for lab in mine), agree


def test_resume_skips_finished_and_appends_missing(smoke_main, monkeypatch):
    prof, root, path = smoke_main
    data = json.loads(path.read_text())
    dropped = [r for r in tables.records(path, prof, verbose=False) if r["label"] != "AR"][-1]
    data["records"] = [r for r in data["records"] if r["key"] != dropped["key"]]
    path.write_text(json.dumps(data))
    calls = []
    real = measure.measure
    monkeypatch.setattr(measure, "measure", lambda run, *a, **k: calls.append(run.cell.label) or real(run, *a, **k))
    experiments.run("main", prof, root=root, replicate=dropped["replicate"])  # in this process
    assert calls == [dropped["label"]] * len(dropped["rows"])  # its prompts, nothing else
    after = json.loads(path.read_text())
    assert after["records"][-1]["key"] == dropped["key"] and not after.get("partial")
    assert [r["key"] for r in after["records"][:-1]] == [r["key"] for r in data["records"]]
    assert [r["tokens_sha"] for r in after["records"][-1]["rows"]] == [r["tokens_sha"] for r in dropped["rows"]]
    experiments.run("main", prof, root=root)
    assert len(calls) == len(dropped["rows"])    # nothing left to do (no replicate process started)


def test_interrupted_interleaved_run_resumes_from_checkpointed_rows(tmp_path, monkeypatch):
    prof = get_profile("smoke", T=8, candidates=None, **{"sweeps.n_prompts": 2})
    n_cells = len(experiments.cells("ablation", prof))
    real = measure.measure
    calls = []

    def flaky(run, *a, **k):
        if len(calls) == n_cells + 1:
            raise KeyboardInterrupt
        calls.append(run.cell.method)
        return real(run, *a, **k)

    monkeypatch.setattr(measure, "measure", flaky)
    with pytest.raises(KeyboardInterrupt):
        experiments.run("ablation", prof, root=tmp_path, replicate=0)  # in this process
    data = json.loads((tmp_path / "smoke" / "ablation.json").read_text())
    # round 0: every cell's first prompt; round 1: AR's second prompt
    assert data["records"] == [] and sum(map(len, data["partial"].values())) == n_cells + 1
    monkeypatch.setattr(measure, "measure", lambda run, *a, **k: calls.append(run.cell.method) or real(run, *a, **k))
    experiments.run("ablation", prof, root=tmp_path, replicate=0)
    assert len(calls) == 2 * n_cells                      # the missing rows only
    data = json.loads((tmp_path / "smoke" / "ablation.json").read_text())
    assert len(data["records"]) == n_cells and not data["partial"]


def test_render_only_refuses_to_measure(tmp_path):
    with pytest.raises(FileNotFoundError, match="render-only"):
        experiments.run("ablation", get_profile("smoke", candidates=None), root=tmp_path, render_only=True)


def test_context_override_lets_a_long_run_through():
    from dynatree_lib.harness.setup.models import load_pair

    target, draft, _ = load_pair("tiny:target", "tiny:draft", context_override=1024)
    assert target.config.max_position_embeddings == draft.config.max_position_embeddings == 1024
    assert get_profile("paper").models.context_override >= 1000 + 1500


def test_profiles_and_bad_names():
    assert get_profile("paper").protocol.T == 1500 and get_profile("paper").paper.fixed.D == 8
    assert get_profile("cpu", T=64).protocol.T == 64
    with pytest.raises(ValueError, match="unknown profile"):
        get_profile("gpu-fast")
    with pytest.raises(ValueError, match="unknown profile field"):
        get_profile("cpu", Tmax=3)
    with pytest.raises(ValueError, match="unknown experiment"):
        experiments.run("table9", get_profile("smoke"))
    with pytest.raises(ValueError, match="unknown method"):
        get_profile("cpu").method("medusa", "pg19")
    assert get_profile("paper").tuning.candidates is None and get_profile("cpu").tuning.candidates is not None
    for fam, cands in get_profile("cpu").tuning.candidates.items():  # equal tuning budget for every family
        assert len(cands) == len(get_profile("cpu").tuning.candidates["dynatree"]), fam
    assert get_profile("cpu", **{"tuning.T": 9}).tuning.T == 9 and get_profile("cpu", engine="eager").models.engine.name == "eager"
    with pytest.raises(ValueError, match="engine must be one of"):
        get_profile("cpu", engine="turbo")


@pytest.mark.full
def test_memory_cells_measure_their_own_models():
    """Each memory cell runs in a fresh process and loads only the models its method needs; its footprint is its
    peak less the process's runtime. (That the peaks do not depend on the order of cells is a measurement:
    ``tools/ratio_report.py memory``.)"""
    from dynatree_lib.harness.measure.memory import measure_in_process
    from dynatree_lib.harness.measure.cell import Cell
    from dynatree_lib import DynaTreeConfig

    prof = get_profile("smoke", T=16)
    at = dict(dataset="wikitext2", T=16, L_max=24, dtype="bfloat16", tags={"role": "memory"})
    cells = [Cell(method="ar", config=None, **at),
             Cell(method="dynatree", config=DynaTreeConfig(D_max=6, n_max=32), **at)]
    rows = [measure_in_process(prof, c) for c in cells]
    assert [r["models"] for r in rows] == [["target"], ["target", "draft"]]  # AR holds no draft
    assert all(r["footprint_mb"] == r["peak_mem_mb"] - r["runtime_mb"] > 0 for r in rows)
    assert rows[0]["draft_tensors_mb"] == 0 < rows[1]["draft_tensors_mb"]
    assert rows[0]["target_tensors_mb"] == rows[1]["target_tensors_mb"] > 0  # the same target, whatever the draft


def test_results_md_holds_every_table():
    from dynatree_lib.harness.setup.paths import REPO

    text = (REPO / "RESULTS.md").read_text()
    missing = [f.stem for f in (REPO / "figures" / "cpu").glob("*.md") if f.read_text().strip() not in text]
    assert not missing, missing


def test_tables_say_which_records_an_earlier_draft_measured(smoke_main, tmp_path, capsys):
    """A rebuilt draft leaves the cells as they were; the tables say which records are the earlier draft's."""
    prof, root, path = smoke_main
    data = json.loads(path.read_text())
    data["records"][0]["weights"]["draft"] = {"file": "weights/old.safetensors", "sha256": "ab" * 32}
    shutil.copytree(root / "smoke", tmp_path / "smoke")
    (tmp_path / "smoke" / "main.json").write_text(json.dumps(data))
    tables.records(tmp_path / "smoke" / "main.json", prof)
    out = capsys.readouterr().out
    assert "1 record(s) were measured with an earlier draft (sha256 abababababab" in out
    tables.records(path, prof)
    assert "earlier draft" not in capsys.readouterr().out


def test_draft_change_table_pairs_the_two_runs_cell_by_cell(smoke_main):
    """The draft change table shows a method only where both runs measured it, each run's speedup from its own
    AR: a run compared with itself reads the same in both columns."""
    prof, root, path = smoke_main
    df = tables.load(path, prof)
    before = df[df.method != "linear"]
    t = tables.draft_change_table(df, before, ("old", "new"))
    assert len(t) and not any("Linear" in m for _, m in t.index)
    assert (t["old speedup r1"] == t["new speedup r1"]).all() and (t["old L̄"] == t["new L̄"]).all()
