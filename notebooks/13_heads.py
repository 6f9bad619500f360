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
# # 13 · Drafting on the target's own features: the EAGLE-3 head
# Not in the DynaTree paper. TALON builds its trees on EAGLE-3 heads: one decoder layer fed with the target's own
# hidden states (a low, a middle and a high layer, fused), under a reduced-vocabulary output. The `cpu` profile ships
# one for SmolLM2 (`weights/smollm2-eagle3`, trained here: `python -m dynatree_lib build-draft --head eagle3`; its
# card says how far). This notebook shows, from committed JSON:
#
# 1. the head's first drafted token beside v4's on the dev prompts (the pair reports of notebook 00's kind);
# 2. what one head step costs against the target's one-token forward (the `head_cost` experiment), which reduced
#    vocabulary pays (the `head_vocab` experiment), DynaTree's memory with the head against AR's and v4's
#    (the `memory_head` experiment, notebook 08's measure), and whether the head needs a context lookup fitted to its
#    own probabilities rather than v4's (the `head_lookup` experiment, cross-fitted on held-out teacher text);
# 3. every exact method of our loop drafting with the head, greedy and at T = 1, on the first test prompts of
#    each workload, each replicate in its own process, methods interleaved prompt by prompt (`heads` experiment):
#    τ is tokens per verification, δ draft forwards per verification (TALON's draft efficiency), speedups over AR
#    on the same prompts. Settings are the profile's tuned ones (tuned with v4; the head is not tuned separately).
#
# A profile without a head (`extras.head`) measures and shows none of it.

# %% tags=["parameters"]
profile = "cpu"      # only "cpu" has a feature head
overrides = {}       # profile field overrides, e.g. {"heads.n_prompts": 2}
rerun = False        # True: archive this notebook's JSON (kept as *.bak.json) and measure again
render_only = False  # True: only render tables and figures from the logged JSON (measure nothing)

# %%
import json

from dynatree_lib.reporting.notebook import (experiments, machines, on_machine, plots, results_path, show_fig,
                                             show_table, start, tables)

prof = start(profile, overrides)
print(f"head: {prof.extras.head}" if prof.extras.head else f"profile {prof.name!r} has no feature head")

# %% [markdown]
# ## The head's first drafted token, beside v4

# %%
if prof.extras.head:
    pair = json.loads(experiments.run("pair", prof, render_only=render_only).read_text())
    head_pair = json.loads(experiments.run("pair_eagle3", prof, rerun=rerun, render_only=render_only).read_text())
    show_table(tables.draft_versions_table(head_pair, {"v4": pair}, "head", overlap=True), "table_head_pair", prof)

# %% [markdown]
# ## What a head step costs, which vocabulary pays, what the head adds to memory, and its lookup

# %%
def logged(name):
    """An experiment's JSON of this profile, measured where missing (or ``rerun``): None without a head."""
    return json.loads(experiments.run(name, prof, rerun=rerun, render_only=render_only).read_text()) \
        if prof.extras.head else None


if (cost := logged("head_cost")) is not None:
    show_table(tables.head_cost_table(cost), "table_head_cost", prof)
if (vocab := logged("head_vocab")) is not None:
    show_table(tables.head_vocab_table(vocab), "table_head_vocab", prof)
if (memory := logged("memory_head")) is not None:
    show_table(tables.head_memory_table(memory), "table_head_memory", prof)
if (lookup := logged("head_lookup")) is not None:
    show_table(tables.head_lookup_table(lookup), "table_head_lookup", prof)
    show_table(tables.head_lookup_weights_table(lookup), "table_head_lookup_weights", prof)

# %% [markdown]
# ## Every method on the head

# %% tags=["nbval-ignore-output"]
path = experiments.run("heads", prof, rerun=rerun, render_only=render_only)
df = tables.load(path, prof) if path.exists() else None
print("no head records logged" if df is None or df.empty else f"{len(df)} records from {path.name}")

# %% tags=["nbval-ignore-output"]
if df is not None and not df.empty:
    show_table(tables.heads_table(df), "table_heads", prof)
    for t in sorted(set(df.temperature)):
        show_fig(plots.speedup_panels(df[df.temperature == t], title=f"Drafting with the EAGLE-3 head, T = {t:g}: "
                                      "speedup over AR on the same prompts"), f"fig_heads_T{t:g}", prof)

# %% [markdown]
# ## On another machine kind
# The head's step and every method on the head, from the records of each other machine kind committed beside the
# reference machine's (`results/cpu@<kind>/`); each file name carries its machine kind.

# %% tags=["nbval-ignore-output"]
for kind in machines(prof):
    on_kind = on_machine(prof, kind)
    if prof.extras.head and results_path("head_cost", on_kind).exists():
        show_table(tables.head_cost_table(json.loads(results_path("head_cost", on_kind).read_text())),
                   "table_head_cost", on_kind)
    if prof.extras.head and results_path("heads", on_kind).exists():
        show_table(tables.heads_table(tables.load(results_path("heads", on_kind), on_kind)), "table_heads", on_kind)

# %% [markdown]
# What to look for: whether the head's agreement beats v4's (the first table; the card holds the issue's targets),
# whether its step is cheaper than v4's (a head reads under a tenth of the target's weights, so the floor is low;
# an eager step is far above it), and in the last table whether any method on the head is faster than AR, greedy
# and at T = 1, in both replicates. δ against τ is TALON's Figure 6 reading: a method that drafts many forwards
# per verification for few accepted tokens wastes draft work.
