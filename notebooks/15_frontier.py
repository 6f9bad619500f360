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
# # 15 · The budget frontier: each method's own numbers apart from the machine's
# Not in the papers' form. Every speedup in notebooks 13 and 14 is a ratio measured on one kind of 2-core VM; what a
# drafting method itself decides is how many tokens each verification commits (τ), for how many verified nodes and
# draft forwards (δ). TALON reports MAT beside wall time (its Table 1) and plots τ against δ (its Figure 6); DynaTree
# reports L̄ beside throughput. This notebook, from committed JSON:
#
# 1. **the frontier** (`frontier` experiment): every method of our loop with a budget knob (`Study.budget`: SD's K, the
#    fixed tree's n_max with its pruning off, DynaTree's n_max, EAGLE-3's total_tokens, OPT-Tree's n, TALON's N)
#    drafting with the EAGLE-3 head alone at 4, 8, 16, 32 and 60 verified draft nodes, each knob turned from its
#    published setting, on Spec-Bench, HumanEval and WikiText-2 test prompts (12 each), greedy and at T = 1, 64 new
#    tokens at most; τ with its 95% interval over prompts, δ and the nodes verified; beside them EAGLE-3's tree over
#    Medusa's and Hydra's heads, and DynaTree on the v4 draft model (dashed: the paper's setting, a draft model);
#    where two machine kinds measured it, whether their counts agree;
# 2. **a cost model that is checked**: notebook 03's model, the draft's forwards priced as the head's measured step,
#    predicting every row of the heads' and TALON's tables (notebooks 13, 14) on the machine that measured them;
# 3. **projections**: each method's best budget priced on every machine whose curves are committed;
# 4. **two verdicts per tree claim**: one in the method's own numbers, one in wall time per machine kind.
#
# The rule, stated once: a count (τ at equal verified nodes, δ / τ) belongs to the method and holds on every machine
# whose engine computes the same bits (greedy, the outputs are AR's; a near-tie can fall the other way on another
# kernel path, so each record names its engine and machine); a wall-time ratio belongs to its machine. The frontier
# logs wall time but compares none: it ran on one VM, and the cost model prices its counts instead. The extension is
# not on the frontier: its cut prices each tree on the machine's curves, so its counts are the machine's.

# %% tags=["parameters"]
profile = "cpu"      # only "cpu" has a feature head
overrides = {}       # profile field overrides, e.g. {"frontier.n_prompts": 4}
rerun = False        # True: archive this notebook's JSON (kept as *.bak.json) and measure again
render_only = False  # True: only render tables and figures from the logged JSON (measure nothing)

# %%
from dynatree_lib.reporting import frontier_tables as ft
from dynatree_lib.reporting.notebook import (experiments, machines, on_machine, plots, results_path, show_fig,
                                             show_table, start, tables)

prof = start(profile, overrides)
on_kinds = [prof] + [on_machine(prof, k) for k in machines(prof)]  # the reference machine's records, then each kind's
print(f"head: {prof.extras.head}" if prof.extras.head else
      f"profile {prof.name!r} has no feature head: no frontier, so the tables below are empty")

# %% [markdown]
# ## The frontier
# Shown where its records are committed: `python -m dynatree_lib bench --experiment frontier [--set machine=KIND]`
# measures it (over two thousand generations), and this notebook measures it only with `rerun`. Each cell: τ [its
# 95% bootstrap interval over prompts] · draft nodes verified per iteration · δ. Greedy, every output must equal
# AR's.

# %% tags=["nbval-ignore-output"]
if rerun and not render_only and experiments.measures("frontier", prof):
    experiments.run("frontier", prof, rerun=True)
frontiers = {}  # {machine kind: (its profile, the frontier's records, their points)}
for on_kind in on_kinds:
    if (path := results_path("frontier", on_kind)).exists():
        if not (records := tables.load(path, on_kind)).empty:
            frontiers[ft.recorded_kind(path)] = on_kind, records, ft.frontier_points(records)
print("frontier records: " + (", ".join(f"{k} ({len(v[2])} points)" for k, v in frontiers.items()) or "none committed"))

# %% tags=["nbval-ignore-output"]
for kind, (on_kind, _, points) in frontiers.items():
    greedy = points[points.temperature == 0]
    print(f"{kind}: greedy outputs equal to AR's: {int(greedy.equals_ar.sum())} of {int(greedy.n.sum())}")
    show_table(ft.frontier_table(points), "table_frontier", on_kind)
    show_fig(plots.frontier(points, ft.frontier_reported()), "fig_frontier", on_kind)

# %% [markdown]
# ## The same counts on two machine kinds
# Where two kinds' frontiers are committed, point by point (method and budget). Greedy, each kind emits its own AR's
# tokens, but two kinds' bf16 kernels need not compute the same bits: where a near-tie falls the other way, their
# AR's, and so the text every method drafts on, part. So the test, greedy as at T = 1, is whether one kind's τ falls
# inside the other's 95% interval; the first column says on how many prompts the two AR agree.

# %% tags=["nbval-ignore-output"]
if len(frontiers) > 1:
    show_table(ft.across_kinds({k: v[1:] for k, v in frontiers.items()}), "table_frontier_kinds", prof)
else:
    print("one machine kind's frontier is committed: nothing to compare")

# %% [markdown]
# ## The cost model, checked on each machine
# Per iteration: the target's forward over nodes + 1 tokens, one cold head step for the tokens committed last time,
# a head step per further level (the draft model's width curve scaled to the head's measured step, `head_cost`), the
# drafter's work per level and the commit, as notebook 03 times them; per token, that over τ (prefill excluded).
# Predicted against measured tokens per second for every row of the heads' and TALON's tables of that machine drafted
# with the EAGLE-3 head (Medusa's and Hydra's rows are left out: no step of theirs is measured), on that machine's
# curves. An error is measured time over predicted, less 1 (positive: slower than priced). "AR-scaled" multiplies
# each prediction by AR's measured / predicted on the same workload, temperature and replicate, removing the drift
# between the curves' timing and the run's that every row shares. "AR-scaled, fitted terms" adds, where the machine's
# frontier is committed, what the curves leave out of an iteration (a + b·nodes + c·δ per temperature: the sampled
# verification and drafting, whose loop terms notebook 03 times greedy), fitted on the frontier's records scaled by
# their own run's AR, and checked here on other runs at other times (the prompts overlap: every experiment takes the
# first test prompts).

# %% tags=["nbval-ignore-output"]
by_costs = {ft.recorded_kind(path): p for p in on_kinds if (path := results_path("costs", profile=p)).exists()}
curves = {kind: c for kind, p in by_costs.items() if (c := ft.machine_curves(p)) is not None}  # priced for the head
for kind, on_kind in by_costs.items():
    checked = {name: results_path(name, on_kind) for name in ("heads", "talon")}
    if kind not in curves or not all(path.exists() for path in checked.values()):
        continue
    terms = ft.fitted_terms(frontiers[kind][1], curves[kind]) if kind in frontiers else None
    check = ft.cost_check_table({n: tables.load(path, on_kind) for n, path in checked.items()}, curves[kind], terms)
    show_table(ft.cost_check_summary(check), "table_cost_check_summary", on_kind)
    show_table(check.set_index(["source", "Workload", "T", "Method", "replicate"]).apply(
        lambda col: col.map((lambda x: f"{x:+.1%}") if col.name in ft.ERRORS else (lambda x: f"{x:.1f}"))),
        "table_cost_check", on_kind)

# %% [markdown]
# ## Each method's best budget, projected on every machine
# The frontier's counts priced on each machine's committed curves: the budget the model prices fastest there, and its
# predicted speedup over AR (the target's one-token forward). A budget that moves between machines is the machine's
# choice, not the method's.

# %% tags=["nbval-ignore-output"]
for kind, (on_kind, _, points) in frontiers.items():
    if curves:
        show_table(ft.projection_table(points, curves), "table_frontier_projection", on_kind)

# %% [markdown]
# ## Two verdicts per tree claim
# Both by the one rule (docs/usage.md#verdicts). In the method's own numbers: τ_A / τ_B at equal verified nodes (the
# most both reach, at most 16), with its interval over prompts (12 per workload needed). In wall time: the heads'
# table (DynaTree against the fixed tree and the chain, each at its tuned setting) or TALON's (TALON against EAGLE-3's
# tree), per machine kind, over both replicates with the run-to-run noise (20 prompts per workload needed; the heads'
# table drafts with the head and its context lookup, the frontier with the head alone). Figure 6's claim in counts:
# EAGLE-3's δ / τ over TALON's at TALON's budget.

# %% tags=["nbval-ignore-output"]
walls = {}  # {machine kind: {table: its records}}
for on_kind in on_kinds:
    found = {name: path for name in ("heads", "talon") if (path := results_path(name, on_kind)).exists()}
    if found:
        walls[ft.recorded_kind(next(iter(found.values())))] = {n: tables.load(p, on_kind) for n, p in found.items()}
for kind, (on_kind, _, points) in frontiers.items():
    show_table(ft.two_verdicts(points, walls), "table_two_verdicts", on_kind)

# %% [markdown]
# What to look for: (1) every greedy point equals AR; (2) where each frontier flattens: a tree that keeps adding nodes
# past the head's confident region commits little more per verification, so on a machine where a wide verification
# costs much more than a narrow one the best budget is small; (3) which ordering survives at equal nodes: a claim that
# holds in τ at equal nodes but not in wall time on a machine is that machine's price of drafting or verifying, not
# the method's; (4) how close TALON's and EAGLE-3's points at 60 nodes come to TALON's reported MAT for an 8B target
# (a larger model's head accepts more; the shapes, not the levels, are what travels).
