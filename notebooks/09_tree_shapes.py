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
# # 09 · Tree shapes: what each method drafts
# DynaTree's idea is a tree whose shape follows the draft's confidence: wide where the draft hesitates, deep
# where it is sure (the paper's Figure 3: dynamic breadth, dynamic depth, pruning). Here are the trees the
# methods actually drafted, recorded for the first iterations of a few prompts (`record_trees`; recording
# changes no token, which the tests check), drawn and summarised.

# %% tags=["parameters"]
profile = "cpu"      # "cpu": SmolLM2 pair, offline | "paper": Pythia-2.8B/70M, GPU + hub | "paper-dryrun" | "smoke"
overrides = {}       # profile field overrides, e.g. {"T": 128, "n_prompts": 4}
rerun = False        # True: archive this notebook's JSON (kept as *.bak.json) and measure again
render_only = False  # True: only render tables and figures from the logged JSON (measure nothing)

# %%
from dynatree_lib.reporting.notebook import experiments, show_fig, show_table, start, tables

prof = start(profile, overrides)

# %% tags=["nbval-ignore-output"]
from dynatree_lib.methods import DYNATREE
from dynatree_lib.reporting import treeviz

from dynatree_lib.harness.setup.models import load_tokenizer

path = experiments.run("trees", prof, rerun=rerun, render_only=render_only)
trees = treeviz.tree_table(tables.records(path, prof))
tok = load_tokenizer(prof.models.target)  # the drawings show token text

# %% [markdown]
# ## One iteration, three methods
# The trees are recorded on dev prompts. The drawings show an iteration where DynaTree's tree branches and
# accepts the most tokens (the other methods at the same prompt and position, or the next iteration they reach):
# edge width is the draft's probability of the child, the accepted path is green, rejected branches are grey.

# %% tags=["nbval-ignore-output"]
methods = list(dict.fromkeys(trees.method))  # the tree methods, in the experiment's order (AR records no trees)
prompt_id, position = treeviz.informative(trees, DYNATREE)
show_fig(treeviz.side_by_side(trees, methods, prompt_id, position, tok), "fig_trees_side_by_side", prof)

# %% [markdown]
# ## Consecutive iterations of DynaTree on one prompt, from that iteration

# %% tags=["nbval-ignore-output"]
show_fig(treeviz.strip(trees, DYNATREE, prompt_id, position, 6, tok=tok), "fig_trees_strip", prof)

# %% [markdown]
# ## Shape statistics
# Per method and dataset: tree size, depth, root breadth and accepted length (means over the recorded trees).

# %%
show_table(treeviz.shape_summary(trees).map(lambda x: f"{x:.2f}"), "table_tree_shapes", prof)

# %% [markdown]
# Against the draft's confidence at the root: does a method deepen where the draft is sure, as the paper
# claims for DynaTree?

# %%
show_table(treeviz.by_confidence(trees).map(lambda x: f"{x:.2f}"), "table_tree_vs_confidence", prof)

# %% tags=["nbval-ignore-output"]
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, len(methods), figsize=(4.4 * len(methods), 3.2))
for ax, m in zip(axes, methods):
    treeviz.depth_heatmap(ax, trees, m)
fig.tight_layout()
show_fig(fig, "fig_tree_depth_heatmap", prof)

# %% tags=["nbval-ignore-output"]
show_fig(treeviz.scatter_accepted_vs_size(trees), "fig_tree_accepted_vs_size", prof)
