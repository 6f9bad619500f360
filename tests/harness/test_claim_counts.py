"""Issue 88: sampling and the ablation measure replicates, each in a process of its own, and their tables and
figures show each replicate."""
import pytest

from dynatree_lib.harness.experiments import catalog as experiments
from dynatree_lib.harness.setup.profiles import get_profile


def test_replicate_zero_keeps_its_key_where_a_profile_measures_one():
    """Sampling and the ablation tag replicates past the first only, so a one-replicate profile's records stay
    keyed as they were."""
    p = get_profile("smoke", candidates=None)
    for name in ("sampling", "ablation"):
        assert all("replicate" not in c.tags for c in experiments.cells(name, p))
        two = get_profile("smoke", candidates=None, **{f"{name}.replicates": 2})
        reps = [c.tags.get("replicate", 0) for c in experiments.cells(name, two)]
        assert sorted(set(reps)) == [0, 1] and reps.count(0) == reps.count(1)


@pytest.fixture(scope="module")
def two_replicates(tmp_path_factory):
    """The ablation and sampling measured on the smoke profile in two replicates (each in this process)."""
    root = tmp_path_factory.mktemp("two_replicates")
    p = get_profile("smoke", T=8, candidates=None, **{"ablation.replicates": 2, "sampling.replicates": 2})
    for name in ("ablation", "sampling"):
        for r in (0, 1):
            experiments.run(name, p, root=root, replicate=r)
    return p, root


@pytest.mark.full
def test_the_ablation_and_sampling_tables_show_each_replicate(two_replicates):
    from dynatree_lib.reporting import plots, tables

    p, root = two_replicates
    ablation = tables.load(root / "smoke" / "ablation.json", p)
    t4 = tables.table4(ablation)
    assert [c for c in t4.columns if c.startswith("Speedup")] == ["Speedup r1 [95% CI]", "Speedup r2 [95% CI]"]
    assert len(t4) == 4 and t4.index.is_unique                  # one line per step, not per replicate
    sampling = tables.load(root / "smoke" / "sampling.json", p)
    st = tables.sampling_table(sampling)
    assert {c[2] for c in st.columns} == {"τ", "speedup r1", "speedup r2"} and st.index.is_unique
    for fig in (plots.ablation(ablation), plots.sampling(sampling)):
        assert fig.axes


@pytest.mark.full
def test_memory_measures_each_of_its_prompts_in_a_process_of_its_own(tmp_path):
    from dynatree_lib.harness.experiments.memory import Memory
    from dynatree_lib.harness.measure.memory import run_memory
    from dynatree_lib.harness.measure.store import ResultStore

    p = get_profile("smoke", T=8, candidates=None, **{"memory.n_prompts": 2})
    cell = next(c for c in Memory().cells(p) if c.method == "ar")
    key = experiments.cell_key("memory", p, cell)
    run_memory(p, [(cell, key)], tmp_path / "memory.json", {key: 2})
    rec = ResultStore(tmp_path / "memory.json").get(key)
    assert len(rec["rows"]) == 2 and len(set(rec["prompt_ids"])) == 2
    assert rec["prompt_ids"] == [r["prompt_id"] for r in rec["rows"]]
