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
# # 07 · Prompt length (Figure 9)
# Throughput and speedup (vs AR at the same L_max) as the prompt cap L_max grows, WikiText-2.

# %% tags=["parameters"]
profile = "cpu"      # "cpu": SmolLM2 pair, offline | "paper": Pythia-2.8B/70M, GPU + hub | "paper-dryrun" | "smoke"
overrides = {}       # profile field overrides, e.g. {"T": 128, "n_prompts": 4}
rerun = False        # True: archive this notebook's JSON (kept as *.bak.json) and measure again
render_only = False  # True: only render tables and figures from the logged JSON (measure nothing)

# %%
from dynatree_lib.reporting.notebook import experiments, plots, show_fig, show_table, start, tables

prof = start(profile, overrides)

# %% tags=["nbval-ignore-output"]
path = experiments.run("prompt_length", prof, rerun=rerun, render_only=render_only)
df = tables.load(path, prof)

# %%
t = df.pivot_table(index="L_max", columns="label", values="speedup")
show_table(t.map(lambda x: f"{x:.2f}×"), "table_prompt_length_speedup", prof)

# %% tags=["nbval-ignore-output"]
show_fig(plots.vs_param(df, "L_max", [("tps", "(a) throughput (tok/s)"), ("speedup", "(b) speedup vs AR")]),
         "fig9_prompt_length", prof)
