"""What a run of ``run_all.sh`` costs, before running it: generations and tokens per notebook, and GPU
time estimated from the paper's own throughputs (Table 1, Pythia-2.8B/70M on an A100).

Assumptions, printed with the plan: each generation runs at the paper's tokens/s for its method family
and dataset (TALON, HF assisted and StreamingLLM at linear speculative decoding's rate); fp32 runs at a
quarter of that; warmup runs count like measured ones; model loading and compilation are not counted.
"""
from __future__ import annotations

import dataclasses

from .. import methods as registry
from ..harness.experiments import EXPERIMENTS, n_prompts, tuned
from .tables import reported

NOTEBOOKS = {"00_setup": ("pair",), "01_main_results": ("tuning", "main"), "02_latency": (), "03_verification_efficiency": (),
             "04_ablation": ("ablation",), "05_length_scaling": ("length_scaling",),
             "06_sweeps": ("fixed_sweep", "dynatree_sweep"), "07_prompt_length": ("prompt_length",),
             "08_memory": ("memory",), "09_tree_shapes": ("trees",)}
SWEEP_NOTEBOOKS = ("05_length_scaling", "06_sweeps", "07_prompt_length")


def _tps(method: str, dataset: str, dtype: str) -> float:
    t1 = reported()["table1_throughput_tokens_per_s"][dataset]
    m = registry.REGISTRY.get(method)
    tps = t1[m.reported if m and m.reported else "linear_spec"]["mean"]
    return tps / 4 if dtype == "float32" else tps


def plan(profile, quick: bool = False) -> list[dict]:
    """One entry per notebook: generations, tokens and estimated GPU seconds."""
    try:
        tuned(profile, "dynatree", profile.datasets[0])
        cells_of = profile
    except FileNotFoundError:  # tuning not run yet: count the other cells at the paper's settings
        cells_of = dataclasses.replace(profile, tuning=dataclasses.replace(profile.tuning, candidates=None))
    out = []
    for nb, exps in NOTEBOOKS.items():
        if quick and nb in SWEEP_NOTEBOOKS:
            continue
        gens = toks = secs = 0.0
        for name in exps:
            if name == "pair":  # greedy continuations of the test prompts, fp32
                for ds in profile.datasets:
                    gens += profile.protocol.n_prompts
                    toks += profile.protocol.n_prompts * profile.protocol.T
                    secs += profile.protocol.n_prompts * profile.protocol.T / _tps("ar", ds, "float32")
                continue
            try:
                cells = EXPERIMENTS[name](profile if name == "tuning" else cells_of, None)
            except FileNotFoundError:  # no costs.json yet: a cost-aware cell costs what its DynaTree cell does
                no_ext = dataclasses.replace(cells_of, extras=dataclasses.replace(cells_of.extras, cost_aware=False))
                cells = EXPERIMENTS[name](no_ext, None)
                cells += [c for c in cells if c.method == "dynatree" and not c.tags.get("paper_settings")]
            for c in cells:
                n = n_prompts(name, profile, c) + profile.protocol.warmup
                gens += n
                toks += n * c.T
                secs += n * c.T / _tps(c.method, c.dataset, c.dtype)
        out.append({"notebook": nb, "generations": int(gens), "tokens": int(toks), "gpu_hours": secs / 3600})
    return out


def format_plan(rows: list[dict], profile) -> str:
    lines = [f"plan for profile {profile.name!r} (target {profile.models.target}, T={profile.protocol.T}, {profile.protocol.n_prompts} prompts, "
             f"{profile.models.dtype}, device {profile.models.device})",
             f"{'notebook':28s} {'generations':>11s} {'tokens':>11s} {'est. GPU h':>10s}"]
    for r in rows:
        lines.append(f"{r['notebook']:28s} {r['generations']:11d} {r['tokens']:11d} {r['gpu_hours']:10.2f}")
    lines.append(f"{'total':28s} {sum(r['generations'] for r in rows):11d} {sum(r['tokens'] for r in rows):11d} "
                 f"{sum(r['gpu_hours'] for r in rows):10.2f}")
    lines.append("GPU hours assume the paper's Table 1 throughputs on an A100 (fp32 at a quarter of them); "
                 "loading, compiling and tuning reruns are not counted.")
    return "\n".join(lines)
