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
# # 12 · Peers: llama.cpp on the same weights
# Not in the paper. A CPU user who wants SmolLM2-135M fast runs llama.cpp, so the `cpu` profile measures it beside
# our AR, DynaTree and the cost-aware extension: the same target (the shipped Q4_1 GGUF, and the same weights
# requantized to BF16), our draft converted to GGUF, on the main table's first prompts of every workload, greedy,
# interleaved with our methods prompt by prompt (`harness.peers`). Throughput is new tokens over prefill + decode
# for every engine; llama.cpp's times are its own server timings. Its BF16 arithmetic is not ours, so its tokens
# can leave our AR's path at near-ties: the last column counts the prompts where they do not.
#
# llama.cpp is optional: `bash tools/build_llamacpp.sh` builds it from the source vendored in the
# `llama-cpp-python` sdist and converts the weights. Without a build this notebook measures none of llama.cpp's
# cells (it says what is missing) and renders the committed records all the same.

# %% tags=["parameters"]
profile = "cpu"      # only "cpu" runs peers (llama.cpp GGUFs of its SmolLM2 pair)
overrides = {}       # profile field overrides, e.g. {"T": 128}
rerun = False        # True: archive this notebook's JSON (kept as *.bak.json) and measure again
render_only = False  # True: only render tables and figures from the logged JSON (measure nothing)

# %%
from dynatree_lib.reporting.notebook import experiments, plots, show_fig, show_table, start, tables

prof = start(profile, overrides)
if not prof.extras.peers_n_prompts:
    print(f"profile {prof.name!r} runs no peers")

# %% tags=["nbval-ignore-output"]
path = experiments.run("peers", prof, rerun=rerun, render_only=render_only)
df = tables.load(path, prof) if path.exists() else None
print("no peer records logged" if df is None or df.empty else f"{len(df)} records from {path.name}")

# %% tags=["nbval-ignore-output"]
if df is not None and not df.empty:
    show_table(tables.peers_table(df), "table_peers", prof)  # replicate 1
    show_table(tables.peers_table(df, 1), "table_peers_r2", prof)  # replicate 2, its own process
    show_table(tables.best_vs_peer(df), "table_peers_best", prof)  # every replicate, each in its own process
    show_fig(plots.speedup_panels(df, title="Peers: speedup over our AR on the same prompts (llama.cpp on the same "
                                  "weights)"), "fig_peers", prof)

# %% [markdown]
# What to look for: whether llama.cpp's own AR is ahead of ours at the same precision (the engine alone), whether
# its draft-model chain beats its own AR with our draft (the algorithm on its engine), and the second table: our
# fastest method against llama.cpp's fastest mode on the same prompts, with a paired interval, per replicate (a
# difference counts where both replicates agree).
