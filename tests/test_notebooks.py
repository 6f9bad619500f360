"""The nbval copies stay in sync with the notebook sources, and the README names only produced files."""
import re
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def code_cells(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])]


def produced_names() -> set[str]:
    names = set()
    for nb in SOURCES:
        for cell in code_cells(nb):
            if "show_table(" not in cell and "show_fig(" not in cell:
                continue
            for line in cell.splitlines():  # the name is the call's last argument, closing its line
                if m := re.search(r"[\"'](\w+)[\"']\)\s*$", line):
                    names.add(m.group(1))
    return names


def test_nine_notebooks():
    assert [p.name[:2] for p in SOURCES] == [f"{i:02d}" for i in range(9)]


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_smoke_regression_copy_matches_source(src):
    copy = REPO / "executed" / "smoke" / src.name
    assert copy.exists(), f"missing {copy}: run ./run_all.sh smoke"
    assert code_cells(copy) == code_cells(src), f"{copy} is stale: run ./run_all.sh smoke"


def test_readme_names_only_produced_files():
    readme = (REPO / "README.md").read_text()
    named = set(re.findall(r"figures/\w+/(\w+)\.(?:png|pdf|md|tex)", readme))
    assert named, "README names no figure or table"
    assert named <= produced_names(), f"README names files no notebook produces: {named - produced_names()}"
    for name in named:
        assert list((REPO / "figures" / "smoke").glob(f"{name}.*")), f"{name} not produced in figures/smoke"
