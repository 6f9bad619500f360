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
# # 08 · Memory (Table 5)
# Memory per method, each cell in a fresh process of its own (never beside the timed ones), so the order of
# cells cannot matter. The process loads only the models the method uses (AR: no draft), warms up once, and
# measures one generation: its **footprint** is the peak above what the runtime holds without the models (CUDA's
# allocated bytes on a GPU; on CPU the RSS, after the allocator's free pages go back to the system). That is what
# the paper's Table 5 compares: weights, caches and the generation's own tensors. The column *generation's own*
# is the part the generation adds above the loaded models. The paper's pair (2.8B target, 70M draft) spends 2.5%
# of its weights on the draft; the cpu pair's draft is a sixth of its target, so its overhead is larger by design.

# %% tags=["parameters"]
profile = "cpu"      # "cpu": SmolLM2 pair, offline | "paper": Pythia-2.8B/70M, GPU + hub | "paper-dryrun" | "smoke"
overrides = {}       # profile field overrides, e.g. {"T": 128, "n_prompts": 4}
rerun = False        # True: archive this notebook's JSON (kept as *.bak.json) and measure again
render_only = False  # True: only render tables and figures from the logged JSON (measure nothing)

# %%
from dynatree_lib.reporting.notebook import experiments, show_table, start, tables

prof = start(profile, overrides)

# %% tags=["nbval-ignore-output"]
path = experiments.run("memory", prof, rerun=rerun, render_only=render_only)
df = tables.load(path, prof)

# %% tags=["nbval-ignore-output"]
show_table(tables.table5(df), "table5_memory", prof)

# %% [markdown]
# ## Reported (paper)
# Peak GPU memory with Pythia-2.8B/70M: speculative methods add about 3.3%.

# %%
import pandas as pd

pd.DataFrame(tables.reported()["table5_peak_memory_mb"]).T
