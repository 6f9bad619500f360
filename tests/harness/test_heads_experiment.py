"""Notebook 13's ``heads`` experiment: AR and every exact method of our loop drafting with a profile's feature head,
greedy (with the network-alone controls) and at T = 1, each replicate keyed apart; its records name the head as
their draft, its table reads them, and a profile without a head has no cells."""
import json

import pytest

from dynatree_lib import methods as registry
from dynatree_lib.harness.experiments import catalog as experiments
from dynatree_lib.harness.experiments import heads as heads_exp
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.reporting import tables

from ..conftest import tiny_head_folder


def test_a_profile_without_a_head_has_no_head_cells():
    assert experiments.cells("heads", get_profile("smoke")) == []
    assert get_profile("cpu").extras.head and experiments.cells("heads", get_profile("cpu"))


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("heads")
    folder = tiny_head_folder(tmp / "head")
    prof = get_profile("smoke", target="tiny-llama:target", dtype="float32", draft_vocab=None, draft_lookup=True, T=8,
                       workloads=("wikitext2",), head=f"eagle3:{folder}", replicates=1,
                       **{"tuning.candidates": None, "heads.n_prompts": 2})  # the paper's settings: no tuning run
    path = experiments.run("heads", prof, root=tmp, replicate=0)
    return prof, path


def test_the_heads_records_draft_with_the_head_greedy_and_sampled(measured):
    prof, path = measured
    recs = json.loads(path.read_text())["records"]
    assert {r["draft"] for r in recs} == {prof.extras.head}
    assert {r["temperature"] for r in recs} == {0.0, 1.0}
    assert {r["method"] for r in recs} == {registry.AR, *heads_exp.head_methods()}
    assert all(len(r["prompt_ids"]) == 2 for r in recs)
    greedy = [r for r in recs if r["temperature"] == 0.0 and r["method"] != registry.AR]
    assert all(r["aggregate"]["equals_ar"] == 2 for r in greedy)  # fp32: exact
    assert any(not r["lookup"] for r in greedy)  # the network-alone controls


def test_the_heads_table_reads_every_record(measured):
    prof, path = measured
    df = tables.load(path, prof)
    t = tables.heads_table(df)
    assert len(t) == len(df[df.temperature == 0.0])  # every greedy row, sampled rows beside them
    assert ("T = 1", "WikiText-2", "speedup r1") in t.columns and ("T = 0", "WikiText-2", "= AR") in t.columns
