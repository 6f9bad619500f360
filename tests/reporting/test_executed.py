"""Executed notebooks render the same on any machine and any day: ``strip`` leaves out widget state, no notebook
describes the machine that renders it (each shows the machine its records were measured on, read from them), and
the committed executed notebooks hold no other machine's description, commit or date, and no widget state."""
import json
import re

import pytest

from dynatree_lib.harness.setup.paths import REPO
from dynatree_lib.reporting.executed import WIDGET_VIEW, comparable, kernel_config, render_diff, strip

EXECUTED = sorted(REPO.glob("executed/*/*.ipynb"))
COMMIT = re.compile(r"""['"]git_commit['"]:\s*['"]([0-9a-f]+)['"]""")
DATE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")  # an ISO date and time, as environment() writes it


def progress_bar(text: str | None) -> dict:
    """A tqdm progress bar drawn as an ipywidget: its view, and its text form where ``text`` is given."""
    data = {WIDGET_VIEW: {"model_id": "1f2e", "version_major": 2, "version_minor": 0}}
    return {"output_type": "display_data", "metadata": {}, "data": {**data, **({"text/plain": text} if text else {})}}


def test_strip_leaves_out_widget_state():
    """A first run with an empty cache draws progress bars as widgets: their state (the notebook's
    ``metadata.widgets``) and views go, with the text a view falls back to; every other output is untouched."""
    table = {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": "| a |"}}
    cell = {"id": "c", "cell_type": "code", "metadata": {}, "source": "",
            "outputs": [progress_bar("Loading: 0%"), progress_bar(None), table]}
    nb = strip({"metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}}}},
                "cells": [cell]})
    assert "widgets" not in nb["metadata"]
    assert nb["cells"][0]["outputs"] == [table]


def test_compare_counts_every_output(tmp_path):
    """No cell's output is exempt from the clean-render comparison, whatever its tags."""
    cell = lambda out: {"id": "x", "cell_type": "code", "metadata": {"tags": ["machine-output"]}, "source": "env",
                        "outputs": [{"output_type": "stream", "name": "stdout", "text": out}]}
    a, b = tmp_path / "a.ipynb", tmp_path / "b.ipynb"
    a.write_text(json.dumps({"metadata": {}, "cells": [cell("host a\n")]}))
    b.write_text(json.dumps({"metadata": {}, "cells": [cell("host b\n")]}))
    assert comparable(json.loads(a.read_text()))["cells"][0]["outputs"]
    assert render_diff(a, b) and not render_diff(a, a)


@pytest.mark.parametrize("src", sorted(REPO.glob("notebooks/[0-9][0-9]_*.py")), ids=lambda p: p.name)
def test_no_notebook_describes_the_machine_that_runs_it(src):
    """The machine that made a record is in the record (``environment``, attached when it is measured); a notebook
    shows it from there, so a render shows the same wherever it runs."""
    code = [line for line in src.read_text().splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if re.search(r"\benvironment\(", line)], \
        f"{src.name} calls environment() in a cell: show the records' environment instead"


def recorded(profile: str, pattern: re.Pattern) -> set[str]:
    """What ``pattern`` finds in the profile's committed records (its other machine kinds' included)."""
    files = [*REPO.glob(f"results/{profile}/*.json"), *REPO.glob(f"results/{profile}@*/*.json")]
    return {m for f in files for m in pattern.findall(f.read_text())}


def shown(nb: dict) -> str:
    """Every output's text: streams, and each display's text forms."""
    texts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            texts.append("".join(out.get("text", "")))
            texts += ["".join(v) for k, v in out.get("data", {}).items() if k.startswith("text/")]
    return "\n".join(texts)


@pytest.mark.parametrize("nb_path", EXECUTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_executed_notebooks_show_no_machine_but_their_records(nb_path):
    """A committed executed notebook names only the commits and dates its profile's records hold (the machine
    those were measured on), never the rendering machine's, and holds no widget state."""
    nb = json.loads(nb_path.read_text())
    profile, text = nb_path.parent.name, shown(nb)
    assert set(COMMIT.findall(text)) <= recorded(profile, re.compile(r'"git_commit":\s*"([0-9a-f]+)"'))
    assert set(DATE.findall(text)) <= recorded(profile, DATE)
    assert "widgets" not in nb["metadata"] and WIDGET_VIEW not in nb_path.read_text()
    assert not [c for c in nb["cells"] if "machine-output" in c["metadata"].get("tags", [])]


def test_a_render_keeps_errors_but_not_the_kernels_transport_warning(tmp_path):
    """run_all.sh's papermill call encrypts the kernel's channels (``kernel_config``), so ipykernel has nothing to
    warn about on each start; a cell that raises still fails the run, with its error on stderr."""
    import os
    import subprocess
    import sys

    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('ran')"),
                                         nbformat.v4.new_code_cell("raise ValueError('a real error')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "in.ipynb")
    run = subprocess.run([sys.executable, "-m", "dynatree_lib.reporting.executed", "papermill", "in.ipynb", "out.ipynb",
                          "--stdout-file", os.devnull], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 1 and "ValueError: a real error" in run.stderr
    if kernel_config():  # jupyter_client can provision keys and pyzmq has CurveZMQ (libsodium)
        assert "without encryption" not in run.stderr
