"""The harness, in rooms by role; each room imports only the rooms before it (``tests/test_structure.py``):

- ``setup``: profiles, workloads, splits, data and prompts, weights, model loading, tiny models, variants;
- ``measure``: a cell and its timed generations, the benchmark loop, memory, the result store, the environment
  and load records, the metrics;
- ``peers``: other engines on the same weights (llama.cpp, vLLM), as methods and their clients;
- ``authors``: the DynaTree authors' code, run on our pair;
- ``experiments``: the experiments, their tuning, costs and reports, and the queue that runs them.
"""
