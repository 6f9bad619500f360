"""The test tiers (``tests/tiers.py``): ``--full`` runs the tests marked ``full`` and the statistical tests at their
full draws; without it those are deselected. ``./test.sh`` runs the tests in parallel workers (pytest-xdist, one
torch thread each; the kernels' tests take two, ``tests/conftest.py``'s ``isa``).

nbval compares what a notebook shows, not what its interpreter warned: stderr (a library's warning with the
site-packages path of whatever Python ran it, a progress bar) carries no result, so committed executed notebooks
hold none (``reporting.executed.strip``) and a re-execution's stderr is left out of the comparison. Errors are not
stderr: a cell that raises still fails."""
import os

import pytest

from dynatree_lib.reporting.executed import is_stderr


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", help="the full tier: the tests marked full, and the statistical "
                     "tests at their full draws (what CI runs)")


def pytest_configure(config):
    from dynatree_lib.harness.measure.load import IDLE_CHECKED
    from tests import tiers

    tiers.FULL = bool(config.getoption("--full"))
    # tests time nothing a table claims: a cpu-profile experiment they run takes neither the busy-machine check nor
    # the timed-run lock (tests/harness/test_load.py tests both on their own)
    os.environ[IDLE_CHECKED] = "1"
    if os.environ.get("PYTEST_XDIST_WORKER"):  # test workers side by side (./test.sh): one torch thread each, so
        import torch                           # that they share the cores instead of spinning against each other

        torch.set_num_threads(1)


def without_stderr(outputs):
    return [o for o in outputs if not is_stderr(o)]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    if not config.getoption("--full"):
        kept = [i for i in items if i.get_closest_marker("full") is None]
        if len(kept) < len(items):
            config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("full") is not None])
            items[:] = kept
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:
        return
    if getattr(IPyNbCell.compare_outputs, "drops_stderr", False):
        return
    compare = IPyNbCell.compare_outputs

    def compare_outputs(self, test, ref, skip_compare=None):
        return compare(self, without_stderr(test), without_stderr(ref), skip_compare)

    compare_outputs.drops_stderr = True
    IPyNbCell.compare_outputs = compare_outputs
