"""The experiments: their cells (``catalog``), tuning, forward costs, the pair report, the head's reports, TALON's
and vLLM's experiments, the budget frontier, and the queue that runs them one after another. Imports every other
room."""
