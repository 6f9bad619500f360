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
# # 02 · Latency and where the time goes (Table 2)
# TTFT (prompt in → first new token known: prefill plus the first iteration) and TPOT ((wall − TTFT)/(T − 1)),
# from the Table 1 run; then each method's time per token split into drafting, verification and bookkeeping,
# and AR's time per token beside the bandwidth bound.

# %% tags=["parameters"]
profile = "cpu"      # "cpu": SmolLM2 pair, offline | "paper": Pythia-2.8B/70M, GPU + hub | "paper-dryrun" | "smoke"
overrides = {}       # profile field overrides, e.g. {"T": 128, "n_prompts": 4}
rerun = False        # unused: this notebook reads notebook 01's main run (01's rerun measures it again)
render_only = False  # True: only render tables and figures from the logged JSON (measure nothing)

# %%
from dynatree_lib.reporting.notebook import experiments, plots, show_fig, show_table, start, tables

prof = start(profile, overrides)

# %% tags=["nbval-ignore-output"]
path = experiments.run("main", prof, render_only=render_only)
df = tables.load(path, prof)

# %%
show_table(tables.table2(df), "table2_latency", prof)

# %% [markdown]
# ## Reported (paper)
# Milliseconds on an A100 with Pythia-2.8B; not comparable in absolute terms. In the paper speculative
# methods cut TPOT by 30-40% versus AR.

# %%
import pandas as pd

rep = tables.reported()["table2_latency_ms"]
pd.DataFrame({(ds, k): {m: f"{v[k][0]} ± {v[k][1]}" for m, v in rep[ds].items()}
              for ds in ("wikitext2", "pg19") for k in ("ttft", "tpot")})

# %% [markdown]
# ## Where the time goes
# Per generated token: prefill, drafting (draft forwards and tree growth), the target's verification forward,
# and bookkeeping (path selection, KV commit, per-iteration logging). The dashed line is AR's whole time per token.

# %% tags=["nbval-ignore-output"]
show_fig(plots.time_breakdown(tables.replicate(tables.role(df))), "fig_time_breakdown", prof)

# %% [markdown]
# ## AR against the bandwidth bound
# One-token decoding must read every weight once; the bound is weight bytes / read bandwidth. The bandwidth is
# probed right after every AR generation (a sum over 512 MiB of random values, best of 5) and averaged over
# the record's prompts: on the `cpu` profile's VMs it drifts with the host's load (it flips between two phases
# within seconds: about 31-37 and 48-66 GB/s on the VMs of earlier runs, about 50-55 and 78-88 GB/s on the
# latest), so a probe taken once when the models load says little about the minutes AR ran in. The last
# column pairs each generation with its own probe (median and range over the prompts): where the probes of one
# record fall in both phases, their mean describes no moment of the run. On the `cpu` profile the whole
# forward is one C++ call with the argmax inside it (engine `static+fused`, `docs/engine.md`). AR stays furthest
# from the bound in the fast phase, where attention, RoPE and the barriers between steps do not shrink with the
# memory's speed.

# %% tags=["nbval-ignore-output"]
show_table(tables.ar_vs_bound(df), "table_ar_vs_bound", prof)
