"""One method registry: a method registered in one place is decoded by ``generate``, gets main-table and memory
cells, and shows up with its label and colour in the tables and plots, with no other file touched."""
from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import pytest
import torch
from matplotlib.colors import to_hex

from dynatree_lib import Method, generate, register
from dynatree_lib.core.policies import StaticPolicy
from dynatree_lib.harness import experiments
from dynatree_lib.harness.profiles import get_profile
from dynatree_lib.methods import REGISTRY, engine_ars, method_names, unregister
from dynatree_lib.reporting import plots, tables


@dataclass(frozen=True)
class ToyConfig:
    """A chain of two draft tokens: the smallest drafting policy."""

    method: ClassVar[str] = "toy"

    def policy(self, session: dict | None = None) -> StaticPolicy:
        return StaticPolicy(breadth=1, depth=2, tau=0.0, n_max=2)


@pytest.fixture
def toy():
    m = register(Method("toy", ToyConfig, "Toy chain", "#123456", "extension", False, lambda s, ds: ToyConfig()))
    yield m
    unregister("toy")


def test_a_registered_method_runs_everywhere(toy, target, draft):
    assert "toy" in method_names()
    ar = generate(target, torch.arange(1, 9), 12)
    res = generate(target, torch.arange(1, 9), 12, draft=draft, method=ToyConfig())
    assert res.tokens == ar.tokens and res.drafted_depth <= 2 * res.iterations
    assert generate(target, torch.arange(1, 9), 12, draft=draft, method="toy").tokens == ar.tokens
    prof = get_profile("smoke", candidates=None)
    main = [c for c in experiments.main_cells(prof) if c.method == "toy"]
    assert len(main) == (prof.protocol.replicates + 1) * len(prof.workloads) and main[0].label == "Toy chain"  # timed replicates and exact, each workload
    assert any(c.method == "toy" for c in experiments.memory_cells(prof))
    df = pd.DataFrame([{"dataset": "wikitext2", "method": m, "label": REGISTRY[m].label, "T": 8, "L_max": 8,
                        "dtype": "bfloat16", "tps": tps, "tps_std": 0.0, "speedup": tps / 10, "speedup_lo": float("nan"),
                        "speedup_hi": float("nan"), "equals_ar": 1, "n": 1, "replicate": 0}
                       for m, tps in (("ar", 10.0), ("toy", 15.0))])
    assert "Toy chain" in tables.table1(df).index
    fig = plots.main_speedup(df)  # an extension is in the main figure beside the paper's methods
    ax = fig.axes[0]
    assert any("Toy" in t.get_text() for t in ax.get_yticklabels())
    assert plots.color("toy") == "#123456" and "#123456" in {to_hex(line.get_color()) for line in ax.get_lines()}


def test_registering_twice_or_a_mismatched_name_is_refused(toy):
    with pytest.raises(ValueError, match="already registered"):
        register(toy)
    with pytest.raises(ValueError, match="ToyConfig.method must be 'other'"):
        register(Method("other", ToyConfig, "Other", "#000000", "extension", False, None))
    with pytest.raises(ValueError, match="role must be one of"):
        register(Method("third", None, "Third", "#000000", "sideline", False, None))


def test_another_engines_rows_are_also_shown_over_that_engines_own_ar():
    """``speedup_own`` divides by the method the registry declares as the engine's AR (HF's), or by the row
    tagged ``own_ar`` (llama.cpp's modes share one method), never by a row of our engine."""
    assert engine_ars() == ("hf_ar",)
    key = {"dataset": "wikitext2", "T": 8, "L_max": None, "dtype": "bfloat16", "temperature": 0.0, "replicate": 0}
    rows = [("ar", "ours", False, 100.0), ("hf_ar", "transformers", False, 20.0),
            ("hf_assisted", "transformers", False, 30.0), ("llamacpp", "llama.cpp", True, 50.0),
            ("llamacpp", "llama.cpp", False, 75.0)]
    df = pd.DataFrame([{**key, "method": m, "engine": e, "tag_own_ar": o, "tps_by_prompt": {"p0": t, "p1": t}}
                       for m, e, o, t in rows])
    out = tables.add_speedup(df)
    assert out.speedup.tolist() == pytest.approx([1.0, 0.2, 0.3, 0.5, 0.75])
    assert out.speedup_own.tolist()[2:] == pytest.approx([1.5, 1.0, 1.5])
    assert out.speedup_own.isna().tolist()[:1] == [True]
