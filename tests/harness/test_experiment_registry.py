"""The experiment registry (``harness.experiments.catalog``): an experiment is declared once, in a module of its own,
registered by ``@experiment``, which refuses what would misbehave later; and nothing in the library compares an
experiment's name to decide what to do."""
import ast
from pathlib import Path

import pytest

from dynatree_lib.harness.experiments import catalog
from dynatree_lib.harness.experiments.catalog import Document, Experiment, Sequence, experiment
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.reporting.plan import NOTEBOOKS, plan

LIB = Path(__file__).resolve().parents[2] / "dynatree_lib"


@pytest.fixture
def scratch_registry():
    """The registry, restored after the test (a test's experiments never leak into the others)."""
    before = dict(catalog.EXPERIMENTS)
    yield catalog.EXPERIMENTS
    catalog.EXPERIMENTS.clear()
    catalog.EXPERIMENTS.update(before)


def test_a_new_experiment_is_one_class_and_one_registration(scratch_registry):
    @experiment
    class Toy(Experiment):
        name = "toy_experiment"
        notebook = "16_control"

        def cells(self, p, root=None):
            return catalog.cells("ablation", p, root)[:1]

        def prompts(self, p, cell):
            return 3

    prof = get_profile("smoke", candidates=None, cost_aware=False)
    assert catalog.get("toy_experiment") is scratch_registry["toy_experiment"] and "toy_experiment" in catalog.names()
    cell = catalog.cells("toy_experiment", prof)[0]
    assert catalog.prompts("toy_experiment", prof, cell) == 3
    assert catalog.cell_key("toy_experiment", prof, cell) != catalog.cell_key("ablation", prof, cell)  # counts differ
    control = next(r for r in plan(prof) if r["notebook"] == "16_control")
    scratch_registry.pop("toy_experiment")
    assert next(r for r in plan(prof) if r["notebook"] == "16_control")["generations"] == \
        control["generations"] - 3 - prof.protocol.warmup


def test_the_registration_refuses_what_would_misbehave_later(scratch_registry):
    with pytest.raises(ValueError, match="'main' is registered twice"):
        experiment(type("Again", (Experiment,), {"name": "main", "cells": lambda self, p, root=None: []}))
    with pytest.raises(TypeError, match="has no name"):
        experiment(type("Nameless", (Experiment,), {"cells": lambda self, p, root=None: []}))
    with pytest.raises(TypeError, match="'idle' .* measures nothing"):
        experiment(type("Idle", (Experiment,), {"name": "idle"}))
    with pytest.raises(TypeError, match="'doc' .* is a Document without `make`"):
        experiment(type("Doc", (Document,), {"name": "doc"}))
    with pytest.raises(TypeError, match="'seq' .* is a Sequence without `parts`"):
        experiment(type("Seq", (Sequence,), {"name": "seq"}))
    with pytest.raises(TypeError, match="`notebook` must be a name or None"):
        experiment(type("Nb", (Experiment,), {"name": "nb", "notebook": 16, "cells": lambda self, p, root=None: []}))
    with pytest.raises(TypeError, match="'own' counts its own prompts: its `settings` must be a PromptSettings"):
        experiment(type("Own", (catalog.CountsOwnPrompts,), {"name": "own", "cells": lambda self, p, root=None: []}))
    with pytest.raises(TypeError, match="registers Experiment subclasses"):
        experiment(lambda p, root=None: [])
    assert not {"idle", "doc", "seq", "nb", "own"} & set(scratch_registry)
    with pytest.raises(ValueError, match="unknown experiment 'nope'; choose one of .*control"):
        catalog.run("nope", get_profile("smoke"))


def test_every_experiment_names_a_notebook_plan_knows_and_a_tuning_that_exists():
    for name, exp in catalog.EXPERIMENTS.items():
        assert exp.notebook is None or exp.notebook in NOTEBOOKS, name
        assert exp.tuning is None or catalog.get(exp.tuning).picks_settings, name
    for name, exp in catalog.EXPERIMENTS.items():
        if isinstance(exp, Sequence):
            assert all(part in catalog.EXPERIMENTS for part in exp.parts), name
    on_disk = {p.stem for p in (LIB.parent / "notebooks").glob("[0-9][0-9]_*.py")}
    assert set(NOTEBOOKS) == on_disk


def names_compared(tree: ast.AST, names: set[str]) -> list[str]:
    """Comparisons of an experiment's name (a variable called ``name``/``experiment``) with a registered name."""
    def constants(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return set().union(*map(constants, node.elts)) if node.elts else set()
        return set()

    def is_name_var(node):
        return isinstance(node, ast.Name) and node.id in ("name", "experiment", "exp_name")

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(is_name_var, sides)) and any(constants(s) & names for s in sides):
                out.append(ast.unparse(node))
    return out


def test_no_module_compares_an_experiments_name():
    names = set(catalog.EXPERIMENTS)
    bad = {str(f.relative_to(LIB)): hits for f in LIB.rglob("*.py")
           if (hits := names_compared(ast.parse(f.read_text()), names))}
    assert not bad, bad
    assert names_compared(ast.parse("if name in ('tuning', 'talon'): pass"), names)  # the check catches one


def test_an_experiments_own_settings_come_from_the_profile_and_are_checked(scratch_registry):
    """An experiment declares its settings beside its cells; a profile (or ``--set toy.n=5``) sets them, and a typo
    in a field or an experiment's name, or a value of the wrong kind, is refused by name before anything loads."""
    import dataclasses
    from typing import ClassVar

    @dataclasses.dataclass(frozen=True)
    class ToySettings(catalog.Settings):
        n: int = 2
        part: ClassVar[str] = "toy_settings"
        positive: ClassVar[tuple] = ("n",)

    @experiment
    class Toy(Experiment):
        name, settings = "toy_settings", ToySettings

        def cells(self, p, root=None):
            return []

    toy = catalog.get("toy_settings")
    assert toy.settings_of(get_profile("smoke")).n == 2
    assert toy.settings_of(catalog.check_settings(get_profile("smoke", **{"toy_settings.n": 5}))).n == 5
    with pytest.raises(ValueError, match="unknown setting toy_settings.m; toy_settings's settings are n"):
        catalog.check_settings(get_profile("smoke", **{"toy_settings.m": 1}))
    with pytest.raises(ValueError, match="toy_settings.n must be an integer"):
        catalog.check_settings(get_profile("smoke", **{"toy_settings.n": "five"}))
    with pytest.raises(ValueError, match="unknown experiment 'toy_setings'"):
        catalog.check_settings(get_profile("smoke", **{"toy_setings.n": 1}))
    with pytest.raises(ValueError, match="experiment 'main' has no settings of its own"):
        catalog.check_settings(get_profile("smoke", **{"main.n": 1}))
    with pytest.raises(ValueError, match="toy_settings.n must be an integer >= 1, got 0"):
        catalog.check_settings(get_profile("smoke", **{"toy_settings.n": 0}))
    with pytest.raises(TypeError, match="`settings` must be a Settings dataclass whose `part` is 'toy_other'"):
        experiment(type("Other", (Experiment,), {"name": "toy_other", "settings": ToySettings,
                                                 "cells": lambda self, p, root=None: []}))
