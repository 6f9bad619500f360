"""The paper's experiments as lists of benchmark cells, and one runner that logs them to JSON.

Tables 1-3 and 5 come from one run (``main``), as in the paper; the other experiments each have a file.
Every notebook calls ``run(name, profile)``, which skips cells already logged, then reads the JSON.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from . import bench
from .bench import Cell, ResultStore
from .data import load_prompts
from .drafting import DynaTreeConfig, FixedTreeConfig, LinearConfig, TalonConfig
from .profiles import EXTRA_METHODS, METHODS, Profile

def _four(p: Profile, ds: str, T: int, L: int, tags: dict | None = None) -> list[Cell]:
    return [Cell(ds, m, p.method(m, ds), T, L, dict(tags or {})) for m in METHODS]


def main_cells(p: Profile) -> list[Cell]:
    """Table 1 (the paper's four methods) plus the other seed systems, both datasets."""
    return [c for ds in p.datasets for c in _four(p, ds, p.T, p.L_max[ds])
            + [Cell(ds, m, p.method(m, ds), p.T, p.L_max[ds]) for m in EXTRA_METHODS]]


def ablation_cells(p: Profile) -> list[Cell]:
    """Fixed tree (D=D0, B=B_mid) -> + dynamic breadth & depth -> + history adaptation (WikiText-2)."""
    ds, full = "wikitext2", p.dynatree["wikitext2"]
    fixed = FixedTreeConfig(D=full.D0, B=full.B_mid, tau=full.tau, n_max=full.n_max)
    L = p.L_max[ds]
    return [Cell(ds, "ar", None, p.T, L),
            Cell(ds, f"Fixed Tree (D={full.D0}, B={full.B_mid})", fixed, p.T, L, {"step": 0}),
            Cell(ds, "+ Dynamic Breadth & Depth", dataclasses.replace(full, history=False), p.T, L, {"step": 1}),
            Cell(ds, "+ History Adaptation", full, p.T, L, {"step": 2})]


def length_cells(p: Profile) -> list[Cell]:
    return [c for T in p.T_list for c in _four(p, "wikitext2", T, p.L_max["wikitext2"], {"T": T})]


def prompt_length_cells(p: Profile) -> list[Cell]:
    return [c for L in p.L_max_list for c in _four(p, "wikitext2", p.T, L, {"L_max": L})]


def fixed_sweep_cells(p: Profile) -> list[Cell]:
    ds, L, g = "wikitext2", p.L_max["wikitext2"], p.fixed_grid
    cells = [Cell(ds, "ar", None, p.T, L)]
    for D in g["D"]:
        for B in g["B"]:
            for tau in g["tau"]:
                cfg = FixedTreeConfig(D=D, B=B, tau=tau, n_max=p.fixed.n_max)
                cells.append(Cell(ds, f"fixed D={D} B={B} tau={tau}", cfg, p.T, L, {"D": D, "B": B, "tau": tau}))
    return cells


def dynatree_sweep_cells(p: Profile) -> list[Cell]:
    ds, L, base = "wikitext2", p.L_max["wikitext2"], p.dynatree["wikitext2"]
    cells = [Cell(ds, "ar", None, p.T, L), Cell(ds, "fixed_tree", p.fixed, p.T, L, {"sweep": "reference"})]
    for th, tl in p.threshold_pairs:
        cells.append(Cell(ds, f"dynatree tau_h={th} tau_l={tl}", dataclasses.replace(base, tau_h=th, tau_l=tl),
                          p.T, L, {"sweep": "thresholds", "tau_h": th, "tau_l": tl}))
    for b in p.breadth_list:
        cfg = dataclasses.replace(base, B_min=b[0], B_mid=b[1], B_max=b[2])
        cells.append(Cell(ds, f"dynatree B={b}", cfg, p.T, L, {"sweep": "breadth", "B": list(b)}))
    for d0, dmax in p.depth_list:
        cfg = dataclasses.replace(base, D0=d0, D_max=dmax)
        cells.append(Cell(ds, f"dynatree D0={d0} D_max={dmax}", cfg, p.T, L,
                          {"sweep": "depth", "D0": d0, "D_max": dmax}))
    return cells


def tuning_cells(p: Profile) -> list[Cell]:
    """How the ``cpu`` tree settings were chosen: the paper-profile settings and a few alternatives, on
    held-out prompts (run with ``--set seed=99``: evaluation prompts use seed 0)."""
    from .profiles import get_profile

    paper = get_profile("paper")
    ds, L = "wikitext2", p.L_max["wikitext2"]
    cands = {"linear K=4": LinearConfig(4), "linear K=6": LinearConfig(6), "linear K=8": LinearConfig(8),
             "paper fixed D=8 B=3 tau=0.1": FixedTreeConfig(8, 3, 0.1, 64),
             "fixed D=6 B=2 tau=0.05": FixedTreeConfig(6, 2, 0.05, 64),
             "fixed D=4 B=2 tau=0 N=16": FixedTreeConfig(4, 2, 0.0, 16),
             "paper DynaTree defaults N=64": dataclasses.replace(paper.dynatree["wikitext2"], n_max=64),
             "DynaTree tau_h=.5 tau_l=.2 rho=.005/.1 tau=0 N=24": p.dynatree["wikitext2"],
             "TALON mu=.03 N=60 K=10": TalonConfig(), "TALON mu=.03 N=30 K=5": TalonConfig(N=30, K=5)}
    return [Cell(ds, "ar", None, p.T, L)] + [Cell(ds, k, v, p.T, L, {"candidate": k}) for k, v in cands.items()]


EXPERIMENTS = {"main": main_cells, "ablation": ablation_cells, "length_scaling": length_cells,
               "prompt_length": prompt_length_cells, "fixed_sweep": fixed_sweep_cells,
               "dynatree_sweep": dynatree_sweep_cells, "tuning": tuning_cells}
N_PROMPTS = {"main": "n_prompts", "ablation": "n_prompts"}  # the rest use sweep_n_prompts


def results_path(name: str, profile: Profile, root: Path | None = None) -> Path:
    return (root or bench.RESULTS) / profile.name / f"{name}.json"


def run(name: str, profile: Profile, rerun: bool = False, root: Path | None = None, verbose: bool = True) -> Path:
    """Run every cell of experiment ``name`` that its JSON lacks; returns the JSON path."""
    from tqdm.auto import tqdm

    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}")
    path = results_path(name, profile, root)
    store = ResultStore(path)
    if rerun and (old := store.archive()) and verbose:
        print(f"rerun: previous results kept at {old}")
    n = getattr(profile, N_PROMPTS.get(name, "sweep_n_prompts"))
    cells = EXPERIMENTS[name](profile)
    # AR cells first: every other cell of the same (dataset, T, L_max) is checked against them.
    cells.sort(key=lambda c: c.config is not None)
    keyed = [(c, bench.record_key(profile=profile.name, target=profile.target, draft=profile.draft,
                                  dtype=profile.dtype, kv=profile.kv_mode, seed=profile.seed, n=n,
                                  warmup=profile.warmup, ds=c.dataset, method=c.method,
                                  config=bench.config_dict(c.config), T=c.T, L=c.L_max)) for c in cells]
    todo = [(c, k) for c, k in keyed if store.get(k) is None]
    if not todo:
        return path
    if os.environ.get("DYNATREE_RENDER_ONLY"):
        raise FileNotFoundError(f"render-only mode: {len(todo)} cell(s) of '{name}' are missing from {path}; "
                                "run without --render first")
    if profile.threads:
        torch.set_num_threads(profile.threads)
    from .models import load_pair

    target, draft, tok = load_pair(profile.target, profile.draft, profile.device, profile.dtype, profile.context_override)
    prompts_cache: dict = {}
    rows = {k: store.partial(k) for _, k in todo}
    ar_ref: dict = {}
    for c, k in keyed:  # AR outputs logged earlier: finished records, or rows of an interrupted run
        if c.config is None:
            done = store.get(k)
            ar_ref[(c.dataset, c.T, c.L_max)] = {r["prompt_id"]: r["output_ids"]
                                                 for r in (done["rows"] if done else rows[k])}
    bar = tqdm(total=len(todo) * n, initial=sum(map(len, rows.values())), desc=f"{profile.name}/{name}", unit="gen")
    # Interleaved: round i measures prompt i for every cell (AR first), so slow drifts of machine speed
    # hit all methods alike instead of whichever cells happen to run during a slow spell.
    for i in range(n):
        for c, k in todo:
            if len(rows[k]) > i:
                continue
            pk = (c.dataset, c.L_max)
            if pk not in prompts_cache:
                prompts_cache[pk] = load_prompts(c.dataset, tok, n, c.L_max, profile.seed, profile.data_source)
            prompts = prompts_cache[pk]
            bar.set_postfix_str(f"{c.dataset} {c.method} T={c.T} L={c.L_max}")
            if not rows[k]:
                bench.warm_up(c, target, draft, prompts, profile.warmup, profile.kv_mode, profile.device)
            ref = ar_ref.setdefault((c.dataset, c.T, c.L_max), {})
            row = bench.measure(c, target, draft, prompts[i], profile.kv_mode, ref.get(prompts[i].id), profile.device)
            if c.config is None:
                ref[prompts[i].id] = row["output_ids"]
            rows[k].append(row)
            store.save_partial(k, rows[k])
            bar.update(1)
    for c, k in todo:
        store.add(bench.make_record(c, k, profile, prompts_cache[(c.dataset, c.L_max)], rows[k],
                                    profile.device, profile.kv_mode))
    bar.close()
    return path
