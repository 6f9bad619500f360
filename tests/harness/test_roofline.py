"""The roofline experiment (``harness.experiments.roofline``): one module and one registration; its floors follow
from the roofs and the target's shape as its docstring says; notebook 00 renders it."""
import json
from types import SimpleNamespace

import pytest

from dynatree_lib.core.engines import peak
from dynatree_lib.harness.experiments import catalog
from dynatree_lib.harness.experiments.roofline import floors, run_roofline, shape, target_matmul_params
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.reporting.roofline import roofline_table, roofs_table

LLAMA = SimpleNamespace(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
NEOX = SimpleNamespace(model_type="gpt_neox", hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=4, vocab_size=100)


def doc(**over) -> dict:
    """A record whose floor is bandwidth-bound at one row and compute-bound at 64."""
    d = {"bandwidth_gbs": 10.0, "peak_gflops_used": 100.0, "weight_bytes": 10_000_000, "kv_bytes": 0,
         "matmul_flops_per_row": 50_000_000, "attention_flops_per_row": 0, "isa": "avx512-bf16", "threads": 2,
         "context": 8, "bandwidth_probes_gbs": [9.0, 10.0], "peak_gflops": {"avx512-bf16": {"1": 60.0, "2": 100.0}},
         "measured_ms": {"1": 1.5, "8": 2.0, "64": 60.0}}
    return {**d, **over}


def test_the_experiment_is_registered_once_for_cpu_profiles():
    exp = catalog.get("roofline")
    assert exp.notebook == "00_setup" and isinstance(exp, catalog.Document)
    assert exp.applies(get_profile("smoke")) and not exp.applies(get_profile("paper"))


def test_the_shape_counts_each_architectures_matmuls_and_attention():
    h, i, n, kv, v = 64, 128, 2, 32, 100
    assert target_matmul_params(LLAMA) == n * (2 * h * h + 2 * h * kv + 3 * h * i) + v * h
    assert target_matmul_params(NEOX) == n * (4 * h * h + 2 * h * 256) + v * h
    s = shape(LLAMA, context=10, element_bytes=2)
    assert s["attention_flops_per_row"] == 4 * n * 10 * h and s["kv_bytes"] == 2 * n * 10 * kv * 2
    assert shape(NEOX, 10, 2)["kv_bytes"] == 2 * n * 10 * h * 2  # one key head per query head
    with pytest.raises(ValueError, match="not 'mamba'"):
        target_matmul_params(SimpleNamespace(**{**vars(LLAMA), "model_type": "mamba"}))


def test_the_floor_is_the_larger_roof_and_c_is_over_one_row():
    rows = {r["k"]: r for r in floors(doc())}
    assert rows[1]["floor_ms"] == pytest.approx(1.0) and rows[1]["roof"] == "bandwidth"  # 10 MB at 10 GB/s
    assert rows[8]["floor_ms"] == pytest.approx(4.0) and rows[8]["roof"] == "compute"  # 8 x 50 MFLOP at 100 GFLOP/s
    assert rows[64]["c_floor"] == pytest.approx(32.0) and rows[64]["c"] == pytest.approx(40.0)
    assert rows[64]["c_over_floor"] == pytest.approx(1.25) and rows[1]["measured_over_floor"] == pytest.approx(1.5)
    no_peak = {r["k"]: r for r in floors(doc(peak_gflops_used=None, peak_gflops={}))}
    assert all(r["roof"] == "bandwidth" for r in no_peak.values())
    assert "not measured" in roofs_table(doc(peak_gflops={}, peak_unavailable="no compiler")).to_string()
    assert list(roofline_table(doc()).index) == [1, 8, 64]


def test_the_floors_use_the_bandwidth_the_curve_ran_in():
    """A VM's bandwidth flips between phases: the floors of a curve measured in the slow one are that phase's."""
    slow = doc(curve_probes_gbs=[4.0, 6.0])  # 5 GB/s around the curve, the roof 10
    rows = {r["k"]: r for r in floors(slow)}
    assert rows[1]["floor_ms"] == pytest.approx(2.0) and rows[8]["floor_ms"] == pytest.approx(4.0)
    assert rows[64]["c_floor"] == pytest.approx(16.0)
    roofs = roofs_table(slow)
    assert roofs.loc["read bandwidth around the curve", "used"] == "yes" and roofs.loc["read bandwidth", "used"] == ""
    assert "the phase changed" in roofs.loc["read bandwidth around the curve", "note"]
    assert "floors at 5.0 GB/s" in roofline_table(slow).index.name


@pytest.mark.full
@pytest.mark.skipif(peak.unavailable() is not None, reason=str(peak.unavailable()))
def test_the_smoke_profile_measures_a_record_its_tables_render(tmp_path):
    path = run_roofline(get_profile("smoke"), root=tmp_path)
    d = json.loads(path.read_text())
    assert d["bandwidth_gbs"] > 0 and d["peak_gflops_used"] > 0 and set(d["measured_ms"]) >= {"1", "64"}
    assert len(roofline_table(d)) == len(d["measured_ms"]) and d["environment"]
    assert d["kernel_stream_gbs"] is None or d["bandwidth_gbs"] >= d["kernel_stream_gbs"] > 0
    assert run_roofline(get_profile("paper"), root=tmp_path) == tmp_path / "paper" / "roofline.json"  # GPU: none
    assert not (tmp_path / "paper").exists()


def test_the_step_table_gives_each_steps_ms_and_share():
    from dynatree_lib.core.engines.kernels import PROFILE_STEPS
    from dynatree_lib.reporting.roofline import step_table

    steps = {s: 1.0 for s in PROFILE_STEPS}
    t = step_table({"step_profile": {"1": {"wall_ms": 15.0, "steps_ms": steps}}})
    assert t.loc["sum of steps", "k = 1: ms"] == f"{len(PROFILE_STEPS):.3f}" and t.loc["norms", "k = 1: share"] == "7%"
    assert step_table({"step_profile": None}) is None and step_table({}) is None


def test_the_phase_table_splits_steady_rounds_into_the_two_bandwidth_phases():
    from dynatree_lib.core.engines.kernels import PROFILE_STEPS
    from dynatree_lib.reporting.roofline import phase_table

    def one(gbs, after=None, wall=12.0):
        steps = {s: (2.0 if s in ("o", "down") else 0.5 if s == "attention" else 0.25 if s.startswith("wait") else 0.0)
                 for s in PROFILE_STEPS}
        return {"before_gbs": gbs, "after_gbs": after or gbs, "wall_ms": wall, "steps_ms": steps}

    rounds = [one(50.0), one(52.0), one(30.0, wall=14.0), one(50.0, after=30.0)]  # the last one flipped: left out
    t = phase_table(doc(weight_bytes=200_000_000, phase_profile=rounds))
    assert list(t.columns) == ["fast phase (2 of 4 rounds)", "slow phase (1 of 4 rounds)"]
    fast, slow = t["fast phase (2 of 4 rounds)"], t["slow phase (1 of 4 rounds)"]
    assert fast["read bandwidth, probes (GB/s)"] == "51.0" and slow["bound: weights / probe (ms)"] == "6.67"
    assert fast["weight-streaming steps (ms)"] == "4.00" and fast["their read rate (GB/s)"] == "50.0"
    assert fast["barrier waits (ms)"] == "1.25" and fast["outside the steps (ms)"] == "6.25"  # 12 - 5.75
    assert list(phase_table(doc(phase_profile=rounds[:2])).columns) == ["one phase (2 of 2 rounds)"]
    assert phase_table(doc()) is None and phase_table(doc(phase_profile=None)) is None


def test_c_is_the_median_of_its_paired_rounds_where_the_record_has_them():
    rows = {r["k"]: r for r in floors(doc(c_paired={"1": 1.0, "8": 1.2, "64": 30.0}))}
    assert rows[8]["c"] == pytest.approx(1.2) and rows[64]["c_over_floor"] == pytest.approx(30.0 / 32.0)
    assert rows[1]["measured_over_floor"] == pytest.approx(1.5)  # the forward's own time is still its median
