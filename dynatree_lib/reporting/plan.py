"""What a run of ``run_all.sh`` costs, before running it: generations and tokens per notebook, and the time they
take, estimated from the best throughputs at hand.

Rates, printed with the plan: where this profile's main table was logged (``results/<profile>/main.json``), each
method's measured tokens/s on each workload (warm-up runs and prefill included, model loading and compilation
not; a method not logged: AR's, a workload not logged: the mean over the logged ones); otherwise, the paper's
Table 1 throughputs on an A100 (TALON, HF and StreamingLLM at linear speculative decoding's rate; fp32 at a
quarter), which only a GPU profile approaches.
"""
from __future__ import annotations

import dataclasses
import json
import statistics

from .. import methods as registry
from ..harness.experiments.catalog import EXPERIMENTS, TALON, TALON_TUNING, n_prompts
from ..harness.setup.splits import CATEGORIES
from ..harness.measure.store import results_path
from ..harness.experiments.tuning import NotTuned, tuned
from ..harness.setup.variants import MAIN
from ..harness.setup.workloads import count
from .records import reported

NOTEBOOKS = {"00_setup": ("pair",), "01_main_results": ("tuning", "main"), "02_latency": (), "03_verification_efficiency": (),
             "04_ablation": ("ablation",), "05_length_scaling": ("length_scaling",),
             "06_sweeps": ("fixed_sweep", "dynatree_sweep"), "07_prompt_length": ("prompt_length",),
             "08_memory": ("memory",), "09_tree_shapes": ("trees",), "10_sampling": ("sampling",),
             "11_authors_code": (), "12_peers": ("peers",), "13_heads": ("heads",),
             "14_talon": (TALON_TUNING, TALON),
             "15_frontier": (),  # the frontier is measured by bench --experiment frontier (or the notebook's rerun)
             "16_control": ("control",)}
SWEEP_NOTEBOOKS = ("05_length_scaling", "06_sweeps", "07_prompt_length")


class Rates:
    """Tokens per second per (method, workload, precision): logged, or the paper's."""

    def __init__(self, profile):
        path = results_path("main", profile)
        self.logged: dict = {}
        if path.exists():
            for r in json.loads(path.read_text())["records"]:
                self.logged[(r["method"], r["dataset"], r["dtype"])] = r["aggregate"]["tps"]["mean"]
        self.source = "this profile's logged main table" if self.logged else "the paper's Table 1 (A100)"

    def __call__(self, method: str, workload: str, dtype: str) -> float:
        for m in (method, registry.AR):  # a method not logged yet: AR's rate on the workload
            if (m, workload, dtype) in self.logged:
                return self.logged[(m, workload, dtype)]
        for m in (method, registry.AR):  # a workload not logged (notebook 14's): the mean of the logged others
            if elsewhere := [tps for (m2, _, d), tps in self.logged.items() if m2 == m and d == dtype]:
                return statistics.fmean(elsewhere)
        paper = reported()["table1_throughput_tokens_per_s"]
        t1 = paper.get(workload, paper[list(paper)[-1]])  # a workload the paper lacks: its last one's (PG-19's)
        m = registry.REGISTRY.get(method)
        tps = t1[m.study.reported if m and m.study.reported else "linear_spec"]["mean"]
        return tps / 4 if dtype == "float32" else tps


def cells_of(profile, name: str):
    """The experiment's cells; where the tuning or the costs are not logged yet, the paper's settings stand in
    (a cost-aware cell costs what a DynaTree cell does)."""
    p = profile
    try:
        for ws in p.workloads:
            tuned(p, registry.DYNATREE, ws)
    except NotTuned:  # no tuning logged for this protocol yet
        p = dataclasses.replace(p, tuning=dataclasses.replace(p.tuning, candidates=None))
    try:
        return EXPERIMENTS[name](profile if name in ("tuning", TALON_TUNING) else p, None)
    except NotTuned:  # the extension's costs, or its tuning on them, not logged yet
        no_ext = dataclasses.replace(p, extras=dataclasses.replace(p.extras, cost_aware=False))
    try:
        cells = EXPERIMENTS[name](no_ext, None)
    except NotTuned:  # notebook 14's tuning on the heads (or the head's step) not logged: published settings
        untuned = dataclasses.replace(no_ext, tuning=dataclasses.replace(p.tuning, candidates=None),
                                      extras=dataclasses.replace(no_ext.extras, talon_extension=False))
        cells = EXPERIMENTS[name](untuned, None)
    return cells + [c for c in cells if c.method == registry.DYNATREE and c.variant == MAIN]


def plan(profile, quick: bool = False) -> list[dict]:
    """One entry per notebook: generations, tokens and estimated hours."""
    rate, per_category = Rates(profile), len(set(CATEGORIES.values()))
    out = []
    for nb, exps in NOTEBOOKS.items():
        if quick and nb in SWEEP_NOTEBOOKS:
            continue
        gens = toks = secs = 0.0
        for name in exps:
            if name == "pair":  # greedy output of the dev prompts, fp32
                for ws in profile.workloads:
                    n = profile.extras.pair_n_prompts or profile.protocol.n_prompts
                    n = count(ws, n, profile.extras.pair_n_questions * per_category)
                    gens, toks = gens + n, toks + n * profile.protocol.T
                    secs += n * profile.protocol.T / rate(registry.AR, ws, "float32")
                continue
            for c in cells_of(profile, name):
                n = n_prompts(name, profile, c) * count(c.dataset, 1, per_category) + profile.protocol.warmup
                gens, toks = gens + n, toks + n * c.T
                secs += n * c.T / rate(c.method, c.dataset, c.dtype)
        out.append({"notebook": nb, "generations": int(gens), "tokens": int(toks), "hours": secs / 3600})
    return out


def format_plan(rows: list[dict], profile) -> str:
    p = profile.protocol
    lines = [f"plan for profile {profile.name!r} (target {profile.models.target}, workloads {', '.join(profile.workloads)}, "
             f"T={p.T}, {p.n_prompts} prompts per continuation dataset, {p.n_questions} per Spec-Bench category, "
             f"{p.replicates} replicate(s), {profile.models.dtype}, device {profile.models.device})",
             f"{'notebook':28s} {'generations':>11s} {'tokens':>11s} {'est. hours':>10s}"]
    for r in rows:
        lines.append(f"{r['notebook']:28s} {r['generations']:11d} {r['tokens']:11d} {r['hours']:10.2f}")
    lines.append(f"{'total':28s} {sum(r['generations'] for r in rows):11d} {sum(r['tokens'] for r in rows):11d} "
                 f"{sum(r['hours'] for r in rows):10.2f}")
    lines.append(f"Hours at the rates of {Rates(profile).source}; loading, compiling and the memory experiment's "
                 "fresh processes are not counted.")
    return "\n".join(lines)
