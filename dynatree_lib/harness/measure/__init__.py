"""How a cell is measured: the cell and its generations (``cell``), the benchmark loop that interleaves cells prompt
by prompt (``bench``), peak memory, the result store, the environment and the machine's load, per-prompt metrics.
Imports ``setup`` only."""
