"""One replicate of an experiment, in a process of its own (``catalog.in_fresh_process`` starts it):
``python -m dynatree_lib.harness.experiments.replicate <pickle of (name, profile, root, replicate)>``."""
import pickle
import sys
from pathlib import Path

if __name__ == "__main__":
    from dynatree_lib.harness.experiments.catalog import run

    name, profile, root, replicate = pickle.loads(Path(sys.argv[1]).read_bytes())
    run(name, profile, root=root, replicate=replicate)
