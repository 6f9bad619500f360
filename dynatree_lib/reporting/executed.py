"""Executed notebooks without what changes on every run: ``run_all.sh`` strips papermill's and Jupyter's timestamps
and durations from each notebook it executes, so a render of unchanged JSON leaves ``executed/`` unchanged, and
``render_diff`` compares two executed notebooks the way the clean-render check (``tools/clean_render.sh``) does.

    python -m dynatree_lib.reporting.executed strip executed/cpu/*.ipynb
    python -m dynatree_lib.reporting.executed compare A.ipynb B.ipynb
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

RUN_TIMES = ("start_time", "end_time", "duration")  # papermill's, per notebook and per cell
MACHINE_TAG = "machine-output"  # a cell whose output describes the machine and checkout that ran it
INJECTED = "injected-parameters"  # papermill's tag for the cell it adds


def strip(nb: dict) -> dict:
    """``nb`` without execution timestamps and durations, and without stderr (a library's warnings name the
    interpreter's site-packages, a progress bar its timing: neither is a result, and both differ by machine). The
    other outputs and everything else are kept; an error is an output of its own, not stderr. Papermill's injected
    parameters cell, new at every run, gets a fixed id: an unchanged render changes no file."""
    for meta in [nb["metadata"].get("papermill", {})] + [c["metadata"].get("papermill", {}) for c in nb["cells"]]:
        for key in RUN_TIMES:
            meta.pop(key, None)
    for cell in nb["cells"]:
        cell["metadata"].pop("execution", None)
        if INJECTED in cell["metadata"].get("tags", []):
            cell["id"] = INJECTED
        if "outputs" in cell:
            cell["outputs"] = [o for o in cell["outputs"] if not is_stderr(o)]
    return nb


def is_stderr(output: dict) -> bool:
    return output.get("output_type") == "stream" and output.get("name") == "stderr"


def strip_file(path: Path) -> None:
    """Strip an executed notebook in place, written as papermill writes it (nbformat)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbformat.write(nbformat.from_dict(strip(nb)), path)


def comparable(nb: dict) -> dict:
    """What two renders of the same JSON must share: ``strip``'s notebook without the outputs of cells tagged
    ``MACHINE_TAG`` (the environment: this machine, commit and date) and without the ids jupytext gives new cells."""
    nb = strip(json.loads(json.dumps(nb)))
    for cell in nb["cells"]:
        cell.pop("id", None)
        if MACHINE_TAG in cell["metadata"].get("tags", []):
            cell["outputs"] = []
    return nb


def render_diff(a: Path, b: Path) -> list[str]:
    """The lines in which two executed notebooks' ``comparable`` forms differ (unified diff; empty: same render)."""
    import difflib

    text = lambda p: json.dumps(comparable(json.loads(Path(p).read_text())), indent=1, sort_keys=True).splitlines()
    return list(difflib.unified_diff(text(a), text(b), str(a), str(b), lineterm="", n=2))


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "strip":
        for p in argv[1:]:
            strip_file(Path(p))
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        diff = render_diff(Path(argv[1]), Path(argv[2]))
        print("\n".join(diff[:80]) if diff else f"{argv[2]}: same render")
        return 1 if diff else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
