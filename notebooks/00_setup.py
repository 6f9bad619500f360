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
# # 00 · Setup and the model pair
# Loads the profile's models and prompts, confirms in fp32 that greedy AR, HF `generate` and DynaTree emit the same
# tokens, and describes the pair every other notebook uses: held-out bits per byte, how often the draft agrees with
# the target on each workload and whether its confidence means something (calibration), the machine these records
# were measured on, and what one forward of k tokens costs each model.

# %% tags=["parameters"]
profile = "cpu"      # "cpu": SmolLM2 pair, offline | "paper": Pythia-2.8B/70M, GPU + hub | "paper-dryrun" | "smoke"
overrides = {}       # profile field overrides, e.g. {"T": 128, "n_prompts": 4}
rerun = False        # True: archive this notebook's JSON (kept as *.bak.json) and measure again
render_only = False  # True: only render tables and figures from the logged JSON (measure nothing)

# %%
import json

from dynatree_lib.harness.experiments.costs import run_costs
from dynatree_lib.harness.experiments.pair import run_pair
from dynatree_lib.harness.setup.machine import kind_of_record
from dynatree_lib.harness.setup.paths import portable
from dynatree_lib.reporting.notebook import (experiments, machines, on_machine, plots, results_path, show_fig,
                                             show_table, start, tables)

prof = start(profile, overrides)

# %% [markdown]
# The workloads and their disjoint prompt splits: tuning prompts choose each method's setting, dev prompts serve
# design and diagnosis (this notebook's agreement, the tree drawings), and the sealed test prompts appear only in
# the final tables. The exactness check below runs in fp32 on the reference (eager transformers) path.

# %%
from dynatree_lib.harness.setup.prompts import candidates

{ws: {split: len(candidates(ws, split, prof.protocol.data_source)) for split in ("tuning", "dev", "test")}
 for ws in prof.workloads}

# %%
if not render_only:
    import torch

    from dynatree_lib import generate
    from dynatree_lib.harness.setup.models import load_pair
    from dynatree_lib.harness.setup.prompts import load_prompts

    if prof.models.threads:
        torch.set_num_threads(prof.models.threads)
    target, draft, tok = load_pair(prof.models.target, prof.models.draft, prof.models.device, "float32",
                                   prof.models.context_override, draft_vocab=prof.models.draft_vocab)
    p = load_prompts("wikitext2", tok, 1, prof.L_max("wikitext2"), split="dev", seed=prof.protocol.seed,
                     source=prof.protocol.data_source)[0].ids.to(prof.models.device)
    ar = generate(target, p, 32)
    hf = target.generate(p[None], max_new_tokens=32, do_sample=False, eos_token_id=None)[0, p.numel():].tolist()
    dt = generate(target, p, 32, draft=draft, method=prof.method("dynatree", "wikitext2"))
    assert ar.tokens == hf == dt.tokens
    print("fp32: AR == HF generate == DynaTree on", len(ar.tokens), "tokens")

# %% [markdown]
# ## The pair on held-out text
# Bits per byte on the WikiText-2 test split and the PG-19 test books (never seen in training). Agreement is
# teacher-forced on the target's own greedy output for the dev prompts of every workload (the continuations, and
# the answers to Spec-Bench's questions by category: the text drafting serves) and, for contrast, on the
# human-written prompts. Where the profile sets `draft_vocab` (cpu: 8192), the draft drafts with a head over its
# most frequent tokens only (FR-Spec; the target still verifies every token, so decoding stays exact): the
# agreement rows are that head's, and the rows marked "full-vocabulary head" the same draft scoring all tokens.
# Where it sets `draft_lookup` (cpu), the draft drafts with its context lookup (`dynatree_lib/core/drafts/lookup.py`:
# the token that followed the longest earlier match of the text's suffix, mixed in with a weight fitted per match
# length on non-test text): the agreement rows are the mixture's, the rows marked "network alone" the draft
# without it.

# %%
pair = json.loads(run_pair(prof, rerun, render_only=render_only).read_text())
show_table(tables.pair_table(pair), "table_pair", prof)
show_table(tables.agreement_table(pair), "table_draft_agreement", prof)

# %%
print("prompt ...", repr(pair["sample"]["prompt_tail"]))
print("target's greedy continuation:", repr(pair["sample"]["continuation"]))

# %% [markdown]
# Every record holds the machine and checkout that measured it (its `environment`: device, library versions, commit,
# date). Shown here from the pair report, so that a render of the committed records shows the same on any machine.

# %%
print("the machine these records were measured on (pair.json):")
pair["environment"]

# %% [markdown]
# Greedy agreement reads only the top token. A sampled verification accepts a token drawn from the draft with
# probability Σ min(p, q) over the two models' next-token laws at temperature 1 (one drawn child; a tree's
# siblings add to it), and it drafts on text the target sampled, not on its greedy output. The table gives that
# overlap on both texts (notebook 10 runs the sampling experiment itself).

# %%
show_table(tables.overlap_table(pair), "table_draft_overlap", prof)

# %% [markdown]
# The draft against its previous versions on the same dev prompts, where their reports were kept
# (`pair_v2.json`, `pair_v3.json`): agreement of the network alone, with its lookup, and its calibration error.
# v2 was distilled on continuations only; v3, a larger network trained from scratch on 2 CPU cores, also on the
# target's answers to instructions (none of them an evaluation prompt); v4 is the target's own first 3 layers,
# distilled on a GPU on many more of the target's answers and continuations. What to look for: the Spec-Bench rows,
# where the network alone went from mostly wrong (v2) to right on most tokens (v4), with its confidence calibrated
# throughout, against the continuation rows, where the lookup carries much of the agreement of every version.

# %%
earlier = {v: json.loads(results_path(f"pair_{v}", prof).read_text())
           for v in ("v2", "v3") if results_path(f"pair_{v}", prof).exists()}
if earlier:
    show_table(tables.draft_versions_table(pair, earlier, now="v4"), "table_draft_versions", prof)

# %% [markdown]
# A calibrated draft's top-1 probability predicts how often the target agrees with it: that is what
# DynaTree's confidence thresholds (τ_h, τ_l) and pruning (τ) read. One panel per workload; below each, where
# the positions lie.

# %%
show_fig(plots.reliability(pair), "fig_draft_calibration", prof)

# %% [markdown]
# Agreement by position in a draft: the probability that a linear draft is accepted at least to depth j.

# %%
show_fig(plots.chain_acceptance(pair), "fig_chain_acceptance", prof)

# %% [markdown]
# ## What a forward costs
# fwd(k): one cached forward of k tokens over a prompt-length cache, on the profile's engine, in the timed and
# the exact precision (median of 15). Speculative decoding pays when fwd_target(k) grows slowly with k and the
# draft is cheap; the horizontal lines are the bandwidth bound of one-token decoding (weights / read bandwidth).
# "draft full vocab" is the draft with its whole output layer, for comparison with the subset head it drafts with.

# %%
costs = json.loads(run_costs(prof, rerun, render_only=render_only).read_text())
show_table(tables.forward_cost_table(costs), "table_forward_costs", prof)

# %% [markdown]
# The draft's one-token forward over the target's, in paired rounds (the target's forward, then the draft's),
# spread over a few minutes. The machine's memory bandwidth drifts between phases and the target, which streams all
# its weights per token, follows it more than the draft: the ratio depends on the phase, so the table gives the
# median and quartiles over the rounds with the read bandwidth they met (the cpu draft must cost at most 1/8 of
# the target). Below, the ratio on the curves above (k = 1) beside the previous draft's curves (`costs_v3.json`),
# the one measurement both drafts have.

# %%
earlier_costs = {v: json.loads(results_path(f"costs_{v}", prof).read_text())
                 for v in ("v3",) if results_path(f"costs_{v}", prof).exists()}
show_table(tables.one_token_table(costs, earlier_costs, now="v4"), "table_one_token_cost", prof)

# %% tags=["nbval-ignore-output"]
show_fig(plots.cost_curves(costs), "fig_forward_costs", prof)

# %% [markdown]
# ### On another machine kind
# The same curves from each other machine kind's records committed beside the reference machine's
# (`results/cpu@<kind>/costs.json`; the CPU and the kernels' instruction set are in each record's environment), and
# there the target's matmuls alone on each of our instruction sets beside torch's oneDNN matmul (`matmuls`). A ratio
# belongs to its machine: where verifying k tokens costs less of a one-token forward, wider trees pay. Last, c(k) of
# every machine side by side.

# %% tags=["nbval-ignore-output"]
by_machine = {kind_of_record(costs["environment"]) or "reference": costs}
for kind in machines(prof):
    on_kind = on_machine(prof, kind)
    if results_path("costs", on_kind).exists():
        costs_k = by_machine[kind] = json.loads(results_path("costs", on_kind).read_text())
        show_table(tables.forward_cost_table(costs_k), "table_forward_costs", on_kind)
        show_fig(plots.cost_curves(costs_k), "fig_forward_costs", on_kind)
    if results_path("matmuls", on_kind).exists():
        show_table(tables.matmul_table(json.loads(results_path("matmuls", on_kind).read_text())), "table_matmuls",
                   on_kind)
if len(by_machine) > 1:
    show_table(tables.verification_table(by_machine, prof.models.dtype), "table_verification_by_machine", prof)

# %% [markdown]
# ## The engine against the machine's roofs
# What a k-row forward of the target could cost at best on this machine: the larger of its bytes (weights, and the
# context's keys and values) over the read bandwidth and its FLOPs over the cores' peak bf16 multiply throughput,
# both measured here by `bench --experiment roofline` (the peak by a register-resident loop of the instruction the
# kernels multiply with; the roof bandwidth the fastest of the torch sums, those around the phase profiles included,
# and our kernel streaming a weight beyond the caches). The VM's read bandwidth flips between two phases, so the
# floors of the measured curve use the bandwidth probed right before and after it: the phase it ran in.
# The floor of c(k) is what verifying k rows could cost over one; above it, the engine leaves speed on the table.
# The third table says where the time goes, step by step of the fused forward (the threads' mean; a wait is the time
# a thread stood at the barrier after a step). The VM's read bandwidth flips between phases within seconds, so the
# last table repeats the one-row profile between two probes many times and gives, per phase, the forward against
# the bound of that phase and what holds it there. Each machine kind's record renders apart: a ratio belongs to its
# machine.

# %% tags=["nbval-ignore-output"]
from dynatree_lib.reporting.roofline import phase_table, roofline_figure, roofline_table, roofs_table, step_table

for kind, on_kind in [(None, prof)] + [(k, on_machine(prof, k)) for k in machines(prof)]:
    if not experiments.measures("roofline", on_kind):
        print(f"profile {prof.name!r} has no roofline (its roofs are a CPU's)")
        break
    path = results_path("roofline", on_kind)
    if kind is None and not render_only:
        path = experiments.run("roofline", prof, rerun=rerun)
    if not path.exists():
        print(f"not measured yet on {kind or 'the reference machine'}: {portable(path)} is missing "
              f"(`python -m dynatree_lib bench --experiment roofline --profile {prof.name}"
              f"{f' --set machine={kind}' if kind else ''}` measures it)")
        continue
    doc = json.loads(path.read_text())
    show_table(roofs_table(doc), "table_roofs", on_kind)
    show_table(roofline_table(doc), "table_roofline", on_kind)
    show_fig(roofline_figure(doc), "fig_roofline", on_kind)
    if (steps := step_table(doc)) is not None:
        show_table(steps, "table_forward_steps", on_kind)
    if (phases := phase_table(doc)) is not None:
        show_table(phases, "table_forward_phases", on_kind)

# %% [markdown]
# ### AR against its bound on the main experiment's prompts
# AR alone in the timed precision on every main workload's sealed test prompts, each replicate in its own process
# (`bench --experiment ar_bound`). The read bandwidth is probed right before and right after each generation, so the
# last column sets each generation's time per token against the bound of its own moment (weight bytes over its
# probes), counting only the generations whose two probes agree within 10%: a VM's bandwidth moves between phases
# within seconds, and a record's mean probe can describe no moment of the run.
# Notebook 02 gives the same table from the main experiment's AR rows.

# %% tags=["nbval-ignore-output"]
if not experiments.measures("ar_bound", prof):
    print(f"profile {prof.name!r} has no AR-bound experiment (its bound is a CPU's)")
elif render_only and not results_path("ar_bound", prof).exists():
    print(f"not measured yet: {portable(results_path('ar_bound', prof))} is missing "
          f"(`python -m dynatree_lib bench --experiment ar_bound --profile {prof.name}` measures it)")
else:
    path = results_path("ar_bound", prof) if render_only else experiments.run("ar_bound", prof, rerun=rerun)
    show_table(tables.ar_vs_bound(tables.load(path, prof)), "table_ar_bound", prof)
