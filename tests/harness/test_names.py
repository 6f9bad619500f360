"""One name for each thing: methods and workloads are named as literals only where they are declared, a record's key
holds its method and variant and never a label, no library module selects a row by its label, Cell and Method are
keyword-only, and the committed records are keyed as the current cells key them."""
import ast
import dataclasses
import json
from pathlib import Path

import pytest

from dynatree_lib import methods as registry
from dynatree_lib.harness.experiments import catalog as experiments
from dynatree_lib.harness.peers import llamacpp as peers
from dynatree_lib.harness.setup import variants
from dynatree_lib.harness.measure.cell import Cell
from dynatree_lib.harness.setup.paths import REPO
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.harness.setup.workloads import POOLED, WORKLOADS
from dynatree_lib.reporting import tables

LIB = REPO / "dynatree_lib"
MAX_MODULES = 4  # where a name is declared, configured (profiles), sourced (data, splits) and claimed (scorecard)
RENDERED = ("cpu", "smoke")  # profiles whose committed results render (paper-dryrun's costs.json predates them)


def literals(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def names() -> list[str]:
    peers.register()
    return [*registry.REGISTRY, *WORKLOADS, POOLED]


def spelled_in() -> dict[str, list[str]]:
    """{method or workload name: the library modules holding it as a string literal}."""
    found = {f.relative_to(LIB).as_posix(): literals(f) for f in sorted(LIB.rglob("*.py"))}
    return {n: [m for m, lits in found.items() if n in lits] for n in names()}


def test_each_method_and_workload_name_is_spelled_in_few_modules():
    over = {n: ms for n, ms in spelled_in().items() if len(ms) > MAX_MODULES}
    assert not over, over


ROW_CALLS = ("set_index", "groupby", "drop_duplicates", "pivot_table", "reindex", "isin")


def selects_by_label(tree: ast.AST) -> list[int]:
    """Lines that compare a label, or index, group or deduplicate rows by the ``label`` column."""
    def is_label(node) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "label"
                or isinstance(node, ast.Subscript) and isinstance(node.slice,
                                                                  ast.Constant) and node.slice.value == "label")

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(is_label(x) for x in [node.left, *node.comparators]):
            lines.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ROW_CALLS:
            args = [*node.args, *(k.value for k in node.keywords)]
            if any(isinstance(a, ast.Constant) and a.value == "label" for a in args):
                lines.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "isin" \
                and is_label(node.func.value):
            lines.append(node.lineno)
    return sorted(lines)


def test_no_library_module_selects_a_row_by_its_label():
    bad = {f.relative_to(LIB).as_posix(): lines for f in LIB.rglob("*.py")
           if (lines := selects_by_label(ast.parse(f.read_text())))}
    assert not bad, bad


def test_the_check_finds_label_selection():
    code = 'df[df.label == "DynaTree"]\nt = df.set_index("label")\nx = r["label"] != "AR"\ndf.label.isin(["AR"])'
    assert selects_by_label(ast.parse(code)) == [1, 2, 3, 4]


def test_the_record_key_holds_no_label(monkeypatch):
    """A key hashes the method and the variant: renaming what tables call a method or a variant changes no key."""
    prof = get_profile("smoke", candidates=None, cost_aware=False)
    cells = experiments.cells("main", prof)
    before = [experiments.cell_key("main", prof, c) for c in cells]
    assert all("label" not in experiments.key_parts(experiments.prompts("main", prof, c), prof, c) for c in cells)
    dyna = registry.REGISTRY[registry.DYNATREE]
    renamed = {**registry.REGISTRY, registry.DYNATREE: dataclasses.replace(
        dyna, display=dataclasses.replace(dyna.display, label="Renamed"))}
    monkeypatch.setattr(registry, "REGISTRY", renamed)
    monkeypatch.setitem(variants.VARIANTS, variants.PAPER_SETTINGS,
                        variants.Variant(name=variants.PAPER_SETTINGS, label=variants.fixed("other"), rank=0.5))
    assert [experiments.cell_key("main", prof, c) for c in cells] == before
    assert {c.label for c in cells if c.method == registry.DYNATREE} >= {"Renamed"}


def test_cell_and_method_are_keyword_only():
    with pytest.raises(TypeError):
        Cell("wikitext2", "ar", "main", None, T=8, L_max=8, dtype="bfloat16")
    with pytest.raises(TypeError):
        registry.Method("x", None, registry.Display(label="X", color="#000000"), registry.Study(role="paper"))
    assert Cell.__dataclass_params__.frozen and registry.Method.__dataclass_params__.frozen


def current_keys(profile: str) -> dict[str, set[str]]:
    """{experiment: its current cells' keys}, each keyed with the profile the experiment measures with (a feature
    head's for ``heads`` and ``talon``), as ``experiments.missing`` and ``records.records`` key them."""
    peers.register()
    out = {}
    for name, exp in experiments.EXPERIMENTS.items():
        if isinstance(exp, (experiments.Document, experiments.Sequence)):
            continue  # no cells: one document, or other experiments in turn
        prof = exp.profile(get_profile(profile))
        out[name] = {experiments.cell_key(name, prof, c) for c in exp.cells(prof)}
    return out


@pytest.mark.parametrize("profile", RENDERED)
def test_every_committed_record_is_keyed_as_a_current_cell(profile):
    """Nothing committed is orphaned: each experiment file's records carry the keys its current cells compute."""
    keys = current_keys(profile)
    for name in keys:
        path = REPO / "results" / profile / f"{name}.json"
        if path.exists():
            orphans = [r["label"] for r in json.loads(path.read_text())["records"] if r["key"] not in keys[name]]
            assert not orphans, (path.name, orphans)


def committed_json(folder: Path, pattern: str = "*.json") -> list[Path]:
    """The result files a clone holds: a --rerun's local archives (``*.bak.json``, git-ignored) are not among them."""
    return sorted(p for p in folder.glob(pattern) if not p.name.endswith(".bak.json"))


@pytest.mark.parametrize("path", committed_json(REPO / "results", "*/*.json"),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_record_shows_the_label_it_was_written_with(path):
    """The registry's label of each record (method, variant, configuration, tags) is the one it was measured
    under, archived runs included: tables read labels from the registry, never from the record."""
    data = json.loads(path.read_text())
    peers.register()
    for r in data.get("records", []):
        assert variants.label(r["method"], r["variant"], r["config"], r.get("tags", {})) == r["label"], r["key"]


@pytest.mark.parametrize("profile", RENDERED)
def test_committed_tables_render_from_the_committed_records(profile):
    """The main run's tables, rendered now from the committed (migrated) records, equal the committed renders."""
    prof = get_profile(profile)
    figures, results = REPO / "figures" / profile, REPO / "results" / profile
    df = tables.load(results / "main.json", prof)
    memory = tables.load(results / "memory.json", prof)
    for name, t in (("table1_throughput", tables.table1(df)), ("table2_latency", tables.table2(df)),
                    ("table1_exact", tables.table1_exact(df)), ("table_controls", tables.controls_table(df)),
                    ("table1_reported_vs_reproduced", tables.reported_vs_reproduced_main(df)),
                    ("table5_memory", tables.table5(memory))):
        if (figures / f"{name}.md").exists():
            assert tables.to_markdown(t) == (figures / f"{name}.md").read_text(), name
