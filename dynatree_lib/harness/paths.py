"""Where the repository keeps what the harness reads and writes."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
FIGURES = REPO / "figures"
DRAFT_DIR = REPO / "weights" / "smollm2-draft"
HEAD_DIR = REPO / "weights" / "smollm2-eagle3"  # the EAGLE-3 head on the cpu target (issue 56)
