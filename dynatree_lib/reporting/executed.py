"""Executed notebooks without what changes on every run: ``run_all.sh`` strips papermill's and Jupyter's timestamps
and durations, stderr and widget state from each notebook it executes, so a render of unchanged JSON leaves
``executed/`` unchanged, and ``render_diff`` compares two executed notebooks the way the clean-render check
(``tools/clean_render.sh``) does. ``papermill`` is papermill's command line with its kernels' channels encrypted
(ipykernel warns on every start where they are not).

    python -m dynatree_lib.reporting.executed strip executed/cpu/*.ipynb
    python -m dynatree_lib.reporting.executed compare A.ipynb B.ipynb
    python -m dynatree_lib.reporting.executed papermill IN.ipynb OUT.ipynb [papermill's options]  # then strip OUT
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

RUN_TIMES = ("start_time", "end_time", "duration")  # papermill's, per notebook and per cell
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"  # an ipywidget's output (a progress bar): state, no result
INJECTED = "injected-parameters"  # papermill's tag for the cell it adds


def strip(nb: dict) -> dict:
    """``nb`` without execution timestamps and durations, without stderr (a library's warnings name the
    interpreter's site-packages, a progress bar its timing: neither is a result, and both differ by machine) and
    without widget state (a progress bar drawn as an ipywidget on a first run with an empty cache: ``without_widgets``).
    The other outputs and everything else are kept; an error is an output of its own, not stderr. Papermill's injected
    parameters cell, new at every run, gets a fixed id: an unchanged render changes no file."""
    nb["metadata"].pop("widgets", None)
    for meta in [nb["metadata"].get("papermill", {})] + [c["metadata"].get("papermill", {}) for c in nb["cells"]]:
        for key in RUN_TIMES:
            meta.pop(key, None)
    for cell in nb["cells"]:
        cell["metadata"].pop("execution", None)
        if INJECTED in cell["metadata"].get("tags", []):
            cell["id"] = INJECTED
        if "outputs" in cell:
            cell["outputs"] = without_widgets([o for o in cell["outputs"] if not is_stderr(o)])
    return nb


def without_widgets(outputs: list[dict]) -> list[dict]:
    """``outputs`` with no widget view (a progress bar drawn as an ipywidget, and the text it falls back to: the
    bar's first frame, which only a first run with an empty cache draws)."""
    return [o for o in outputs if WIDGET_VIEW not in o.get("data", {})]


def is_stderr(output: dict) -> bool:
    return output.get("output_type") == "stream" and output.get("name") == "stderr"


def strip_file(path: Path) -> None:
    """Strip an executed notebook in place, written as papermill writes it (nbformat)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbformat.write(nbformat.from_dict(strip(nb)), path)


def comparable(nb: dict) -> dict:
    """What two renders of the same JSON must share: ``strip``'s notebook without the ids jupytext gives new cells.
    Every output counts, the machine's description included: a notebook shows the machine its records were measured
    on (from the records), never the one that rendered it."""
    nb = strip(json.loads(json.dumps(nb)))
    for cell in nb["cells"]:
        cell.pop("id", None)
    return nb


def render_diff(a: Path, b: Path) -> list[str]:
    """The lines in which two executed notebooks' ``comparable`` forms differ (unified diff; empty: same render)."""
    import difflib

    text = lambda p: json.dumps(comparable(json.loads(Path(p).read_text())), indent=1, sort_keys=True).splitlines()
    return list(difflib.unified_diff(text(a), text(b), str(a), str(b), lineterm="", n=2))


def kernel_config() -> dict:
    """The kernel manager's traitlets config for papermill: CurveZMQ keys for the kernel's channels where
    jupyter_client can provision them (``transport_encryption``; the kernelspec must declare it supports them, as
    ipykernel's does). Empty where it cannot: then the kernel runs as before, with ipykernel's warning."""
    import zmq
    from jupyter_client.manager import KernelManager
    from traitlets.config import Config

    if "transport_encryption" not in KernelManager.class_trait_names() or not zmq.has("curve"):
        return Config()
    return Config({"KernelManager": {"transport_encryption": "auto"}})


def papermill(argv: list[str]) -> int:
    """``python -m papermill`` with ``argv``, its kernel started with ``kernel_config``: papermill's command line
    passes no kernel manager config, so an engine (papermill's own, given that config) is registered under its own
    name and chosen. Everything else, errors included, is papermill's; returns its exit status."""
    from papermill.cli import papermill as cli
    from papermill.engines import NBClientEngine, papermill_engines

    class EncryptedEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, **kwargs):
            return super().execute_managed_notebook(nb_man, kernel_name, config=kernel_config(), **kwargs)

    papermill_engines.register("dynatree", EncryptedEngine)
    try:
        cli.main([*argv, "--engine", "dynatree"], prog_name="papermill")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "strip":
        for p in argv[1:]:
            strip_file(Path(p))
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        diff = render_diff(Path(argv[1]), Path(argv[2]))
        print("\n".join(diff[:80]) if diff else f"{argv[2]}: same render")
        return 1 if diff else 0
    if argv[:1] == ["papermill"]:  # then the executed notebook stripped, in the same process
        status = papermill(argv[1:])
        if status == 0:
            strip_file(Path(argv[2]))
        return status
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
