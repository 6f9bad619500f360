"""The cost model: its curves (measured back to back and draft-after-target), the per-iteration
prediction, the acceptance ceiling, and when costs.json is measured again."""
import json
from pathlib import Path

import pytest

from dynatree_lib.harness.experiments import costs as costmodel
from dynatree_lib.harness.experiments.costs import COLD, chain_speedup, forward_costs, predict_iteration, predict_ms_per_token
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.core.engines.hf import HFRunner

FLAT = {"target": {"1": 10.0, "2": 10.0, "64": 10.0}, "draft": {"1": 1.0, "64": 1.0}, COLD: {"1": 1.0, "64": 1.0},
        "loop": {"level": 0.0, "commit": 0.0}}


def test_prediction_and_ceiling_on_flat_curves():
    assert predict_ms_per_token(FLAT, "ar", 0, 0, 0, L_bar=1) == 10.0
    # 3 drafted nodes in a chain, 3 draft forwards, 2 tokens per iteration: (10 + 1 + 2 * 1) / 2
    assert predict_iteration(FLAT, 3, 3, 3, 2.0) == (3.0, 10.0, 0.0)
    assert predict_ms_per_token(FLAT, "linear", 3, 3, 3, L_bar=2.0) == 6.5
    cold = dict(FLAT, **{COLD: {"1": 4.0, "8": 4.0}})  # the first draft forward of an iteration is priced cold
    assert predict_iteration(cold, 3, 3, 3, 2.0) == (6.0, 10.0, 0.0)
    # the loop's own work: per drafting level (one per draft forward) and per commit
    looped = dict(FLAT, loop={"level": 0.5, "commit": 1.0})
    assert predict_iteration(looped, 3, 3, 3, 2.0) == (4.5, 10.0, 1.0)
    assert predict_ms_per_token(looped, "linear", 3, 3, 3, L_bar=2.0) == 7.75
    assert predict_ms_per_token(looped, "ar", 0, 0, 0, L_bar=1) == 10.0
    # a chain of K accepted with probability a: (1 - a^(K+1)) / (1 - a) tokens for fwd_t + K draft forwards
    a, K = 0.5, 2
    assert chain_speedup(FLAT, a, K) == pytest.approx(10.0 / ((10.0 + K * 1.0) / 1.75))
    assert chain_speedup(FLAT, 0.9, 4) > chain_speedup(FLAT, 0.5, 4)
    assert chain_speedup(cold, 0.5, 2) < chain_speedup(FLAT, 0.5, 2)


def test_forward_costs_between_runs_the_other_model(target, draft):
    t, d = HFRunner(target), HFRunner(draft)
    calls = []
    fwd = t.forward
    t.forward = lambda *a, **k: calls.append(a[0].numel()) or fwd(*a, **k)
    out = forward_costs(d, 12, ks=(1, 2), reps=2, vocab=50, between=t)
    assert set(out) == {1, 2} and all(v > 0 for v in out.values())
    assert calls == [12] + [1] * 8 and t.length == 12 and d.length == 12  # prefill, then one per timed forward


@pytest.mark.full
def test_run_costs_measures_again_when_the_engine_changed(tmp_path):
    """Curves measured on another engine (the cpu profile's compiled graph before its one-call forward) are
    not reused: render-only refuses, a run archives them and measures the profile's engine."""
    prof = get_profile("smoke")
    path = tmp_path / "smoke" / "costs.json"
    path.parent.mkdir()
    curve = {"1": 1.0, "2": 1.5}
    old = {"profile": "smoke", "engine": "static+compile", "context": 24, "ks": [1, 2], "environment": {"date": "then"},
           "curves": {d: {"target": curve, "draft": curve, "bound": {}, "engine": "static+compile+dpbf16"}
                      for d in ("bfloat16", "float32")}}
    path.write_text(json.dumps(old))
    assert str(prof.models.engine) != "static+compile"
    with pytest.raises(ValueError, match="measured on engine 'static\\+compile'"):
        costmodel.run_costs(prof, root=tmp_path, render_only=True)
    costmodel.run_costs(prof, root=tmp_path)
    new = json.loads(path.read_text())
    assert new["engine"] == str(prof.models.engine) and new["curves"]["bfloat16"]["target"] != curve
    assert all(COLD in c and c["loop"]["level"] > 0 for c in new["curves"].values())
    assert json.loads(path.with_suffix(".bak.json").read_text()) == old
    measured = path.read_text()
    costmodel.run_costs(prof, root=tmp_path, rerun=True)  # a rerun measures again, the old file set aside
    assert path.with_suffix(".bak.json").read_text() == measured and json.loads(path.read_text())["engine"]


def test_ceiling_table_has_one_column_pair_per_precision():
    from dynatree_lib.reporting.tables import ceiling_table

    t = ceiling_table({"curves": {"bfloat16": FLAT, "float32": FLAT}}, alphas=(0.5, 0.9))
    assert list(t.index) == [0.5, 0.9] and len(t.columns) == 4
    assert t.loc[0.9, ("bfloat16", "predicted speedup")] > t.loc[0.5, ("bfloat16", "predicted speedup")]


def test_loop_costs_time_the_loop_without_forwards(target, draft):
    """A drafting level with the draft's logits replayed, and a commit: both positive, and the runners
    are left as they were found apart from their caches (the draft's emptied)."""
    from dynatree_lib import DynaTreeConfig
    from dynatree_lib.harness.experiments.costs import loop_costs

    t, d = HFRunner(target), HFRunner(draft, list(range(0, 96, 2)))
    calls = []
    fwd = d.forward
    d.forward = lambda *a, **k: calls.append(a[0].numel()) or fwd(*a, **k)
    out = loop_costs(t, d, DynaTreeConfig().policy(), 80, reps=3, vocab=50)
    assert set(out) == {"level", "commit"} and all(v > 0 for v in out.values())
    assert calls == [80] and t.length == 80  # one real draft forward: its logits are replayed


def test_cost_model_table_scales_by_the_same_runs_ar():
    """On the committed smoke run: the AR-scaled gap takes out AR's measured / predicted of the same dataset and
    precision (the curves and the main run are timed minutes apart), so AR's own is 0 and every other row's
    equals (1 + gap) / (1 + AR's gap) - 1."""
    from dynatree_lib.reporting import tables

    root = Path(__file__).resolve().parents[2] / "results" / "smoke"
    t = tables.cost_model_table(tables.load(root / "main.json", get_profile("smoke")),
                                json.loads((root / "costs.json").read_text()))
    ar = t[t.Method == "AR"].set_index(["Dataset", "precision", "replicate"]).gap
    assert len(ar) == ar.index.nunique() > 0 and (t[t.Method == "AR"]["gap, AR-scaled"].abs() < 1e-12).all()
    for _, r in t.iterrows():
        assert r["gap, AR-scaled"] == pytest.approx((1 + r.gap) / (1 + ar[(r.Dataset, r.precision, r.replicate)]) - 1)


def test_one_token_ratio_pairs_its_rounds(target, draft):
    from dynatree_lib.harness.measure.environment import BandwidthProbe

    t, d = HFRunner(target), HFRunner(draft)
    one = costmodel.one_token_ratio(t, d, 12, rounds=3, reps=2, span_s=0.2, probe=BandwidthProbe(mib=8))
    assert one["rounds"] == len(one["target_ms"]) == len(one["draft_ms"]) == len(one["read_gbs"]) == 3
    assert all(g > 0 for g in one["read_gbs"]) and one["span_s"] == 0.2
    ratios = sorted(b / a for a, b in zip(one["target_ms"], one["draft_ms"]))
    assert one["median"] == pytest.approx(ratios[1]) and one["quartiles"][0] <= one["median"] <= one["quartiles"][1]


@pytest.mark.full
def test_run_costs_adds_the_paired_ratio_and_keeps_the_curves(tmp_path):
    """A file from before the paired measurement gets ``one_token`` added, its curves (which the tuning's
    cost-aware candidates were built from) untouched; render-only adds nothing; a file that names other weights
    is refused."""
    prof = get_profile("smoke")
    path = tmp_path / "smoke" / "costs.json"
    costmodel.run_costs(prof, root=tmp_path)
    new = json.loads(path.read_text())
    assert set(new["one_token"]["by_dtype"]) == set(new["curves"]) and new["one_token"]["weights"] == new["weights"]
    old = {k: v for k, v in new.items() if k != "one_token"}
    path.write_text(json.dumps(old))
    costmodel.run_costs(prof, root=tmp_path, render_only=True)
    assert json.loads(path.read_text()) == old
    costmodel.run_costs(prof, root=tmp_path)
    added = json.loads(path.read_text())
    assert {k: v for k, v in added.items() if k != "one_token"} == old and added["one_token"]["by_dtype"]
    path.write_text(json.dumps({**old, "weights": {"draft": {"ref": "another"}}}))
    with pytest.raises(ValueError, match="other weights"):
        costmodel.run_costs(prof, root=tmp_path)


def test_one_token_table_says_when_nothing_was_measured():
    from dynatree_lib.reporting.tables import one_token_table

    assert one_token_table({"curves": {}}).iloc[0, 0] == "not measured"
