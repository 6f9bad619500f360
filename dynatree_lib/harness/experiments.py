"""The paper's experiments as lists of benchmark cells, and one runner that logs them to JSON.

Tables 1-3 come from one run (``main``), as in the paper; the other experiments each have a file. Every
notebook calls ``run(name, profile)``, which measures the cells its JSON lacks and returns the path;
``render_only=True`` refuses to measure anything (rebuilding tables and figures from JSON alone).

Tuning (profiles with ``tuning``): every method family gets the same number of candidate settings,
measured on tuning prompts drawn with ``tuning_seed`` (never the test prompts); ``tuned`` picks each
family's fastest candidate per dataset from ``tuning.json``, and every other experiment uses it.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from .. import methods as registry
from ..core.policies import FixedTreeConfig
from ..extensions.cost_aware import CostAwareConfig
from . import measure
from .costs import predict_iteration, run_costs
from .data import load_prompts
from .environment import BandwidthProbe, bound
from .measure import Cell
from .profiles import Profile
from .store import ResultStore, config_dict, record_key, results_path

NO_SKIP = "DynaTree + cost budget, every level drafted (ext.)"  # the extension with lookup_skip off
NO_RECORD = "DynaTree + cost budget, no copy record (ext.)"  # ... skipping on the copy weight alone (skip_window 0)
PAPER_DYNATREE = "DynaTree (paper settings)"


def label(name: str) -> str:
    """What tables and plots call a registered method."""
    return registry.REGISTRY[name].label


def tuned_families() -> tuple[str, ...]:
    return tuple(n for n, m in registry.REGISTRY.items() if m.tuned)


def tuned(p: Profile, family: str, dataset: str, root: Path | None = None):
    """The family's setting for ``dataset``: the fastest tuning candidate (from the logged JSON), or the
    paper's setting for profiles without tuning."""
    if p.tuning.candidates is None or family not in tuned_families():
        if family == "streaming_spec" and p.tuning.candidates is not None:  # StreamingLLM drafts a chain: linear's K
            K = tuned(p, "linear", dataset, root).K
            return dataclasses.replace(p.method(family, dataset), K=K)
        return p.method(family, dataset)
    return _fastest(p, family, dataset, p.tuning.candidates[family], root)


def _fastest(p: Profile, family: str, dataset: str, candidates, root: Path | None):
    """The candidate with the highest mean throughput among ``family``'s tuning records on ``dataset``."""
    path = results_path("tuning", p, root)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run the tuning experiment first (notebook 01 does)")
    recs = [r for r in json.loads(path.read_text())["records"]
            if r["dataset"] == dataset and r["method"] == family and r["dtype"] == p.models.dtype]
    if not recs:
        raise ValueError(f"{path} holds no tuning records for {family} on {dataset} at {p.models.dtype}")
    best = max(recs, key=lambda r: r["aggregate"]["tps"]["mean"])
    pick = next((c for c in candidates if config_dict(c) == best["config"]), None)
    if pick is None:  # the candidates changed since tuning ran (a new field, another grid)
        raise ValueError(f"{path}: the fastest {family} setting on {dataset} ({best['label']}) is not among this "
                         "code's candidates; rerun the tuning experiment (--rerun)")
    return pick


def _cost_curve(p: Profile, dtype: str, root: Path | None) -> tuple[tuple, float, float]:
    """What this profile measured in ``dtype`` (costs.json), as ``CostAwareConfig`` takes it: fwd_target(k)
    as (k, ms) pairs, one further drafting level, and the rest of an iteration (``costmodel``'s terms)."""
    path = results_path("costs", p, root)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the cost-aware extension needs the measured forward costs "
                                "(notebook 00, or costmodel.run_costs)")
    curves = json.loads(path.read_text())["curves"][dtype]
    verify = tuple((int(k), round(ms, 3)) for k, ms in sorted(curves["target"].items(), key=lambda kv: int(kv[0])))
    # notebook 03's iteration, one node a level: drafting one level (its first forward follows the target's),
    # then two; the difference is a further level, the first level plus the commit the rest of an iteration
    one, _, commit = predict_iteration(curves, 1, 1, 1, 1.0)
    two = predict_iteration(curves, 2, 2, 2, 1.0)[0]
    return verify, round(two - one, 3), round(one + commit, 3)


def cost_candidates(p: Profile, root: Path | None = None) -> tuple[CostAwareConfig, ...]:
    """The extension's tuning candidates: DynaTree's candidates, each with its trees cut by the curves of the
    timed precision (the same number as every family's)."""
    curve = _cost_curve(p, p.models.dtype, root)
    return tuple(CostAwareConfig(base, *curve) for base in p.tuning.candidates["dynatree"])


def cost_aware(p: Profile, dataset: str, dtype: str, root: Path | None = None) -> CostAwareConfig:
    """The named extension for ``dataset`` in ``dtype``: DynaTree's trees cut by the forward-cost curves this
    profile measured in ``dtype`` (notebook 00's costs.json, which ``run`` measures first if missing). Its
    DynaTree settings are, where the profile tunes, the fastest of ``cost_candidates`` (tuned with the cut on,
    as the extension runs), else the paper's."""
    base = (p.method("dynatree", dataset) if p.tuning.candidates is None
            else _fastest(p, "dynatree_cost", dataset, cost_candidates(p, root), root).base)
    return CostAwareConfig(base, *_cost_curve(p, dtype, root))


def _cell(p: Profile, ds: str, family: str, T: int, L: int, tags: dict | None = None, dtype: str | None = None,
          root: Path | None = None) -> Cell:
    cfg = tuned(p, family, ds, root)
    return Cell(ds, family, label(family), cfg, T, L, dtype or p.models.dtype, dict(tags or {}))


def _four(p: Profile, ds: str, T: int, L: int, tags: dict | None = None, root=None) -> list[Cell]:
    """The paper's Table 1 methods (``methods.names("paper")``)."""
    return [_cell(p, ds, m, T, L, tags, root=root) for m in registry.names("paper")]


def main_methods() -> tuple[str, ...]:
    """The methods of the main table and the memory table: the paper's, the other seed systems, and any
    extension with a default setting (the cost-aware extension is built from the measured costs instead)."""
    ext = tuple(n for n in registry.names("extension") if registry.REGISTRY[n].paper is not None)
    return registry.names("paper") + registry.names("seed") + ext


def tuning_cells(p: Profile, root=None) -> list[Cell]:
    """AR plus each family's candidates (an equal number each), on the tuning prompts."""
    if p.tuning.candidates is None:
        return []
    T = p.tuning.T or p.protocol.T
    cost = cost_candidates(p, root) if p.extras.cost_aware else ()
    cells = []
    for ds in p.datasets:
        cells.append(Cell(ds, "ar", "AR", None, T, p.protocol.L_max[ds], p.models.dtype))
        for fam in tuned_families():
            for i, cfg in enumerate(p.tuning.candidates[fam]):
                cells.append(Cell(ds, fam, f"{label(fam)} #{i}: {_short(cfg)}", cfg, T, p.protocol.L_max[ds], p.models.dtype,
                                  {"candidate": i}))
        for i, cfg in enumerate(cost):
            cells.append(Cell(ds, "dynatree_cost", f"{label('dynatree_cost')} #{i}: {_short(cfg.base)}", cfg, T,
                              p.protocol.L_max[ds], p.models.dtype, {"candidate": i}))
    return cells


def _short(cfg) -> str:
    d = dataclasses.asdict(cfg)
    return " ".join(f"{k}={v}" for k, v in d.items() if k not in ("dynamic_breadth", "dynamic_depth", "history",
                                                                    "W", "a_star", "eta_D", "eta_h"))


def main_cells(p: Profile, root=None) -> list[Cell]:
    """Table 1-3: every method (tuned where the profile tunes) plus DynaTree with the paper's settings,
    in the timed precision; and the same in ``exact_dtype`` (fewer prompts) where every exact method
    must equal AR."""
    cells = []
    for dtype, role in ((p.models.dtype, "timed"), (p.models.exact_dtype, "exact")):
        if dtype is None or (role == "exact" and dtype == p.models.dtype):
            continue
        for ds in p.datasets:
            T, L = p.protocol.T, p.protocol.L_max[ds]
            cells += [_cell(p, ds, m, T, L, {"role": role}, dtype, root) for m in main_methods()]
            if p.tuning.candidates is not None:
                cells.append(Cell(ds, "dynatree", PAPER_DYNATREE, p.method("dynatree", ds), T, L, dtype,
                                  {"role": role, "paper_settings": True}))
            if p.extras.cost_aware:
                ext = cost_aware(p, ds, dtype, root)
                cells.append(Cell(ds, "dynatree_cost", label("dynatree_cost"), ext, T, L, dtype,
                                  {"role": role, "extension": True}))
                if p.models.draft_lookup:  # and without its lookup skip (what the skipped forwards add), and skipping
                    # without the record of its copies (what stopping where they fail adds)
                    cells.append(Cell(ds, "dynatree_cost", NO_SKIP, dataclasses.replace(ext, lookup_skip=1.0), T, L,
                                      dtype, {"role": role, "extension": True, "lookup_skip": False}))
                    cells.append(Cell(ds, "dynatree_cost", NO_RECORD, dataclasses.replace(ext, skip_window=0), T, L,
                                      dtype, {"role": role, "extension": True, "skip_window": 0}))
    return cells


def ablation_cells(p: Profile, root=None) -> list[Cell]:
    """Fixed tree (D=D0, B=B_mid) -> + dynamic breadth & depth -> + history adaptation (WikiText-2)."""
    ds = "wikitext2"
    full = tuned(p, "dynatree", ds, root)
    fixed = FixedTreeConfig(D=full.D0, B=full.B_mid, tau=full.tau, n_max=full.n_max)
    L = p.protocol.L_max[ds]
    return [Cell(ds, "ar", "AR", None, p.protocol.T, L, p.models.dtype),
            Cell(ds, "fixed_tree", f"Fixed Tree (D={full.D0}, B={full.B_mid})", fixed, p.protocol.T, L, p.models.dtype, {"step": 0}),
            Cell(ds, "dynatree", "+ Dynamic Breadth & Depth", dataclasses.replace(full, history=False), p.protocol.T, L,
                 p.models.dtype, {"step": 1}),
            Cell(ds, "dynatree", "+ History Adaptation", full, p.protocol.T, L, p.models.dtype, {"step": 2})]


def length_cells(p: Profile, root=None) -> list[Cell]:
    return [c for T in p.sweeps.T_list for c in _four(p, "wikitext2", T, p.protocol.L_max["wikitext2"], {"T": T}, root)]


def prompt_length_cells(p: Profile, root=None) -> list[Cell]:
    return [c for L in p.sweeps.L_max_list for c in _four(p, "wikitext2", p.protocol.T, L, {"L_max": L}, root)]


def fixed_sweep_cells(p: Profile, root=None) -> list[Cell]:
    ds, L, g = "wikitext2", p.protocol.L_max["wikitext2"], p.sweeps.fixed_grid
    cells = [Cell(ds, "ar", "AR", None, p.protocol.T, L, p.models.dtype)]
    for D in g["D"]:
        for B in g["B"]:
            for tau in g["tau"]:
                cfg = FixedTreeConfig(D=D, B=B, tau=tau, n_max=p.paper.fixed.n_max)
                cells.append(Cell(ds, "fixed_tree", f"fixed D={D} B={B} tau={tau}", cfg, p.protocol.T, L, p.models.dtype,
                                  {"D": D, "B": B, "tau": tau}))
    return cells


def dynatree_sweep_cells(p: Profile, root=None) -> list[Cell]:
    ds, L = "wikitext2", p.protocol.L_max["wikitext2"]
    base = tuned(p, "dynatree", ds, root)
    cells = [Cell(ds, "ar", "AR", None, p.protocol.T, L, p.models.dtype),
             Cell(ds, "fixed_tree", "Fixed Tree", tuned(p, "fixed_tree", ds, root), p.protocol.T, L, p.models.dtype, {"sweep": "reference"})]
    for th, tl in p.sweeps.threshold_pairs:
        cfg = dataclasses.replace(base, tau_h=th, tau_l=tl)
        cells.append(Cell(ds, "dynatree", f"dynatree tau_h={th} tau_l={tl}", cfg, p.protocol.T, L, p.models.dtype,
                          {"sweep": "thresholds", "tau_h": th, "tau_l": tl}))
    for b in p.sweeps.breadth_list:
        cfg = dataclasses.replace(base, B_min=b[0], B_mid=b[1], B_max=b[2])
        cells.append(Cell(ds, "dynatree", f"dynatree B={b}", cfg, p.protocol.T, L, p.models.dtype, {"sweep": "breadth", "B": list(b)}))
    for d0, dmax in p.sweeps.depth_list:
        cfg = dataclasses.replace(base, D0=d0, D_max=dmax)
        cells.append(Cell(ds, "dynatree", f"dynatree D0={d0} D_max={dmax}", cfg, p.protocol.T, L, p.models.dtype,
                          {"sweep": "depth", "D0": d0, "D_max": dmax}))
    return cells


def trees_cells(p: Profile, root=None) -> list[Cell]:
    """Notebook 09: the tree methods with their trees recorded (``trees_per_prompt`` iterations each)."""
    return [_cell(p, ds, m, p.protocol.T, p.protocol.L_max[ds], {"record_trees": p.extras.trees_per_prompt}, root=root)
            for ds in p.datasets for m in ("ar", "fixed_tree", "dynatree", "talon")]


def memory_cells(p: Profile, root=None) -> list[Cell]:
    """Table 5: peak memory, in runs of their own (never beside the timed ones)."""
    return [_cell(p, ds, m, p.protocol.T, p.protocol.L_max[ds], {"role": "memory"}, root=root)
            for ds in p.datasets for m in main_methods()]


EXPERIMENTS = {"tuning": tuning_cells, "main": main_cells, "ablation": ablation_cells, "length_scaling": length_cells,
               "prompt_length": prompt_length_cells, "fixed_sweep": fixed_sweep_cells,
               "dynatree_sweep": dynatree_sweep_cells, "trees": trees_cells, "memory": memory_cells}


def n_prompts(name: str, p: Profile, cell: Cell) -> int:
    if name == "tuning":
        return p.tuning.n
    if name == "trees":
        return p.extras.trees_n_prompts
    if name in ("main", "ablation"):
        return p.protocol.n_exact if cell.tags.get("role") == "exact" else p.protocol.n_prompts
    return p.sweeps.n_prompts  # sweeps and memory (a peak, not a mean: fewer prompts suffice)


def cell_key(name: str, p: Profile, c: Cell) -> str:
    seed = p.tuning.seed if name == "tuning" else p.protocol.seed
    m = p.models
    return record_key(profile=p.name, target=m.target, draft=m.draft, dtype=c.dtype, engine=str(m.engine),
                      kv=p.protocol.kv_mode, seed=seed, n=n_prompts(name, p, c), warmup=p.protocol.warmup, ds=c.dataset,
                      method=c.method, label=c.label, config=config_dict(c.config), T=c.T, L=c.L_max,
                      tags=c.tags, **({"draft_vocab": m.draft_vocab} if m.draft_vocab else {}),
                      **({"draft_lookup": True} if m.draft_lookup else {}))


def run(name: str, profile: Profile, rerun: bool = False, root: Path | None = None, render_only: bool = False) -> Path:
    """Run every cell of experiment ``name`` that its JSON lacks; returns the JSON path."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}")
    path = results_path(name, profile, root)
    store = ResultStore(path)
    if rerun and not render_only and (old := store.archive()):
        print(f"rerun: previous results kept at {old}")
    if profile.extras.cost_aware and name in ("tuning", "main"):  # the extension's cells are built from the costs,
        # measured again with the tuning they feed (main reuses the tuning's)
        run_costs(profile, rerun=rerun and name == "tuning", root=root, render_only=render_only)
    if profile.tuning.candidates is not None and name != "tuning":
        run("tuning", profile, root=root, render_only=render_only)
    cells = EXPERIMENTS[name](profile, root)
    todo = [(c, k) for c in cells if store.get(k := cell_key(name, profile, c)) is None]
    if not todo:
        return path
    if render_only:
        raise FileNotFoundError(f"render-only: {len(todo)} cell(s) of '{name}' are missing from {path}; "
                                "run without --render first")
    for dtype in dict.fromkeys(c.dtype for c, _ in todo):  # one model load per precision
        _measure_cells(name, profile, [(c, k) for c, k in todo if c.dtype == dtype], store, dtype)
    return path


def _measure_cells(name: str, p: Profile, todo: list, store: ResultStore, dtype: str) -> None:
    from tqdm.auto import tqdm

    from ..core.runners import as_runner
    from .weights import weights_info

    if p.models.threads:
        torch.set_num_threads(p.models.threads)
    target, draft, tok = p.load_pair(dtype)
    probe = BandwidthProbe(p.models.device)
    extra = {"weights": {"target": weights_info(p.models.target), "draft": weights_info(p.models.draft)},
             "bound": bound(as_runner(target).model, probe)}
    todo.sort(key=lambda ck: ck[0].config is not None)  # AR first: every other cell is compared with it
    rows = {k: store.partial(k) for _, k in todo}
    seed = p.tuning.seed if name == "tuning" else p.protocol.seed
    prompts: dict = {}

    def prompts_of(c: Cell, n: int):
        if (c.dataset, c.L_max, n) not in prompts:
            prompts[(c.dataset, c.L_max, n)] = load_prompts(c.dataset, tok, n, c.L_max, seed, p.protocol.data_source)
        return prompts[(c.dataset, c.L_max, n)]

    ar_ref: dict = {}  # (dataset, T, L_max) -> {prompt id: AR tokens}, from finished records or checkpointed rows
    for r in store.records + [{"method": "ar", "dataset": c.dataset, "T": c.T, "L_max": c.L_max, "dtype": c.dtype,
                               "rows": rows[k]} for c, k in todo if c.config is None]:
        if r["method"] == "ar" and r["dtype"] == dtype:
            ar_ref.setdefault((r["dataset"], r["T"], r["L_max"]), {}).update(
                {row["prompt_id"]: row["output_ids"] for row in r["rows"]})
    counts = {k: n_prompts(name, p, c) for c, k in todo}
    bar = tqdm(total=sum(counts.values()), initial=sum(map(len, rows.values())), desc=f"{p.name}/{name} {dtype}",
               unit="gen")
    # Interleaved: round i measures prompt i for every cell (AR first), so slow drifts of machine speed
    # hit all methods alike instead of whichever cells happen to run during a slow spell.
    for i in range(max(counts.values())):
        for c, k in todo:
            if len(rows[k]) > i or i >= counts[k]:
                continue
            ps = prompts_of(c, counts[k])
            bar.set_postfix_str(f"{c.dataset} {c.label[:40]} T={c.T} L={c.L_max}")
            if not rows[k]:
                measure.warm_up(c, target, draft, ps, p.protocol.warmup, p.protocol.kv_mode)
            ref = ar_ref.setdefault((c.dataset, c.T, c.L_max), {})
            row = measure.measure(c, target, draft, ps[i], p.protocol.kv_mode, ref.get(ps[i].id), probe,
                                  c.tags.get("record_trees", 0), memory=c.tags.get("role") == "memory")
            if c.config is None:
                ref[ps[i].id] = row["output_ids"]
            rows[k].append(row)
            store.save_partial(k, rows[k])
            bar.update(1)
    for c, k in todo:
        store.add(measure.make_record(c, k, p, prompts_of(c, counts[k]), rows[k], extra))
    bar.close()
