"""Notebook 14's ``talon`` experiment (issue 57): AR, SD, EAGLE-3's tree, OPT-Tree, TALON and DynaTree drafting with
a profile's feature head alone, at their published settings, on TALON's workloads, greedy and at exactly T = 1,
to TALON's limit capped by the profile; its records name the head as their draft, every greedy output equals AR's,
its tables and TALON's Figure 6 build from them, and the reported numbers it compares with are TALON's as printed."""
import json

import pandas as pd

import pytest

from dynatree_lib import methods as registry
from dynatree_lib.harness.experiments import catalog as experiments
from dynatree_lib.harness.experiments import talon as talon_exp
from dynatree_lib.harness.peers import llamacpp as peers
from dynatree_lib.harness.setup import variants
from dynatree_lib.harness.experiments.talon import MEDUSA_TREE, TALON_TUNING
from dynatree_lib.harness.setup.data import REPO_DATA
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.harness.setup.workloads import (HUMANEVAL, SPEC_BENCH, TALON_BENCHMARKS, TALON_WORKLOADS, ULTRACHAT_EVAL,
                                            WIKITEXT2)
from dynatree_lib.reporting import plots, tables
from dynatree_lib.reporting.plan import plan

from ..conftest import tiny_head_folder, tiny_mlp_head_folder


@pytest.mark.parametrize("name", ["smoke", "paper-dryrun", "authors-dryrun", "paper", "authors"])
def test_a_profile_without_a_head_has_no_talon_cells(name):
    assert experiments.cells("talon", get_profile(name)) == []


def test_without_tuning_the_cpu_cells_are_talons_methods_at_their_published_settings():
    p = get_profile("cpu", **{"tuning.candidates": None})
    every = experiments.cells("talon", p)
    cells = [c for c in every if c.variant == variants.MAIN and c.method not in (peers.METHOD, registry.DYNATREE_COST)]
    assert {c.method for c in cells} == set(talon_exp.talon_methods())
    assert {c.dataset for c in cells} == set(TALON_WORKLOADS)
    assert {c.sampling.temperature for c in cells} == {0.0, 1.0} and {c.T for c in cells} == {256}
    assert {c.tags["replicate"] for c in cells} == set(range(p.protocol.replicates))
    assert all(c.config == p.method(c.method, c.dataset) and not c.lookup and c.tags["role"] == "talon" for c in cells
               if c.method != registry.AR)
    talon = next(c.config for c in cells if c.method == registry.TALON)
    assert (talon.mu, talon.N, talon.K) == (0.03, 60, 10)
    counts = {c.dataset: experiments.prompts("talon", p, c) for c in cells}
    assert counts == {SPEC_BENCH: 4, HUMANEVAL: 20, ULTRACHAT_EVAL: 20}  # Spec-Bench's: per category
    measuring = experiments.measuring_profile("talon", p)
    assert measuring.models.draft == p.extras.head and measuring.protocol.workloads == TALON_WORKLOADS
    assert all(c.draft is None for c in cells)
    own = [c for c in every if c.variant == variants.OWN_HEADS]
    assert own and all(c.method == registry.EAGLE3_TREE and c.config == MEDUSA_TREE for c in own)
    ext = [c for c in every if c.method == registry.DYNATREE_COST]
    assert ext and all(c.config.base == p.method(registry.DYNATREE, c.dataset) for c in ext)


def test_the_cpu_cells_take_each_rows_fastest_candidate_on_the_heads():
    """Every drafting row of the cpu talon cells runs the candidate of highest mean throughput among its own five
    (drafted with its own head, on the tuning prompts of the same workload), read here from the committed JSON."""
    from dynatree_lib.harness.measure.store import config_dict, results_path

    p = get_profile("cpu")
    tuning = json.loads(results_path(TALON_TUNING, p).read_text())["records"]
    cells = [c for c in experiments.cells("talon", p) if c.method not in (peers.METHOD, registry.AR)]
    assert {c.variant for c in cells} == {variants.MAIN, variants.OWN_HEADS}
    for c in cells:
        recs = [r for r in tuning if r["dataset"] == c.dataset and r["method"] == c.method
                and r["draft"] == (c.draft or p.extras.head) and r["variant"] == variants.CANDIDATE]
        assert len(recs) == 5 and {r["split"] for r in recs} == {"tuning"} and {r["temperature"] for r in recs} == {0}
        assert config_dict(c.config) == max(recs, key=lambda r: r["aggregate"]["tps"]["mean"])["config"]


def test_the_talon_tuning_gives_every_row_the_same_candidates_count_on_tuning_prompts():
    p = get_profile("cpu")
    cells = experiments.cells("talon_tuning", p)
    rows: dict = {}
    for c in cells:
        rows.setdefault((c.dataset, c.method, c.draft), []).append(c)
    assert {len(g) for (_, m, _), g in rows.items() if m != registry.AR} == {5}
    assert {m for _, m, d in rows if d is None} == set(talon_exp.talon_methods()) | {registry.DYNATREE_COST}
    assert {d for _, _, d in rows if d} == set(p.settings_for("talon")["heads"])
    assert all(c.split == "tuning" and c.sampling.temperature == 0 and not c.lookup and c.T == 128 for c in cells)
    for (ws, m, d), g in rows.items():  # the head-designed trees' published settings first
        if m in (registry.EAGLE3_TREE, registry.OPT_TREE, registry.TALON):
            assert g[0].config == (MEDUSA_TREE if d else p.method(m, ws))
    counts = {c.dataset: experiments.prompts(TALON_TUNING, p, c) for c in cells}
    assert counts == {SPEC_BENCH: p.tuning.n_questions, HUMANEVAL: p.tuning.n, ULTRACHAT_EVAL: p.tuning.n}
    keys = {experiments.cell_key(TALON_TUNING, p, c) for c in cells}
    assert len(keys) == len(cells)
    assert experiments.cells("talon_tuning", get_profile("cpu", **{"tuning.candidates": None})) == []


def test_the_cpu_cells_add_medusa_hydra_and_llamacpps_eagle3_beside_its_own_ar():
    p = get_profile("cpu")
    cells = experiments.cells("talon", p)
    own = [c for c in cells if c.variant == variants.OWN_HEADS]
    assert {c.draft for c in own} == set(p.settings_for("talon")["heads"]) and {c.tags["heads"] for c in own} == {"medusa", "hydra"}
    assert all(c.method == registry.EAGLE3_TREE and not c.lookup for c in own)
    assert len(own) == 2 * len(TALON_WORKLOADS) * 2 * p.protocol.replicates
    peer = [c for c in cells if c.method == peers.METHOD]
    assert {c.variant for c in peer} == {m.variant for m in peers.EAGLE3_PEERS}
    assert {c.config.mode for c in peer if c.tags["own_ar"]} == {"ar"}
    assert {c.config.mode for c in peer if not c.tags["own_ar"]} == {"draft-eagle3"}
    assert {c.sampling.temperature for c in peer} == {0.0, 1.0}
    keys = {experiments.cell_key("talon", p, c) for c in own}
    assert len(keys) == len(own)  # the draft is part of the key: Medusa's and Hydra's cells differ


def test_our_extension_on_the_head_prices_its_levels_by_the_heads_measured_step(tmp_path):
    from dynatree_lib.harness.measure.store import results_path

    p = get_profile("cpu")
    ext = [c for c in experiments.cells("talon", p) if c.method == registry.DYNATREE_COST]
    assert len(ext) == len(TALON_WORKLOADS) * 2 * p.protocol.replicates and not any(c.lookup for c in ext)
    costs = json.loads(results_path("costs", p).read_text())["curves"][p.models.dtype]
    share = json.loads(results_path("head_cost", p).read_text())["drafts"]["head"]["median"]
    for c in ext:
        assert c.config.base in p.tuning.candidates[registry.DYNATREE]
        assert dict(c.config.verify_ms)[1] == round(costs["target"]["1"], 3)
        assert c.config.draft_ms == round(share * round(costs["target"]["1"], 3) + costs["loop"]["level"], 3)
    from dynatree_lib.harness.experiments.tuning import NotTuned, head_cost_curve

    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "costs.json").write_text(results_path("costs", p).read_text())
    with pytest.raises(NotTuned, match="head_cost.json is missing"):
        head_cost_curve(p, p.models.dtype, tmp_path)


def test_the_plan_counts_the_talon_notebook():
    rows = {r["notebook"]: r for r in plan(get_profile("cpu"))}
    assert rows["14_talon"]["generations"] > 0 and rows["14_talon"]["tokens"] > 0
    assert {r["notebook"]: r for r in plan(get_profile("smoke"))}["14_talon"]["generations"] == 0


def test_the_limit_is_talons_capped_by_the_profile():
    assert talon_exp.talon_T(get_profile("cpu"), HUMANEVAL) == 256
    assert talon_exp.talon_T(get_profile("cpu", **{"talon.T_cap": 0}), HUMANEVAL) == 1024  # 0: TALON's own
    with pytest.raises(ValueError, match="talon.T_cap must be an integer >= 0"):
        talon_exp.talon_T(get_profile("cpu", **{"talon.T_cap": -1}), HUMANEVAL)
    assert talon_exp.talon_T(get_profile("cpu"), HUMANEVAL, tuning=True) == 128
    assert talon_exp.talon_T(get_profile("cpu", **{"talon.tuning_T": 0}), HUMANEVAL, tuning=True) == 256
    with pytest.raises(ValueError, match="talon.tuning_T must be an integer >= 0"):
        talon_exp.talon_T(get_profile("cpu", **{"talon.tuning_T": -2}), HUMANEVAL, tuning=True)
    with pytest.raises(ValueError, match=f"'{WIKITEXT2}' has no TALON generation limit"):
        talon_exp.talon_T(get_profile("cpu"), WIKITEXT2)


def test_a_missing_paper_setting_is_named():
    with pytest.raises(ValueError, match="no paper setting of 'linear' for workload 'humaneval'"):
        get_profile("paper").method(registry.LINEAR, HUMANEVAL)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("talon")
    folder = tiny_head_folder(tmp / "head")
    heads = tuple(f"{kind}:{tiny_mlp_head_folder(tmp / kind, kind)}" for kind in ("medusa", "hydra"))
    prof = get_profile("smoke", target="tiny-llama:target", dtype="float32", draft_vocab=None, draft_lookup=True,
                       head=f"eagle3:{folder}", replicates=1,
                       **{"tuning.candidates": None, "talon.n_prompts": 2, "talon.T_cap": 8, "talon.heads": heads})
    path = experiments.run("talon", prof, root=tmp, replicate=0)
    return prof, path


@pytest.mark.full
def test_a_tuning_profile_tunes_every_row_on_its_own_head_first(tmp_path):
    """``run("talon")`` measures the tuning on the heads first; each row then runs its fastest candidate among the
    records drafted with its own head (Medusa's and Hydra's rows share a family with EAGLE-3's tree)."""
    from dynatree_lib.harness.measure.store import config_dict

    folder = tiny_head_folder(tmp_path / "head")
    heads = tuple(f"{kind}:{tiny_mlp_head_folder(tmp_path / kind, kind)}" for kind in ("medusa", "hydra"))
    prof = get_profile("smoke", target="tiny-llama:target", dtype="float32", draft_vocab=None, draft_lookup=True,
                       head=f"eagle3:{folder}", replicates=1, cost_aware=False,
                       **{"tuning.n": 1, "tuning.n_questions": 1, "talon.n_prompts": 1, "talon.T_cap": 8,
                          "talon.tuning_T": 6, "talon.heads": heads})
    experiments.run("talon", prof, root=tmp_path, replicate=0)
    assert not (tmp_path / "smoke" / "tuning.json").exists()  # the profile's own tuning is not this one's
    tuning = json.loads((tmp_path / "smoke" / f"{TALON_TUNING}.json").read_text())["records"]
    assert {r["T"] for r in tuning} == {6} and {r["split"] for r in tuning} == {"tuning"}
    for c in experiments.cells("talon", prof, tmp_path):
        if c.method in (registry.AR, peers.METHOD):
            continue
        recs = [r for r in tuning if r["dataset"] == c.dataset and r["method"] == c.method
                and r["draft"] == (c.draft or prof.extras.head)]
        best = max(recs, key=lambda r: r["aggregate"]["tps"]["mean"])
        assert len(recs) == 2 and config_dict(c.config) == best["config"]
    greedy = [r for r in tuning if r["method"] != registry.AR]
    assert all(r["aggregate"]["equals_ar"] == r["aggregate"]["n"] for r in greedy)  # every candidate exact


@pytest.mark.full
def test_the_talon_records_draft_with_the_head_alone_greedy_and_sampled(measured):
    prof, path = measured
    every = json.loads(path.read_text())["records"]
    recs = [r for r in every if r["variant"] != variants.OWN_HEADS]
    assert {r["draft"] for r in recs} == {prof.extras.head} and not any(r["draft_lookup"] for r in every)
    assert {r["temperature"] for r in every} == {0.0, 1.0} and {r["T"] for r in every} == {8}
    assert {r["method"] for r in recs} == set(talon_exp.talon_methods())
    assert {r["dataset"] for r in every} == set(TALON_WORKLOADS)
    assert len(recs) == len(talon_exp.talon_methods()) * len(TALON_WORKLOADS) * 2
    own = [r for r in every if r["variant"] == variants.OWN_HEADS]
    assert {r["draft"] for r in own} == set(prof.settings_for("talon")["heads"]) and len(own) == 2 * len(TALON_WORKLOADS) * 2
    assert {r["weights"]["draft"]["head"] for r in own} == {"medusa", "hydra"}
    greedy = [r for r in own if r["temperature"] == 0.0]
    assert all(r["aggregate"]["equals_ar"] == r["aggregate"]["n"] == len(r["prompt_ids"]) for r in greedy)  # exact
    greedy = [r for r in recs if r["temperature"] == 0.0 and r["method"] != registry.AR]
    assert all(r["aggregate"]["equals_ar"] == r["aggregate"]["n"] == len(r["prompt_ids"]) for r in greedy)  # exact


def test_the_talon_tables_and_figure_read_every_record(measured):
    prof, path = measured
    df = tables.load(path, prof)
    t = tables.talon_table(df)
    assert len(t) == len(talon_exp.talon_methods()) + 2
    assert {"Medusa (EAGLE-3 tree over its heads)", "Hydra (EAGLE-3 tree over its heads)"} <= set(t.index)
    assert ("T = 0", "HumanEval", "MAT (τ)") in t.columns and ("T = 1", "Spec-Bench", "speedup r1") in t.columns
    assert ("T = 0", "HumanEval", "= AR") in t.columns and ("T = 1", "HumanEval", "= AR") not in t.columns
    assert t.loc["AR", ("T = 0", "HumanEval", "δ")] == "–" and t.loc["TALON", ("T = 0", "HumanEval", "= AR")] == "2/2"
    r = tables.talon_reported_vs_reproduced(df)
    assert len(r) == 2 * len(TALON_BENCHMARKS) and (r["prompts"] != "–").all()
    assert r.loc[("0", "HumanEval"), "TALON / EAGLE-3 (reported, Llama3-8B)"] == f"{4.20 / 4.05:.2f}"
    fig = plots.delta_tau(df)
    assert len(fig.axes) == 2 * len(TALON_WORKLOADS)
    b = tables.talon_budget_table(df)
    assert "AR" not in b.index and len(b) == len(t) - 1
    from dynatree_lib.harness.measure.store import config_dict
    from dynatree_lib.harness.setup.variants import short

    assert b.loc["TALON", ("HumanEval", "setting")] == short(config_dict(prof.method(registry.TALON, HUMANEVAL)))
    assert b.loc["Medusa (EAGLE-3 tree over its heads)", ("Spec-Bench", "setting")] == "depth=3 top_k=10 total_tokens=64"


def test_the_reported_numbers_are_talons_with_their_provenance():
    rep = tables.talon_reported()
    assert "Table 1" in rep["source"]["table1_T0"] and "Table 3" in rep["source"]["table3_T1"]
    assert rep["reference_model"] == "Llama3-8B" and rep["models"]["Llama3-8B"] == "Llama-3.1-8B-Instruct"
    assert rep["benchmarks"] == ["Alpaca", "GSM8K", "HumanEval", "MT-Bench", "QA", "CNN/DM"]
    assert set(rep["benchmarks"]) == set(TALON_BENCHMARKS)
    t1, t3 = rep["table1_T0"], rep["table3_T1"]
    assert t1["Vicuna-13B"]["TALON"]["HumanEval"] == {"MAT": 9.48, "speedup": 5.16}  # the abstract's 5.16x
    assert t1["Vicuna-13B"]["EAGLE-3"]["HumanEval"]["speedup"] == 4.77
    assert t3["Vicuna-13B"]["TALON"]["HumanEval"]["speedup"] == 3.97  # the appendix's 3.97x against 3.78x
    assert t3["Vicuna-13B"]["EAGLE-3"]["HumanEval"]["speedup"] == 3.78
    assert t1["Qwen3-8B"]["TALON"]["GSM8K"]["speedup"] == 2.67 and t1["Qwen3-8B"]["EAGLE-3"]["GSM8K"]["speedup"] == 2.37
    assert t1["Llama3-8B"]["EAGLE-3"]["HumanEval"] == {"MAT": 7.08, "speedup": 4.05}
    assert t3["Llama3-8B"]["TALON"]["QA"] == {"MAT": 3.20, "speedup": 2.08}
    for method in (registry.TALON, registry.EAGLE3_TREE, registry.OPT_TREE, registry.LINEAR):
        assert registry.REGISTRY[method].study.reported_talon in t1["Vicuna-13B"]
    readme = (REPO_DATA / "README.md").read_text()
    assert "## talon_reported.json" in readme and "| `talon_reported.json` |" in readme


def test_llamacpps_rows_go_to_their_own_table_over_both_ars(measured):
    from dynatree_lib.reporting.records import add_speedup, row_id

    prof, path = measured
    df = tables.load(path, prof)
    peers.register()
    ar = df[df.method == registry.AR]
    fake = []
    for mode, scale in zip(peers.EAGLE3_PEERS, (2.0, 3.0)):  # llama.cpp's AR twice as fast as ours, its EAGLE-3 3x
        f = ar.copy()
        f["method"], f["variant"], f["impl"] = peers.METHOD, mode.variant, "llama.cpp"
        f["tag_own_ar"] = mode is peers.EAGLE3_PEERS[0]
        f["row"], f["label"] = row_id(peers.METHOD, mode.variant), mode.label
        f["tps_by_prompt"] = [{k: v * scale for k, v in t.items()} for t in f.tps_by_prompt]
        f["tps"] = f.tps * scale
        fake.append(f)
    both = add_speedup(pd.concat([df, *fake]).drop(columns=["speedup", "speedup_lo", "speedup_hi", "speedup_own"]))
    assert len(tables.talon_table(both)) == len(tables.talon_table(df))  # ours only
    t = tables.talon_peer_table(both)
    assert set(t.index) == {"AR", "Linear Spec", *(m.label for m in peers.EAGLE3_PEERS)}
    eagle = peers.EAGLE3_PEERS[1].label
    assert t.loc[eagle, ("T = 0", "HumanEval", "over own AR r1")] == "1.50×"
    assert t.loc[eagle, ("T = 0", "HumanEval", "over our AR r1")] == "3.00×"
    assert tables.talon_peer_table(df).empty


def test_vllms_rows_join_the_peer_table_over_our_ar_of_their_own_run(measured):
    from dynatree_lib.harness.peers import vllm as vllm_peer
    from dynatree_lib.reporting.records import add_speedup, row_id

    prof, path = measured
    df = tables.load(path, prof)
    vllm_peer.register()
    ar = df[df.method == registry.AR]
    ours_there = ar.assign(tps=ar.tps * 1.5, tps_by_prompt=[{k: v * 1.5 for k, v in t.items()} for t in ar.tps_by_prompt])
    run = [ours_there]
    for variant, label, scale in ((vllm_peer.AR_PEER.variant, "vLLM AR", 0.5),
                                  (vllm_peer.EAGLE3_VARIANT, "vLLM EAGLE-3", 0.75), ("vllm_ngram", "vLLM n-gram", 9.0)):
        f = ar.copy()
        f["method"], f["variant"], f["impl"], f["label"] = vllm_peer.METHOD, variant, "vllm", label
        f["tag_own_ar"], f["row"] = variant == vllm_peer.AR_PEER.variant, row_id(vllm_peer.METHOD, variant)
        f["tps_by_prompt"] = [{k: v * scale for k, v in t.items()} for t in f.tps_by_prompt]
        f["tps"] = f.tps * scale
        run.append(f)
    vllm = add_speedup(pd.concat(run).drop(columns=["speedup", "speedup_lo", "speedup_hi", "speedup_own"]))
    t = tables.talon_peer_table(df, vllm)
    assert set(t.index) == {"AR", "Linear Spec", "vLLM AR", "vLLM EAGLE-3"}  # no head-free mode, no second AR
    assert t.loc["vLLM EAGLE-3", ("T = 0", "HumanEval", "over own AR r1")] == "1.50×"
    assert t.loc["vLLM EAGLE-3", ("T = 0", "HumanEval", "over our AR r1")] == "0.50×"  # our AR of the vLLM run
    mine = ar[(ar.replicate == 0) & (ar.dataset == "humaneval") & (ar.temperature == 0)]
    assert t.loc["AR", ("T = 0", "HumanEval", "tok/s")] == f"{mine.tps.iloc[0]:.1f}"  # talon.json's AR, not the run's
