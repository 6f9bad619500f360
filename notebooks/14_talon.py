# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 14 · TALON's Tables 1 and 3 on our EAGLE-3 head
# Not in the DynaTree paper. TALON (*Confidence-Aware Speculative Decoding with Adaptive Token Trees*) compares tree
# policies that all draft with one EAGLE-3 head: EAGLE-3's own dynamic tree, OPT-Tree, SD (a chain) and TALON's
# budget-driven tree, on six benchmarks, greedy (its Table 1) and at T = 1 (its Table 3), reporting MAT (mean
# accepted tokens per verification, τ) and the wall-time speedup over autoregressive decoding. This notebook does the
# same on the `cpu` profile's committed head (`weights/smollm2-eagle3`), from committed JSON (`talon` experiment):
#
# - AR, SD, EAGLE-3's tree, OPT-Tree, TALON, DynaTree and our extension, the head drafting alone (no context
#   lookup), as in TALON;
# - TALON's Medusa and Hydra rows: heads of their own kind (`weights/smollm2-medusa`, `weights/smollm2-hydra`, trained
#   on the same teacher text as the EAGLE-3 head, `build-draft --head medusa|hydra`), each drafting EAGLE-2's
#   expand-and-rerank tree over its four levels (Medusa's budget: the 63 nodes its heads rank most probable; Medusa's
#   own trees are static lists calibrated for Vicuna's heads);
# - every drafting row tuned on the head (`talon_tuning` experiment): five candidates each, the published setting
#   first (EAGLE-3's and OPT-Tree's authors' defaults, TALON's N = 60, μ = 0.03, K = 10, Medusa's 63 nodes), measured
#   greedy on the tuning prompts of the same workloads, each to EOS or `talon.tuning_T` new tokens (cpu: 128,
#   half the test's cap, so that the 41 settings fit in an hour); the fastest runs at T = 0 and T = 1;
# - peers: llama.cpp's own EAGLE-3 speculative mode with the same head (converted by llama.cpp's converter) at its
#   defaults (a chain of 3), beside llama.cpp's own AR, greedy and at T = 1; and vLLM's EAGLE-3 mode with the same
#   head beside vLLM's AR, greedy on Spec-Bench (notebook 12's `vllm` run, on the same prompts);
# - TALON's workloads: Spec-Bench's questions (its MT-Bench, GSM8K, QA and CNN/DM are Spec-Bench categories),
#   HumanEval, and UltraChat's evaluation set for TALON's "Alpaca" (the work TALON cites for it; not the same
#   questions), each answered to EOS or TALON's 1,024 new tokens, capped by `talon.T_cap` (cpu: 256);
# - greedy and at exactly T = 1 (no top-k or top-p), each replicate in its own process, methods interleaved prompt
#   by prompt.
#
# MAT is our τ = L̄ (tokens per verification, the bonus token included: TALON's L / N_p); δ is TALON's draft
# efficiency, draft forwards per verification. A profile without a head (`extras.head`) measures and shows none of
# it.

# %% tags=["parameters"]
profile = "cpu"      # only "cpu" has a feature head
overrides = {}       # profile field overrides, e.g. {"talon.n_prompts": 2, "talon.T_cap": 128}
rerun = False        # True: archive this notebook's JSON (kept as *.bak.json) and measure again
render_only = False  # True: only render tables and figures from the logged JSON (measure nothing)

# %%
from dynatree_lib.reporting.notebook import (experiments, machines, on_machine, plots, results_path, show_fig,
                                             show_table, start, tables)

prof = start(profile, overrides)
print(f"head: {prof.extras.head}" if prof.extras.head else
      f"profile {prof.name!r} has no feature head: no TALON cells, so the tables below are empty")

# %% [markdown]
# ## Tuning on the head (tuning prompts, greedy)
# Every row's five candidates on the tuning prompts of each workload, the chosen (fastest) one marked: the budget
# each method runs with here, beside TALON's N = 60. Its label gives the setting, nodes/iter what it drafted.

# %% tags=["nbval-ignore-output"]
path_t = experiments.run("talon_tuning", prof, rerun=rerun, render_only=render_only)
if path_t.exists():
    show_table(tables.tuning_table(tables.load(path_t, prof)), "table_talon_tuning", prof)

# %% tags=["nbval-ignore-output"]
path = experiments.run("talon", prof, rerun=rerun, render_only=render_only)
df = tables.load(path, prof) if path.exists() else None
print("no TALON records logged" if df is None or df.empty else f"{len(df)} records from {path.name}")

# %% [markdown]
# ## TALON's Tables 1 (T = 0) and 3 (T = 1)
# First the setting each row runs with (its tuned budget, beside TALON's N = 60) and the nodes it verifies per
# iteration. Then per workload: MAT (τ) and δ in replicate 1, the speedup over AR at the same temperature on the same
# prompts with its 95% interval in each replicate, and greedy, the prompts whose output equals AR's.

# %% tags=["nbval-ignore-output"]
def speedups(t):
    return plots.speedup_panels(df[df.temperature == t], title=f"TALON's methods on the EAGLE-3 head, T = {t:g}: "
                                "speedup over AR on the same prompts")


if df is not None and not df.empty:
    show_table(tables.talon_budget_table(df), "table_talon_budget", prof)
    show_table(tables.talon_table(df[df.temperature == 0]), "table_talon_T0", prof)
    show_fig(speedups(0), "fig_talon_T0", prof)
    show_table(tables.talon_table(df[df.temperature == 1]), "table_talon_T1", prof)
    show_fig(speedups(1), "fig_talon_T1", prof)

# %% [markdown]
# ## Draft cost against accepted tokens (TALON's Figure 6)

# %% tags=["nbval-ignore-output"]
if df is not None and not df.empty:
    show_fig(plots.delta_tau(df[df.impl == "ours"]), "fig_talon_delta_tau", prof)

# %% [markdown]
# ## Peers: llama.cpp's and vLLM's EAGLE-3 modes with our head
# llama.cpp's `--spec-type draft-eagle3` drafting with the same head (its own conversion of it), over llama.cpp's own
# AR and over ours, beside our AR and SD (a chain on the same head). Each engine's speedup over its own AR says what its
# drafting buys; over our AR, which engine is faster. At T = 1 llama.cpp draws with its own generator, so its outputs
# are samples of the same law, not our tokens. vLLM's rows come from notebook 12's `vllm` run (greedy, Spec-Bench,
# the same prompts and token cap), each compared with our AR as measured interleaved in that run; they run a single
# request, where vLLM's scheduler costs most (its throughput at 4 and 16 requests: notebook 12).

# %% tags=["nbval-ignore-output"]
path_v = results_path("vllm", prof)
peers = tables.load(path_v, prof) if path_v.exists() else None
if df is not None and not df.empty:
    show_table(tables.talon_peer_table(df, peers), "table_talon_peer", prof)

# %% [markdown]
# ## TALON's advantage over EAGLE-3: reported and ours
# TALON's speedup over EAGLE-3's on each benchmark, as TALON reports it for its smallest model (Llama-3.1-8B-Instruct
# on an H200, `data/talon_reported.json`), beside TALON's throughput over EAGLE-3's tree on our prompts of that
# benchmark (a Spec-Bench category holds `talon.n_questions` prompts, so its ratio carries no interval there).

# %% tags=["nbval-ignore-output"]
if df is not None and not df.empty:
    show_table(tables.talon_reported_vs_reproduced(df), "table_talon_reported_vs_reproduced", prof)

# %% [markdown]
# ## On another machine kind
# The same tables from the records of each other machine kind committed beside the reference machine's
# (`results/cpu@<kind>/`, `harness.setup.machine`): there a verification of many tokens may cost far less of a one-token
# forward (`table_forward_costs@<kind>`, notebook 00), which moves the budgets tuning picks. Each file name carries
# its machine kind.

# %% tags=["nbval-ignore-output"]
for kind in machines(prof):
    on_kind = on_machine(prof, kind)
    for name, show in (("talon_tuning", lambda d: show_table(tables.tuning_table(d), "table_talon_tuning", on_kind)),
                       ("talon", lambda d: [show_table(tables.talon_budget_table(d), "table_talon_budget", on_kind),
                                            *(show_table(tables.talon_table(d[d.temperature == t]), f"table_talon_T{t}",
                                                         on_kind) for t in (0, 1)),
                                            show_table(tables.talon_reported_vs_reproduced(d),
                                                       "table_talon_reported_vs_reproduced", on_kind)])):
        if results_path(name, on_kind).exists():
            print(f"{kind}: {name}")
            show(tables.load(results_path(name, on_kind), on_kind))

# %% [markdown]
# What to look for, against TALON's claims: (1) every greedy row equals AR (all of these methods are exact);
# (2) whether TALON's MAT is at least EAGLE-3's at a lower δ (TALON: "closely approaches the zero-waste Oracle line",
# while a static tree pays δ = D + 1 whatever it gains) and whether it keeps that at T = 1; (3) whether TALON beats
# EAGLE-3's tree in wall time on every benchmark, in both replicates (TALON reports 1.03-1.21× on Llama-3.1-8B);
# (4) whether any of them beats AR at all here: on 2 CPU cores a draft forward costs far more of a target forward
# than on a GPU (c in TALON's R = τ / (1 + c·δ)), so δ weighs much more than in TALON's tables, and tuning picks
# far smaller budgets than TALON's N = 60; (5) whether DynaTree and
# our extension, whose trees stay small where the head is unsure, beat the policies designed for heads, and whether
# Medusa's and Hydra's heads of their own draft more per verification than the EAGLE-3 head does under the same tree
# budget; (6) what llama.cpp's own EAGLE-3 mode makes of the same head, over its own AR.
