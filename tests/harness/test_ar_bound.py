"""The AR-bound experiment (``harness.experiments.ar_bound``): AR alone on each main workload, per replicate, in
processes of its own, on CPU profiles only; each generation carries the probe its bound is read from."""
import pytest

from dynatree_lib import methods as registry
from dynatree_lib.harness.experiments import catalog
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.reporting import tables
from dynatree_lib.reporting.pair_tables import steady_ratios
from dynatree_lib.reporting.records import bound_ratios, records


def test_it_measures_ar_on_each_main_workload_per_replicate_on_cpus_only():
    exp, p = catalog.get("ar_bound"), get_profile("cpu")
    cells = exp.cells(p)
    assert exp.in_process and exp.notebook == "00_setup"
    assert {c.method for c in cells} == {registry.AR} and {c.dtype for c in cells} == {p.models.dtype}
    assert sorted((c.dataset, c.tags["replicate"]) for c in cells) == sorted(
        (ws, r) for ws in p.workloads for r in range(p.protocol.replicates))
    assert all(exp.prompts(p, c) == catalog.get("main").prompts(p, c) for c in cells)
    assert not catalog.measures("ar_bound", get_profile("paper"))


@pytest.mark.full
def test_the_smoke_profile_measures_a_record_whose_table_reads_each_probe(tmp_path):
    p = get_profile("smoke")
    path = catalog.run("ar_bound", p, root=tmp_path, replicate=0)
    t = tables.ar_vs_bound(tables.load(path, p))
    assert len(t) == len(p.workloads) and t.index.names == ["dataset", "precision", "replicate"]
    assert all(v.endswith(("]", "steady)")) for v in t["each generation / its probes"])
    rows = [r for rec in records(path) for r in rec["rows"]]
    assert all(r["read_bandwidth_before_gbs"] > 0 and r["read_bandwidth_gbs"] > 0 for r in rows)


def test_only_generations_whose_probes_agree_are_set_against_their_bound():
    row = {"tpot_ms": 2.0, "read_bandwidth_gbs": 10.0}
    record = {"bound": {"weight_bytes": 10_000_000}, "rows": [  # 1 ms at 10 GB/s
        {**row, "read_bandwidth_before_gbs": 10.0}, {**row, "read_bandwidth_before_gbs": 5.0},  # a phase flipped
        {**row, "read_bandwidth_before_gbs": 9.5}, row]}  # within 10%: their mean; no probe before: the one after
    ratios = bound_ratios(record)
    assert ratios == pytest.approx([2.0, 2.0 * 9.75 / 10, 2.0])
    assert steady_ratios(ratios, record["rows"]) == "2.00× [1.95, 2.00] (3 of 4 steady)"
    assert steady_ratios([], record["rows"]) == "none of 4 steady" and steady_ratios(None, []) == "–"
