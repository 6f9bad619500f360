"""The AR-bound experiment (``harness.experiments.ar_bound``): AR alone on each main workload, per replicate, in
processes of its own, on CPU profiles only; each generation carries the probe its bound is read from."""
import pytest

from dynatree_lib import methods as registry
from dynatree_lib.harness.experiments import catalog
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.reporting import tables


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
    assert all(v.endswith("]") for v in t["each generation / its probe"])  # median [min, max] of the probes
