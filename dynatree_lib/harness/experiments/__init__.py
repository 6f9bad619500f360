"""The experiments, each declared once in a module of its own and registered in ``catalog`` (the registry and the
runner): the paper's tables and sweeps, the tuning, forward costs, the pair report, the head's reports, TALON's and
vLLM's experiments, the budget frontier, the controller; and the queue that runs them one after another. Importing
this package registers every one of them. Imports every other room of the harness."""
from . import (ablation, ar_bound, authors_code, control, costs, dynatree_sweep, fixed_sweep, frontier,  # noqa: F401
               head_reports, heads, length_scaling, main, matmul_costs, memory, pair, peers, prompt_length, roofline,
               sampling, talon, trees, tuning, vllm, vllm_throughput)
