"""One method registry: a method registered in one place is decoded by ``generate``, gets main, sampling and memory
cells, its records are keyed by method and variant, and it shows up with its label and colour in every table of
those runs and in the plots, with no other file touched."""
import json
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from matplotlib.colors import to_hex

from dynatree_lib import Display, Method, Study, generate, register
from dynatree_lib.core.policies.static import StaticPolicy
from dynatree_lib.harness.experiments import catalog as experiments
from dynatree_lib.harness.measure.metrics import aggregate
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.harness.measure.store import config_dict
from dynatree_lib.harness.setup.workloads import WORKLOADS
from dynatree_lib.methods import REGISTRY, impl_ars, method_names, unregister
from dynatree_lib.reporting import plots, tables

TOY = "Toy chain"


@dataclass(frozen=True)
class ToyConfig:
    """A chain of two draft tokens: the smallest drafting policy."""

    method: ClassVar[str] = "toy"

    def policy(self, session=None) -> StaticPolicy:
        return StaticPolicy(breadth=1, depth=2, tau=0.0, n_max=2)


@pytest.fixture
def toy():
    m = register(Method(name="toy", config=ToyConfig, display=Display(label=TOY, color="#123456"),
                        study=Study(role="extension", paper=lambda s, ds: ToyConfig())))
    yield m
    unregister("toy")


def row(cell, i: int, speed: float) -> dict:
    """A measured generation's row, made up: every metric the tables read, ``speed`` times AR's throughput."""
    tps = (100.0 + i) * speed
    r = {"prompt_id": f"{cell.dataset}:{i}", "tps": tps, "tokens": cell.T, "wall_s": cell.T / tps, "ttft_ms": 5.0,
         "tpot_ms": 1e3 / tps, "iterations": cell.T // 2, "L_bar": 2.0, "ell_bar": 1.0, "accept_rate": 0.5,
         "draft_nodes_per_iter": 2.0, "depth_per_iter": 2.0, "draft_forwards_per_iter": 2.0, "equals_ar": True,
         "ar_agreement": 1.0, "first_divergence": cell.T, "loop_share": 0.1, "periodic_tail": False,
         "footprint_mb": 100.0 * speed, "above_start_mb": 10.0, "peak_mem_mb": 200.0}
    if WORKLOADS[cell.dataset].per_category:
        r["category"] = "qa"
    return r


def logged(name: str, prof, root) -> tuple:
    """The experiment's JSON as the runner would write it (made-up rows, the real cells and keys), loaded."""
    recs = []
    for c in experiments.cells(name, prof, root):
        rows = [row(c, i, 1.5 if c.method == "toy" else 1.0) for i in range(2)]
        recs.append({"key": experiments.cell_key(name, prof, c), "dataset": c.dataset, "method": c.method,
                     "variant": c.variant, "label": c.label, "config": config_dict(c.config), "T": c.T,
                     "L_max": c.L_max, "dtype": c.dtype, "tags": c.tags, "temperature": c.sampling.temperature,
                     "lookup": c.lookup, "split": c.split, "rows": rows, "aggregate": aggregate(rows)})
    path = root / prof.name / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": 2, "records": recs}))
    return tables.load(path, prof)


def test_a_registered_method_runs_everywhere(toy, target, draft, tmp_path):
    assert "toy" in method_names()
    ar = generate(target, torch.arange(1, 9), 12)
    res = generate(target, torch.arange(1, 9), 12, draft=draft, method=ToyConfig())
    assert res.tokens == ar.tokens and res.drafted_depth <= 2 * res.iterations
    assert generate(target, torch.arange(1, 9), 12, draft=draft, method="toy").tokens == ar.tokens
    prof = get_profile("smoke", candidates=None, cost_aware=False)
    main = [c for c in experiments.cells("main", prof) if c.method == "toy"]
    assert len(main) == (prof.protocol.replicates + 1) * len(prof.workloads) and main[0].label == TOY  # timed + exact
    assert any(c.method == "toy" for c in experiments.cells("sampling", prof))
    assert any(c.method == "toy" for c in experiments.cells("memory", prof))
    df, sampled, memory = (logged(name, prof, tmp_path) for name in ("main", "sampling", "memory"))
    assert (df.method == "toy").any() and set(df[df.method == "toy"].label) == {TOY}
    for t in (tables.table1(df), tables.table1_exact(df), tables.table2(df), tables.table3(df),
              tables.spec_bench_table(df), tables.sampling_table(sampled), tables.table5(memory)):
        assert TOY in t.index, t
    assert TOY in set(tables.loop_table(df).index.get_level_values("Method"))
    assert tables.table1(df).loc[TOY, ("WikiText-2", "speedup r1 [95% CI]")].startswith("1.50×")
    fig = plots.main_speedup(tables.role(df))  # an extension is in the main figure beside the paper's methods
    ax = fig.axes[0]
    assert any("Toy" in t.get_text() for t in ax.get_yticklabels())
    assert plots.color("toy") == "#123456" and "#123456" in {to_hex(line.get_color()) for line in ax.get_lines()}
    fig = plots.sampling(sampled)
    assert any("Toy" in t.get_text() for t in fig.axes[0].get_xticklabels())


def test_registering_twice_or_a_mismatched_name_is_refused(toy):
    with pytest.raises(ValueError, match="already registered"):
        register(toy)
    with pytest.raises(ValueError, match="ToyConfig.method must be 'other'"):
        register(Method(name="other", config=ToyConfig, display=Display(label="Other", color="#000000"),
                        study=Study(role="extension")))
    with pytest.raises(ValueError, match="role must be one of"):
        register(Method(name="third", config=None, display=Display(label="Third", color="#000000"),
                        study=Study(role="sideline")))
    with pytest.raises(TypeError):
        Method("fourth", None, Display(label="Fourth", color="#000000"), Study(role="extension"))  # keyword-only


def test_another_implementations_rows_are_also_shown_over_its_own_ar():
    """``speedup_own`` divides by the method the registry declares as the implementation's AR (HF's), or by the row
    tagged ``own_ar`` (llama.cpp's modes share one method), never by a row of our engine."""
    import pandas as pd

    assert impl_ars() == ("hf_ar",)
    key = {"dataset": "wikitext2", "T": 8, "L_max": None, "dtype": "bfloat16", "temperature": 0.0, "replicate": 0}
    rows = [("ar", "ours", False, 100.0), ("hf_ar", "transformers", False, 20.0),
            ("hf_assisted", "transformers", False, 30.0), ("llamacpp", "llama.cpp", True, 50.0),
            ("llamacpp", "llama.cpp", False, 75.0)]
    df = pd.DataFrame([{**key, "method": m, "impl": e, "tag_own_ar": o, "tps_by_prompt": {"p0": t, "p1": t}}
                       for m, e, o, t in rows])
    out = tables.add_speedup(df)
    assert out.speedup.tolist() == pytest.approx([1.0, 0.2, 0.3, 0.5, 0.75])
    assert out.speedup_own.tolist()[2:] == pytest.approx([1.5, 1.0, 1.5])
    assert out.speedup_own.isna().tolist()[:1] == [True]


def test_what_tables_ask_of_a_method_is_declared():
    """Exactness, family, controls, tree drawing and adopted tuning are properties of the registered methods."""
    assert [n for n, m in REGISTRY.items() if not m.exact] == ["streaming_spec"]
    assert REGISTRY["dynatree_cost"].study.family == "dynatree"
    assert REGISTRY["streaming_spec"].study.tuning_from == "linear"
    assert all(REGISTRY[n].study.trees for n in ("fixed_tree", "dynatree", "talon"))


@pytest.mark.parametrize("module", ["dynatree_lib.core.loop", "dynatree_lib.methods", "dynatree_lib.cli",
                                    "dynatree_lib.harness.experiments.catalog", "dynatree_lib.harness.peers.llamacpp",
                                    "dynatree_lib.reporting.tables", "dynatree_lib.train.reports"])
def test_the_registries_are_the_same_whatever_is_imported(module):
    """The peers are registered by one explicit call when the package is imported, never as a side effect of
    importing their module, and importing the package registers every experiment: every entry point sees the same
    methods and the same experiments, in the same order."""
    import subprocess
    import sys

    code = (f"import {module}; from dynatree_lib import REGISTRY; "
            "from dynatree_lib.harness.experiments.catalog import EXPERIMENTS; "
            "print(','.join(REGISTRY)); print(','.join(EXPERIMENTS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0].split(",") == list(REGISTRY) and {"llamacpp", "vllm"} <= set(out[0].split(","))
    assert out[1].split(",") == list(experiments.EXPERIMENTS) and {"main", "control", "head_lookup"} <= set(
        out[1].split(","))
