"""nbval compares what a notebook shows, not what its interpreter warned: stderr (a library's warning with the
site-packages path of whatever Python ran it, a progress bar) carries no result, so committed executed notebooks
hold none (``reporting.executed.strip``) and a re-execution's stderr is left out of the comparison. Errors are not
stderr: a cell that raises still fails."""
import pytest

from dynatree_lib.reporting.executed import is_stderr


def without_stderr(outputs):
    return [o for o in outputs if not is_stderr(o)]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
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
