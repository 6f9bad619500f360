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
# # 10 · Sampling (temperature > 0; TALON's Table 3 form)
# Every method sampling the target's softmax at a temperature, on the test prompts of every workload. Each
# method keeps the target's law exactly (`dynatree_lib/core/sampling.py`: each node gets as many children as its
# policy gives it from the draft's probabilities, drawn without replacement from the draft's law and verified by
# recursive rejection sampling, which for a chain is the speculative-sampling rule; levels copied from the context
# lookup, and the cost-aware extension, which cuts trees by their nodes' probabilities, keep chosen children,
# verified by drawing from the target at each node, SpecInfer's rule for deterministic candidates;
# `tests/core/test_sampling.py` checks every method's empirical law and that the tests catch a broken sampler).
# StreamingLLM + spec is not lossless by design once its window slides (here it never does: prompt + T fits).
# τ is the mean number of tokens per verification (accepted draft tokens plus the bonus token); the speedup is
# over AR sampling at the same temperature on the same prompts, each generation with its own seeded generator.
# Settings: the families tuned at the first temperature on the tuning prompts (an equal budget per family, as for
# greedy decoding; notebook 01's tuning table), DynaTree also with the paper's settings.

# %% tags=["parameters"]
profile = "cpu"      # "cpu": SmolLM2 pair, offline | "paper": Pythia-2.8B/70M, GPU + hub | "paper-dryrun" | "smoke"
overrides = {}       # profile field overrides, e.g. {"T": 128, "n_prompts": 4}
rerun = False        # True: archive this notebook's JSON (kept as *.bak.json) and measure again
render_only = False  # True: only render tables and figures from the logged JSON (measure nothing)

# %%
from dynatree_lib.reporting.notebook import experiments, plots, results_path, show_fig, show_table, start, tables

prof = start(profile, overrides)

# %% tags=["nbval-ignore-output"]
df = None
if experiments.measures("sampling", prof):
    path = experiments.run("sampling", prof, rerun=rerun, render_only=render_only)
    df = tables.load(path, prof)
else:
    print(f"profile {prof.name!r} samples nothing (temperatures={prof.protocol.temperatures}); "
          "add one with `--set \"temperatures=(1.0,)\"` or overrides={'temperatures': (1.0,)}")

# %%
if df is not None:
    show_table(tables.sampling_table(df), "table_sampling", prof)

# %% tags=["nbval-ignore-output"]
if df is not None:
    show_fig(plots.sampling(df), "fig_sampling", prof)

# %% [markdown]
# The same run with the previous draft (v3, kept as `sampling_v3.json` on the cpu profile): speedups over AR
# sampling, tokens per verification and drafting time per iteration, each paired with AR inside its own run.

# %%
earlier = results_path("sampling_v3", prof)
if df is not None and earlier.exists():
    show_table(tables.draft_change_table(df, tables.load(earlier), ("v3", "v4")), "table_sampling_draft_change", prof)

# %% [markdown]
# How much of AR's sampled output repeats earlier text (what the context lookup can copy; notebook 01 gives the
# greedy outputs' share):

# %%
if df is not None:
    show_table(tables.ar_loops(df), "table_sampling_loops", prof)

# %% [markdown]
# Spec-Bench by category at the first temperature:

# %%
if df is not None and "spec_bench" in prof.workloads:
    show_table(tables.spec_bench_table(df, prof.protocol.temperatures[0]), "table_sampling_spec_bench", prof)
