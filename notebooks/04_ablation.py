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
# # 04 · Ablation (Table 4, Figure 5)
# WikiText-2: a fixed tree (D = D0, B = B_mid, same τ and budget) → + Dynamic Tree Breadth & Depth →
# + History Adaptation. All three are one `DynaTreeConfig` (the tuned one) with components switched on one at
# a time.

# %% tags=["parameters"]
profile = "cpu"      # "cpu": SmolLM2 pair, offline | "paper": Pythia-2.8B/70M, GPU + hub | "paper-dryrun" | "smoke"
overrides = {}       # profile field overrides, e.g. {"T": 128, "n_prompts": 4}
rerun = False        # True: archive this notebook's JSON (kept as *.bak.json) and measure again
render_only = False  # True: only render tables and figures from the logged JSON (measure nothing)

# %%
from dynatree_lib.reporting.notebook import experiments, plots, show_fig, show_table, start, tables

prof = start(profile, overrides)

# %% tags=["nbval-ignore-output"]
path = experiments.run("ablation", prof, rerun=rerun, render_only=render_only)
df = tables.load(path, prof)

# %%
show_table(tables.table4(df), "table4_ablation", prof)

# %% tags=["nbval-ignore-output"]
show_fig(plots.ablation(df), "fig5_ablation", prof)

# %% [markdown]
# ## Reported (paper)

# %%
import pandas as pd

pd.DataFrame(tables.reported()["table4_ablation_wikitext2"]).T
