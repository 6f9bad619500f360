"""The feature head's reports of the harness: one JSON document each (not a table of cells), made by
``experiments.run`` like every record (``bench --experiment NAME``, the notebooks' ``rerun``), for the profile's
head (``extras.head``). Those that read the training text live in ``train.reports``.

- ``head_cost``: the head's step and v4's over the target's one-token forward, in paired rounds (issue 56's cost
  target: at most 0.08); timed: run it alone.
- ``head_tree_depth``: tokens per verification of EAGLE-3's tree and DynaTree on the head and on v4, greedy, on
  Spec-Bench dev questions, every output checked against AR; nothing timed.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import asdict
from pathlib import Path

import torch

from ... import methods as registry
from ...core.drafts.lookup import LookupRunner
from ...core.engines.hf import as_runner
from .catalog import Document, experiment
from .costs import one_token_ratio
from .pair import run_pair
from ..measure.environment import environment
from ..measure.metrics import prompt_metrics
from ..setup.profiles import Profile
from ..setup.prompts import candidates, load_prompts
from ..measure.store import needs_run, results_path, write_report
from ..setup.weights import weights_info
from ..setup.workloads import SPEC_BENCH, eos

COST_ROUNDS, COST_SPAN_S = 15, 120.0        # head_cost: paired rounds, spread over this many seconds
DEPTH_PER_CATEGORY, DEPTH_T = 2, 256       # head_tree_depth: dev questions per category, new tokens at most


def with_head(profile: Profile) -> Profile:
    """``profile`` drafting with its feature head (the head's own vocabulary)."""
    if not profile.extras.head:
        raise ValueError(f"profile {profile.name!r} has no feature head (extras.head): its head reports measure nothing")
    return dataclasses.replace(profile, models=dataclasses.replace(profile.models, draft=profile.extras.head,
                                                                   draft_vocab=None))


def report(name: str, profile: Profile, measure, rerun: bool, root: Path | None, *, render_only: bool) -> Path:
    """``results/<profile>/<name>.json``: made by ``measure()`` where missing (or ``rerun``: the old one kept as
    ``*.bak.json``), through the store's checks (``write_report``)."""
    path = results_path(name, profile, root)
    if not needs_run(path, rerun, render_only, profile):
        return path
    if profile.models.threads:
        torch.set_num_threads(profile.models.threads)
    write_report(path, measure(), replace=rerun)
    print(path)
    return path


def network(runner):
    """The draft network a step runs (the context lookup's own work aside, as the cost curves count it)."""
    r = as_runner(runner)
    return r.inner if isinstance(r, LookupRunner) else r


def run_head_cost(profile: Profile, rerun: bool = False, root: Path | None = None, render_only: bool = False) -> Path:
    def measure() -> dict:
        context = max(profile.protocol.L_max.values())
        out = {"context": context, "dtype": profile.models.dtype, "engine": str(profile.models.engine), "drafts": {}}
        for name, prof in (("v4", profile), ("head", with_head(profile))):
            target, draft, _ = prof.models.load_pair(prof.models.dtype, prof.max_len)
            net = network(draft)
            ratio = one_token_ratio(as_runner(target), net, context, rounds=COST_ROUNDS, span_s=COST_SPAN_S)
            out["drafts"][name] = {"ref": prof.models.draft, "engine": net.engine,
                                   "weights": weights_info(prof.models.draft), **ratio}
            print(f"{name} ({net.engine}): draft / target one-token cost, median {ratio['median']:.3f}")
        return out | {"environment": environment(profile.models.device)}

    return report("head_cost", profile, measure, rerun, root, render_only=render_only)


def run_head_tree_depth(profile: Profile, rerun: bool = False, root: Path | None = None,
                        render_only: bool = False) -> Path:
    def measure() -> dict:
        from tqdm import tqdm

        loaded = {name: (prof, *prof.models.load_pair(prof.models.dtype, prof.max_len))
                  for name, prof in (("head", with_head(profile)), ("v4", profile))}
        prof, target, _, tok = loaded["head"]
        prompts = load_prompts(SPEC_BENCH, tok, n=DEPTH_PER_CATEGORY, split="dev")
        dev = set(candidates(SPEC_BENCH, "dev"))
        if not all(p.id in dev for p in prompts):
            raise ValueError("head_tree_depth: a prompt is not a Spec-Bench dev question")
        stop, methods = eos(SPEC_BENCH, tok), (registry.EAGLE3_TREE, registry.DYNATREE)
        configs = {m: prof.method(m, SPEC_BENCH) for m in methods}
        rows = []
        for p in tqdm(prompts, desc="dev questions", unit="prompt"):
            ar = registry.generate(target, p.ids, DEPTH_T, eos_token_id=stop).tokens
            for d, (_, tgt, drf, _) in loaded.items():
                for m, cfg in configs.items():
                    res = registry.generate(tgt, p.ids, DEPTH_T, draft=drf, method=cfg, eos_token_id=stop)
                    rows.append({"prompt_id": p.id, "category": p.category, "draft": d, "method": m,
                                 "equals_ar": res.tokens == ar, **prompt_metrics(res)})
        summary = {f"{d}/{m}": statistics.fmean(r["L_bar"] for r in rows if r["draft"] == d and r["method"] == m)
                   for d in loaded for m in methods}
        return {"workload": SPEC_BENCH, "split": "dev", "T": DEPTH_T, "dtype": prof.models.dtype,
                "engine": str(prof.models.engine),
                "drafts": {d: {"ref": v[0].models.draft, "weights": weights_info(v[0].models.draft)}
                           for d, v in loaded.items()},
                "configs": {m: {"type": type(c).__name__, **asdict(c)} for m, c in configs.items()},
                "prompt_ids": [p.id for p in prompts], "mean_L_bar": summary, "per_prompt": rows,
                "environment": environment(prof.models.device)}

    return report("head_tree_depth", profile, measure, rerun, root, render_only=render_only)


def run_pair_eagle3(profile: Profile, rerun: bool = False, root: Path | None = None,
                    render_only: bool = False) -> Path:
    """Notebook 00's pair report of the profile's feature head (``pair_eagle3.json``)."""
    return run_pair(with_head(profile), rerun=rerun, root=root, render_only=render_only, name="pair_eagle3")


@experiment
class PairEagle3(Document):
    name = "pair_eagle3"
    notebook = "13_heads"
    make = run_pair_eagle3


@experiment
class HeadCost(Document):
    name = "head_cost"
    notebook = "13_heads"
    make = run_head_cost


@experiment
class HeadTreeDepth(Document):
    name = "head_tree_depth"
    notebook = "13_heads"
    make = run_head_tree_depth
