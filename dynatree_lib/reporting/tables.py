"""Tables from logged JSON only: what the notebooks call, gathered from the modules that build them by source.

``records``: load records (labels from the registry), recompute speedups with paired bootstrap intervals, the
paper's numbers (``data/paper_reported.json``). ``main_tables``: the measured runs' tables (main, sampling, ablation,
tuning, peers, "reported vs reproduced"). ``pair_tables``: the model pair and its costs. ``talon_tables``:
notebook 14's (TALON's Tables 1 and 3 on a feature head, its reported numbers beside ours). ``serving``: vLLM
under load (notebook 12). ``formatting``: how
numbers print, Markdown + LaTeX files.
"""
from __future__ import annotations

from ..harness.measure.metrics import TIE_GAP
from .formatting import CATEGORY_LABELS, dash, pm, present, save, scope_label, to_markdown
from .main_tables import (ar_loops, best_pairs, best_vs_peer, controls_table, draft_change_table, exact_decoders,
                          exactness_failures, heads_table, hf_table, loop_table, paired_vs_best, peers_table, replicates_agree,
                          reported_vs_reproduced_main, reported_vs_reproduced_v1, sampling_table, spec_bench_table,
                          table1, table1_exact, table2, table3, table4, table5, tuning_table)
from .pair_tables import (agreement_table, ar_vs_bound, ceiling_table, cost_model_table, draft_versions_table,
                          forward_cost_table, head_cost_table, head_lookup_table, head_lookup_weights_table,
                          head_memory_table, head_vocab_table, matmul_table, one_token_table, overlap_table, pair_table,
                          verification_table)
from .records import (AR_KEY, BOOTSTRAP, add_speedup, bound_ms, bound_ratios, load, order, paired, paired_ratio,
                      ratio_ci, records, replicate, reported, role, row_id, say_other_drafts, shown)
from .intervals import run_noise_table
from .vllm_tables import vllm_idle_table, vllm_table, vllm_tuning_table
from .serving import (vllm_accepted_table, vllm_load_drop_table, vllm_plugin_table, vllm_schedule_table,
                      vllm_throughput_table, vllm_tpot_table)
from .talon_tables import (talon_budget_table, talon_peer_table, talon_reported, talon_reported_vs_reproduced,
                           talon_table)

__all__ = ["TIE_GAP", "CATEGORY_LABELS", "dash", "pm", "present", "save", "scope_label", "to_markdown", "ar_loops",
           "best_pairs", "best_vs_peer", "controls_table", "draft_change_table", "exact_decoders", "exactness_failures", "heads_table", "hf_table",
           "loop_table", "paired_vs_best", "peers_table", "replicates_agree", "reported_vs_reproduced_main",
           "reported_vs_reproduced_v1", "sampling_table", "spec_bench_table", "table1", "table1_exact", "table2",
           "table3", "table4", "table5", "tuning_table", "agreement_table", "ar_vs_bound", "ceiling_table",
           "cost_model_table", "draft_versions_table", "forward_cost_table", "head_cost_table", "head_lookup_table",
           "head_lookup_weights_table", "head_memory_table", "head_vocab_table", "matmul_table", "one_token_table",
           "overlap_table", "pair_table", "verification_table", "AR_KEY", "BOOTSTRAP", "add_speedup", "bound_ms", "bound_ratios", "load", "order", "paired",
           "paired_ratio", "ratio_ci", "records", "replicate", "reported", "role", "row_id", "say_other_drafts",
           "shown", "talon_budget_table", "talon_peer_table", "talon_reported", "talon_reported_vs_reproduced", "talon_table",
           "vllm_idle_table", "vllm_table", "vllm_throughput_table", "vllm_tuning_table", "run_noise_table",
           "vllm_accepted_table", "vllm_load_drop_table", "vllm_plugin_table", "vllm_schedule_table", "vllm_tpot_table"]
