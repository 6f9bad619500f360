"""Where the repository keeps what the harness reads and writes."""
import os
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
FIGURES = REPO / "figures"
DRAFT_DIR = REPO / "weights" / "smollm2-draft"
HEAD_DIR = REPO / "weights" / "smollm2-eagle3"  # the EAGLE-3 head on the cpu target (issue 56)


@contextmanager
def written_whole(path: Path):
    """A temporary path beside ``path`` to write to, renamed over ``path`` once the block ends without an error (a
    killed or failed writer leaves the old file, or none, never a partial one)."""
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
