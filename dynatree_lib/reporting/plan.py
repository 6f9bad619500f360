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
from ..harness.experiments.catalog import EXPERIMENTS, Experiment
from ..harness.measure.bench import unmeasurable
from ..harness.measure.store import results_path
from ..harness.experiments.tuning import NotTuned, tuned
from ..harness.experiments.talon import TALON
from ..harness.setup.profiles import with_setting
from ..harness.setup.variants import MAIN
from .records import reported

NOTEBOOKS = ("00_setup", "01_main_results", "02_latency", "03_verification_efficiency", "04_ablation",
             "05_length_scaling", "06_sweeps", "07_prompt_length", "08_memory", "09_tree_shapes", "10_sampling",
             "11_authors_code", "12_peers", "13_heads", "14_talon", "15_frontier", "16_control")
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


def cells_of(profile, exp: Experiment):
    """The experiment's cells; where the tuning or the costs are not logged yet, the paper's settings stand in
    (a cost-aware cell costs what a DynaTree cell does)."""
    p = profile
    try:
        for ws in p.workloads:
            tuned(p, registry.DYNATREE, ws)
    except NotTuned:  # no tuning logged for this protocol yet
        p = dataclasses.replace(p, tuning=dataclasses.replace(p.tuning, candidates=None))
    try:
        return exp.cells(profile if exp.picks_settings else p, None)
    except NotTuned:  # the extension's costs, or its tuning on them, not logged yet
        no_ext = dataclasses.replace(p, extras=dataclasses.replace(p.extras, cost_aware=False))
    try:
        cells = exp.cells(no_ext, None)
    except NotTuned:  # notebook 14's tuning on the heads (or the head's step) not logged: published settings
        untuned = dataclasses.replace(no_ext, tuning=dataclasses.replace(p.tuning, candidates=None),
                                      settings=with_setting(no_ext.settings, TALON, "extension", False))
        cells = exp.cells(untuned, None)
    return cells + [c for c in cells if c.method == registry.DYNATREE and c.variant == MAIN]


def plan(profile, quick: bool = False) -> list[dict]:
    """One entry per notebook: generations, tokens and estimated hours of the experiments it measures
    (``Experiment.notebook``, ``Experiment.planned``), without the rows of a method this machine cannot run."""
    rate = Rates(profile)
    out = []
    for nb in NOTEBOOKS:
        if quick and nb in SWEEP_NOTEBOOKS:
            continue
        gens = toks = secs = 0.0
        for exp in (e for e in EXPERIMENTS.values() if e.notebook == nb):
            cells = cells_of(profile, exp)
            lacking = unmeasurable(cells)  # a peer engine not built here: the notebooks skip its rows
            for c, n in exp.planned(profile, [c for c in cells if c.method not in lacking]):
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
