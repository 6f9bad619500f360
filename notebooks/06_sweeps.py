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
# # 06 · Sweeps (Figures 7 and 8)
# A fixed-tree grid over depth D, branching B and pruning τ (the best configuration is marked), and
# DynaTree's sensitivity to its confidence thresholds, branch bounds and depth range around the tuned
# setting, with AR and the (tuned) fixed tree as reference lines.

# %% tags=["parameters"]
profile = "cpu"      # "cpu": SmolLM2 pair, offline | "paper": Pythia-2.8B/70M, GPU + hub | "paper-dryrun" | "smoke"
overrides = {}       # profile field overrides, e.g. {"T": 128, "n_prompts": 4}
rerun = False        # True: archive this notebook's JSON (kept as *.bak.json) and measure again
render_only = False  # True: only render tables and figures from the logged JSON (measure nothing)

# %%
from dynatree_lib.reporting.notebook import experiments, plots, show_fig, show_table, start, tables

prof = start(profile, overrides)

# %% tags=["nbval-ignore-output"]
path = experiments.run("fixed_sweep", prof, rerun=rerun, render_only=render_only)
df = tables.load(path, prof)

# %%
top = df[df.method != "ar"].nlargest(5, "tps")[["tag_D", "tag_B", "tag_tau", "tps", "tps_std", "speedup", "L_bar"]]
show_table(top.set_index(["tag_D", "tag_B", "tag_tau"]).map(lambda x: f"{x:.2f}"), "table_fixed_sweep_top5", prof)

# %% tags=["nbval-ignore-output"]
fig, best = plots.fixed_sweep(df)
show_fig(fig, "fig7_fixed_sweep", prof)

# %% tags=["nbval-ignore-output"]
path2 = experiments.run("dynatree_sweep", prof, rerun=rerun, render_only=render_only)
df2 = tables.load(path2, prof)

# %%
cols = ["label", "tps", "tps_std", "speedup", "L_bar", "draft_nodes_per_iter"]
show_table(df2[cols].set_index("label").map(lambda x: f"{x:.2f}"), "table_dynatree_sweep", prof)

# %% tags=["nbval-ignore-output"]
show_fig(plots.dynatree_sensitivity(df2), "fig8_dynatree_sensitivity", prof)

# %% [markdown]
# The paper's sweep found D=8, B=3, τ=0.1 best for Pythia-2.8B/70M at T=1500.
