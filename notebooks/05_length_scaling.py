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
# # 05 · Sequence length scaling (Figure 6)
# Throughput, L̄, ℓ̄ and acceptance as functions of the number of generated tokens T on WikiText-2.

# %% tags=["parameters"]
profile = "cpu"      # "cpu": SmolLM2 pair, offline | "paper": Pythia-2.8B/70M, GPU + hub | "paper-dryrun" | "smoke"
overrides = {}       # profile field overrides, e.g. {"T": 128, "n_prompts": 4}
rerun = False        # True: archive this notebook's JSON (kept as *.bak.json) and measure again
render_only = False  # True: only render tables and figures from the logged JSON (measure nothing)

# %%
from dynatree_lib.reporting.notebook import experiments, plots, show_fig, show_table, start, tables

prof = start(profile, overrides)

# %% tags=["nbval-ignore-output"]
path = experiments.run("length_scaling", prof, rerun=rerun, render_only=render_only)
df = tables.load(path, prof)

# %%
t = df.pivot_table(index="T", columns="label", values="speedup")
show_table(t.map(lambda x: f"{x:.2f}×"), "table_length_scaling_speedup", prof)

# %% tags=["nbval-ignore-output"]
show_fig(plots.vs_param(df, "T", [("tps", "(a) throughput (tok/s)"), ("L_bar", "(b) L̄"),
                                  ("ell_bar", "(c) ℓ̄"), ("accept_rate", "(d) acceptance")]), "fig6_length_scaling", prof)
