"""The paper's experiments as lists of benchmark cells, and one runner that logs them to JSON.

Tables 1-3 come from one run (``main``), as in the paper, on every workload's sealed test prompts, measured
``replicates`` times, each replicate in a process of its own; the other experiments each have a file. Every
notebook calls ``run(name, profile)``, which measures the cells its JSON lacks and returns the path;
``render_only=True`` refuses to measure anything (rebuilding tables and figures from JSON alone).

Tuning (profiles with candidates): every method family gets the same number of candidate settings, measured on
the tuning prompts, greedy and at the sampling experiment's temperature; ``tuning.tuned`` picks each family's
fastest candidate from ``tuning.json`` and every other experiment uses it. Design and diagnosis use the dev
prompts (the pair report, the tree drawings); the test prompts appear only in measured JSON.

A cell runs one registered method in one of its variants (``variants``); its record's key (``cell_key``) hashes the
method, the variant, the configuration, the tags and the protocol, never what tables call the cell.
"""
from __future__ import annotations

import dataclasses
import itertools
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

from ... import methods as registry
from ...core.policies.static import FixedTreeConfig
from ...core.sampling import Sampling
from ..measure import load
from ..peers import llamacpp as peers
from ..setup import variants as v
from .costs import run_costs
from .control import CONTROL, control_cells, control_prompts
from .frontier import FRONTIER, frontier_cells, frontier_profile
from ..measure.cell import Cell
from ..measure.bench import measurable, unmeasurable
from ..setup.profiles import Profile
from ..measure.store import ResultStore, archive_for_rerun, config_dict, record_key, results_path
from .tuning import cost_aware, cost_candidates, tuned, tuned_families
from .talon import (TALON, TALON_TUNING, head_profile, talon_T, talon_cells, talon_methods,  # noqa: F401
                               talon_profile, talon_tuning_cells)
from .vllm import (VLLM, VLLM_THROUGHPUT, VLLM_TUNING, run_vllm_throughput, vllm_cells,  # noqa: F401
                              vllm_profile, vllm_tuning_cells)
from ..setup.workloads import WIKITEXT2, count

GREEDY = Sampling()


def main_methods() -> tuple[str, ...]:
    """The methods of the main and memory tables: the paper's, the other seed systems, and any extension with a
    default setting (the cost-aware extension is built from the measured costs instead)."""
    ext = tuple(n for n in registry.names("extension") if registry.REGISTRY[n].study.paper is not None)
    return registry.names("paper") + registry.names("seed") + ext


def _cell(p: Profile, ws: str, method: str, T: int, L: int | None = None, tags: dict | None = None,
          dtype: str | None = None, root: Path | None = None, sampling: Sampling = GREEDY, split: str = "test") -> Cell:
    """``method``'s main cell: its tuned setting (the paper's where the profile does not tune it)."""
    return Cell(dataset=ws, method=method, config=tuned(p, method, ws, root, sampling), T=T,
                L_max=p.L_max(ws) if L is None else L, dtype=dtype or p.models.dtype, tags=dict(tags or {}),
                sampling=sampling, split=split)


def _four(p: Profile, ws: str, T: int, L: int, tags: dict | None = None, root=None) -> list[Cell]:
    """The paper's Table 1 methods (``methods.names("paper")``)."""
    return [_cell(p, ws, m, T, L, tags, root=root) for m in registry.names("paper")]


def _paper_settings(p: Profile, ws: str, dtype: str, tags: dict, sampling: Sampling = GREEDY) -> list[Cell]:
    """DynaTree with the paper's own settings, where the profile tunes (else its main cell has them)."""
    if p.tuning.candidates is None:
        return []
    return [Cell(dataset=ws, method=registry.DYNATREE, variant=v.PAPER_SETTINGS, config=p.method(registry.DYNATREE, ws),
                 T=p.protocol.T, L_max=p.L_max(ws), dtype=dtype, tags={**tags, "paper_settings": True},
                 sampling=sampling)]


def tuning_families() -> tuple[str, ...]:
    """The families the tuning experiment measures: every tuned one but the opt-in methods (``methods.Method``'s
    role), whose candidates wait for an experiment that names them."""
    return tuple(f for f in tuned_families() if f not in registry.names("opt_in"))


def tuning_cells(p: Profile, root=None) -> list[Cell]:
    """AR plus each family's candidates (an equal number each), on the tuning prompts: greedy, and at the first
    of the sampling experiment's temperatures."""
    if p.tuning.candidates is None:
        return []
    T = p.tuning.T or p.protocol.T
    cost = cost_candidates(p, root) if p.extras.cost_aware else ()
    cells = []
    for s in (GREEDY,) + tuple(Sampling(t) for t in p.protocol.temperatures[:1]):
        for ws in p.workloads:
            tags = {} if s.greedy else {"temperature": s.temperature}
            at = dict(dataset=ws, T=T, L_max=p.L_max(ws), dtype=p.models.dtype, sampling=s, split="tuning")
            cells.append(Cell(method=registry.AR, config=None, tags=dict(tags), **at))
            candidates = [(fam, cfg) for fam in tuning_families() for cfg in p.tuning.candidates[fam]]
            candidates += [(registry.DYNATREE_COST, cfg) for cfg in cost]
            for fam, group in itertools.groupby(candidates, key=lambda fc: fc[0]):
                cells += [Cell(method=fam, variant=v.CANDIDATE, config=cfg, tags={"candidate": i, **tags}, **at)
                          for i, (_, cfg) in enumerate(group)]
    return cells


def extension_cells(p: Profile, ws: str, dtype: str, tags: dict, root, sampling: Sampling = GREEDY,
                    variants: bool = True) -> list[Cell]:
    """The cost-aware extension (built from the measured costs), and where the draft has a lookup, the same
    without its lookup skip (what the skipped forwards add) and skipping without the record of its copies."""
    if not p.extras.cost_aware:
        return []
    ext = cost_aware(p, ws, dtype, root, sampling)
    tags = {**tags, "extension": True}
    at = dict(dataset=ws, method=registry.DYNATREE_COST, T=p.protocol.T, L_max=p.L_max(ws), dtype=dtype,
              sampling=sampling)
    cells = [Cell(config=ext, tags=tags, **at)]
    if variants and p.models.draft_lookup:
        cells.append(Cell(variant=v.EVERY_LEVEL_DRAFTED, config=dataclasses.replace(ext, lookup_skip=1.0),
                          tags={**tags, "lookup_skip": False}, **at))
        cells.append(Cell(variant=v.NO_COPY_RECORD, config=dataclasses.replace(ext, skip_window=0),
                          tags={**tags, "skip_window": 0}, **at))
    return cells


def controls(cells: list[Cell]) -> list[Cell]:
    """The same cells drafting with the network alone, for the methods that declare ``controls`` (their main rows
    only)."""
    return [dataclasses.replace(c, variant=v.NETWORK_ALONE, lookup=False, tags={**c.tags, "control": True})
            for c in cells if registry.REGISTRY[c.method].study.controls and c.variant == v.MAIN]


def main_cells(p: Profile, root=None) -> list[Cell]:
    """Tables 1-3: every method (tuned where the profile tunes), DynaTree with the paper's settings and the
    extension, with the draft network alone beside each drafting method where the draft has a lookup, in the
    timed precision, for every replicate; and once in ``exact_dtype`` (fewer prompts), where every exact
    method must equal AR."""
    cells = []
    for dtype, role in ((p.models.dtype, "timed"), (p.models.exact_dtype, "exact")):
        if dtype is None or (role == "exact" and dtype == p.models.dtype):
            continue
        for r in range(p.protocol.replicates if role == "timed" else 1):
            tags = {"role": role, "replicate": r}
            for ws in p.workloads:
                row = [_cell(p, ws, m, p.protocol.T, L=None, tags=tags, dtype=dtype, root=root) for m in main_methods()]
                row += _paper_settings(p, ws, dtype, tags)
                row += extension_cells(p, ws, dtype, tags, root)
                cells += row + (controls(row) if p.models.draft_lookup else [])
    return cells


def sampling_cells(p: Profile, root=None) -> list[Cell]:
    """Sampling at each of the protocol's temperatures: every method (tuned at that temperature where the tuning
    ran at it, else greedy-tuned), DynaTree with the paper's settings and the extension, on the test prompts."""
    cells = []
    for t in p.protocol.temperatures:
        s, tags = Sampling(t), {"temperature": t}
        for ws in p.workloads:
            cells += [_cell(p, ws, m, p.protocol.T, None, tags, root=root, sampling=s) for m in main_methods()]
            cells += _paper_settings(p, ws, p.models.dtype, tags, s)
            cells += extension_cells(p, ws, p.models.dtype, tags, root, s, variants=False)
    return cells


def ablation_cells(p: Profile, root=None) -> list[Cell]:
    """The paper's Table 4 on the sweeps' workload: the fixed tree D=5, B=2 (the paper's baseline), the fixed tree
    that the tuned DynaTree reduces to (D = D0, B = B_mid), + dynamic breadth & depth, + history adaptation."""
    ws = p.sweeps.workload
    full = tuned(p, registry.DYNATREE, ws, root)
    at = dict(dataset=ws, T=p.protocol.T, L_max=p.L_max(ws), dtype=p.models.dtype)
    fixed = dict(method=registry.FIXED_TREE, **at)
    paper = FixedTreeConfig(D=5, B=2, tau=full.tau, n_max=full.n_max)
    matched = FixedTreeConfig(D=full.D0, B=full.B_mid, tau=full.tau, n_max=full.n_max)
    return [Cell(method=registry.AR, config=None, **at),
            Cell(variant=v.ABLATION_FIXED, config=paper, tags={"step": 0}, **fixed),
            Cell(variant=v.ABLATION_MATCHED, config=matched, tags={"step": 0.5}, **fixed),
            Cell(method=registry.DYNATREE, variant=v.ABLATION_DYNAMIC, config=dataclasses.replace(full, history=False),
                 tags={"step": 1}, **at),
            Cell(method=registry.DYNATREE, variant=v.ABLATION_HISTORY, config=full, tags={"step": 2}, **at)]


def length_cells(p: Profile, root=None) -> list[Cell]:
    ws = p.sweeps.workload
    return [c for T in p.sweeps.T_list for c in _four(p, ws, T, p.L_max(ws), {"T": T}, root)]


def prompt_length_cells(p: Profile, root=None) -> list[Cell]:
    return [c for L in p.sweeps.L_max_list for c in _four(p, p.sweeps.workload, p.protocol.T, L, {"L_max": L}, root)]


def fixed_sweep_cells(p: Profile, root=None) -> list[Cell]:
    """The fixed tree's grid, plus the paper's main-table setting (D=8, B=3, tau=0.1) if the grid lacks it."""
    ws, g = p.sweeps.workload, p.sweeps.fixed_grid
    at = dict(dataset=ws, T=p.protocol.T, L_max=p.L_max(ws), dtype=p.models.dtype)
    grid = [(D, B, tau) for D in g["D"] for B in g["B"] for tau in g["tau"]]
    paper = (p.paper.fixed.D, p.paper.fixed.B, p.paper.fixed.tau)
    cells = [Cell(method=registry.AR, config=None, **at)]
    for D, B, tau in grid + ([paper] if paper not in grid else []):
        cfg = FixedTreeConfig(D=D, B=B, tau=tau, n_max=p.paper.fixed.n_max)
        cells.append(Cell(method=registry.FIXED_TREE, variant=v.FIXED_GRID, config=cfg, tags={"D": D, "B": B, "tau": tau},
                          **at))
    return cells


def dynatree_sweep_cells(p: Profile, root=None) -> list[Cell]:
    """DynaTree's sensitivity: its tuned setting with other thresholds, breadths and depths, beside the tuned fixed
    tree."""
    ws = p.sweeps.workload
    at = dict(dataset=ws, T=p.protocol.T, L_max=p.L_max(ws), dtype=p.models.dtype)
    dt = dict(method=registry.DYNATREE, **at)
    base = tuned(p, registry.DYNATREE, ws, root)
    cells = [Cell(method=registry.AR, config=None, **at),
             Cell(method=registry.FIXED_TREE, config=tuned(p, registry.FIXED_TREE, ws, root),
                  tags={"sweep": "reference"}, **at)]
    for th, tl in p.sweeps.threshold_pairs:
        cells.append(Cell(variant=v.SWEEP_THRESHOLDS, config=dataclasses.replace(base, tau_h=th, tau_l=tl),
                          tags={"sweep": "thresholds", "tau_h": th, "tau_l": tl}, **dt))
    for b in p.sweeps.breadth_list:
        cfg = dataclasses.replace(base, B_min=b[0], B_mid=b[1], B_max=b[2])
        cells.append(Cell(variant=v.SWEEP_BREADTH, config=cfg, tags={"sweep": "breadth", "B": list(b)}, **dt))
    for d0, dmax in p.sweeps.depth_list:
        cells.append(Cell(variant=v.SWEEP_DEPTH, config=dataclasses.replace(base, D0=d0, D_max=dmax),
                          tags={"sweep": "depth", "D0": d0, "D_max": dmax}, **dt))
    return cells


def trees_cells(p: Profile, root=None) -> list[Cell]:
    """Notebook 09: AR and the methods that draft trees (``Study.trees``) of the paper and the seed systems, with
    their trees recorded (``trees_per_prompt`` iterations each), on dev prompts (the drawings show them)."""
    methods = (registry.AR,) + tuple(m for m in registry.names("paper") + registry.names("seed")
                                     if registry.REGISTRY[m].study.trees)
    return [_cell(p, ws, m, p.protocol.T, None, {"record_trees": p.extras.trees_per_prompt}, root=root, split="dev")
            for ws in p.workloads for m in methods]


def memory_cells(p: Profile, root=None) -> list[Cell]:
    """Table 5: peak memory, each cell in a process of its own (``memory.measure_in_process``)."""
    return [_cell(p, ws, m, p.protocol.T, None, {"role": "memory"}, root=root)
            for ws in p.workloads for m in main_methods()]


def experiment_profile(name: str, p: Profile) -> Profile:
    """The profile an experiment measures with: the head's for ``heads``, ``talon`` and its tuning
    (``talon_profile``), the frontier (``frontier_profile``) and the vLLM rows where ``p`` has one, else ``p``
    itself."""
    if name in (VLLM, VLLM_TUNING):
        return vllm_profile(p)
    if name == FRONTIER:
        return frontier_profile(p) if p.extras.head else p
    if not p.extras.head or name not in ("heads", TALON, TALON_TUNING):
        return p
    return head_profile(p) if name == "heads" else talon_profile(p)


def head_methods() -> tuple[str, ...]:
    """The methods a feature head drafts for: every exact method of our loop that drafts, the extension aside
    (its cut is built from the forward costs measured with the profile's own draft), and the opt-in ones (measured
    only where an experiment names them)."""
    return tuple(n for n, m in registry.REGISTRY.items()
                 if m.drafts and m.impl == "ours" and m.exact and m.study.role not in ("extension", "opt_in"))


def head_cells(p: Profile, root=None) -> list[Cell]:
    """Notebook 13 (issue 56): AR and every ``head_methods`` method drafting with the profile's feature head,
    greedy (with the draft network alone beside the methods that declare ``controls``) and at each sampling
    temperature, on ``extras.head_n_prompts`` test prompts per workload, each replicate in a fresh process. Settings:
    the profile's tuned ones, as tuned with its own draft (the head is not tuned separately)."""
    if not p.extras.head:
        return []
    cells = []
    for r in range(p.protocol.replicates):
        for ws in p.workloads:
            for s in (GREEDY, *map(Sampling, p.protocol.temperatures)):
                tags = {"role": "head", "replicate": r, "temperature": s.temperature}
                row = [_cell(p, ws, m, p.protocol.T, None, tags, root=root, sampling=s)
                       for m in (registry.AR, *head_methods())]
                cells += row + (controls(row) if s is GREEDY else [])
    return cells


def peers_cells(p: Profile, root=None) -> list[Cell]:
    """Notebook 12: llama.cpp's modes (``peers.PEERS``, registered here) beside our AR, DynaTree and the extension
    (without its variants), greedy on the main table's first prompts in the timed precision, each replicate in a
    fresh process; none where the profile runs no peers. Whether llama.cpp is built decides what ``run`` measures,
    not the cells."""
    if not p.extras.peers_n_prompts:
        return []
    cells, T = [], p.protocol.T
    for r in range(p.protocol.replicates):
        tags = {"role": "peer", **({"replicate": r} if r else {})}  # no replicate tag reads as replicate 0
        for ws in p.workloads:
            cells += [_cell(p, ws, m, T, None, tags, root=root) for m in (registry.AR, registry.DYNATREE)]
            cells += extension_cells(p, ws, p.models.dtype, tags, root, variants=False)
            cells += [Cell(dataset=ws, method=peers.METHOD, variant=mode.variant, config=mode.config, T=T,
                           L_max=p.L_max(ws), dtype=p.models.dtype, tags={**tags, "own_ar": mode is peers.PEERS[0]})
                      for mode in peers.PEERS]
    return cells


EXPERIMENTS = {"tuning": tuning_cells, "main": main_cells, "sampling": sampling_cells, "ablation": ablation_cells,
               "length_scaling": length_cells, "prompt_length": prompt_length_cells, "fixed_sweep": fixed_sweep_cells,
               "dynatree_sweep": dynatree_sweep_cells, "trees": trees_cells, "memory": memory_cells,
               "peers": peers_cells, "heads": head_cells, TALON: talon_cells,
               TALON_TUNING: talon_tuning_cells, VLLM: vllm_cells, VLLM_TUNING: vllm_tuning_cells,
               FRONTIER: frontier_cells, CONTROL: control_cells}
IN_PROCESS = ("main", "peers", "heads", TALON, VLLM, CONTROL)  # experiments whose replicates each run in a fresh process
MEMORY_HEAD_WORKLOAD, MEMORY_HEAD_REPEATS = WIKITEXT2, 3


def run_memory_head(profile: Profile, rerun: bool = False, root: Path | None = None,
                    render_only: bool = False) -> Path:
    """Issue 56's memory target: AR and DynaTree on v4, DynaTree on the head, as notebook 08 measures memory (each cell
    in ``MEMORY_HEAD_REPEATS`` fresh processes, one row each) on the first WikiText-2 test prompt."""
    from .head_reports import with_head
    from ..measure.memory import run_memory

    path = results_path("memory_head", profile, root)
    archive_for_rerun(path, rerun, render_only)
    store, todo = ResultStore(path), []
    for p, methods in ((profile, (registry.AR, registry.DYNATREE)), (with_head(profile), (registry.DYNATREE,))):
        cells = [(c, cell_key("memory", p, c)) for c in memory_cells(p)
                 if c.dataset == MEMORY_HEAD_WORKLOAD and c.method in methods]
        todo.append((p, [(c, k) for c, k in cells if store.get(k) is None]))
    if any(cells for _, cells in todo) and render_only:
        raise FileNotFoundError(f"render-only: cells of 'memory_head' are missing from {path}; run without --render")
    for p, cells in todo:
        if cells:
            check_machine(p)
            run_memory(p, cells, path, MEMORY_HEAD_REPEATS)
    return path


def run_pair_eagle3(profile: Profile, rerun: bool = False, root: Path | None = None,
                    render_only: bool = False) -> Path:
    """Notebook 00's pair report of the profile's feature head (``pair_eagle3.json``)."""
    from .head_reports import with_head
    from .pair import run_pair

    return run_pair(with_head(profile), rerun=rerun, root=root, render_only=render_only, name="pair_eagle3")


def reports() -> dict:
    """The experiments that make one document each (not a table of cells), by name: each is
    ``fn(profile, rerun=False, root=None, render_only=False) -> Path``."""
    from ..authors.code import run_authors_code, run_authors_code_history
    from .head_reports import run_head_cost, run_head_tree_depth
    from ..peers.llamacpp_eagle3 import run_llamacpp_eagle3
    from .matmul_costs import run_matmuls
    from .pair import run_pair

    return {"costs": run_costs, "pair": run_pair, "pair_eagle3": run_pair_eagle3, "head_cost": run_head_cost,
            "head_tree_depth": run_head_tree_depth, "memory_head": run_memory_head, "matmuls": run_matmuls,
            "authors_code": run_authors_code, "authors_code_history": run_authors_code_history,
            "llamacpp_eagle3": run_llamacpp_eagle3, VLLM_THROUGHPUT: run_vllm_throughput}


def n_prompts(name: str, p: Profile, cell: Cell) -> int:
    """Prompts per cell: per continuation dataset, or per category of a workload with categories."""
    ws = cell.dataset
    if name in ("tuning", TALON_TUNING, VLLM_TUNING):
        return count(ws, p.tuning.n, p.tuning.n_questions)
    if name == "trees":
        return count(ws, p.extras.trees_n_prompts, 1)
    if name == "memory":
        return 1
    if name == "peers":
        return count(ws, p.extras.peers_n_prompts, p.extras.peers_n_questions)
    if name == VLLM:
        return count(ws, p.extras.vllm_n_prompts, p.extras.vllm_n_questions)
    if name == "heads":
        return count(ws, p.extras.head_n_prompts, p.extras.head_n_questions)
    if name == TALON:
        return count(ws, p.extras.talon_n_prompts, p.extras.talon_n_questions)
    if name == FRONTIER:
        return count(ws, p.extras.frontier_n_prompts, p.extras.frontier_n_questions)
    if name == CONTROL:
        return control_prompts(p, cell)
    if cell.tags.get("role") == "exact":
        return count(ws, p.protocol.n_exact, 1)
    n = count(ws, p.protocol.n_prompts, p.protocol.n_questions)
    if name in ("main", "sampling"):
        slow = registry.REGISTRY[cell.method].impl != "ours" or name == "sampling"
        return max(1, round(n * p.protocol.slow_share)) if slow else n
    return p.sweeps.n_prompts  # ablation and sweeps (WikiText-2)


def cell_key(name: str, p: Profile, c: Cell) -> str:
    """A cell's record key in experiment ``name``: a hash of everything that defines the cell (``key_parts``)."""
    return record_key(**key_parts(name, p, c))


def key_parts(name: str, p: Profile, c: Cell) -> dict:
    """What a record key hashes: the profile's models and protocol, the cell's method, variant, configuration,
    tags, workload, lengths, precision and sampling law; never what tables call it."""
    m, s = p.models, c.sampling
    return dict(profile=p.name, target=m.target, draft=c.draft or m.draft, dtype=c.dtype, engine=str(m.engine),
                kv=p.protocol.kv_mode, seed=p.prompt_seed(c.split), n=n_prompts(name, p, c), warmup=p.protocol.warmup,
                ds=c.dataset, method=c.method, variant=c.variant, config=config_dict(c.config), T=c.T, L=c.L_max,
                tags=c.tags, split=c.split, lookup=c.lookup and m.draft_lookup, temperature=s.temperature,
                top_k=s.top_k, top_p=s.top_p, max_prompt=p.protocol.max_prompt,
                **({"draft_vocab": m.draft_vocab} if m.draft_vocab else {}),
                **({"control": config_dict(c.control)} if c.control is not None else {}))


def missing(name: str, profile: Profile, root: Path | None = None, replicate: int | None = None) -> list:
    """(cell, key) of every cell of ``name`` (of one replicate, if given) that its JSON lacks."""
    profile = experiment_profile(name, profile)
    store = ResultStore(results_path(name, profile, root))
    cells = [c for c in EXPERIMENTS[name](profile, root)
             if replicate is None or c.tags.get("replicate", 0) == replicate]
    return [(c, k) for c in cells if store.get(k := cell_key(name, profile, c)) is None]


def measures(name: str, profile: Profile, root: Path | None = None) -> bool:
    """Whether the profile has any cell of experiment ``name`` (a profile without temperatures samples nothing)."""
    return bool(EXPERIMENTS[name](profile, root))


def tunes_here(tuning: str, profile: Profile, root: Path | None = None) -> bool:
    """Whether an experiment runs its tuning first: always on the reference machine; on another machine kind only
    where that kind's tuning was begun (``bench --experiment <tuning> --set machine=...``), else it adopts the
    reference's settings and says so (``tuning.machine_tuning``)."""
    return profile.models.machine is None or results_path(tuning, profile, root).exists()


def run(name: str, profile: Profile, rerun: bool = False, root: Path | None = None, render_only: bool = False,
        replicate: int | None = None) -> Path:
    """Run every cell of experiment ``name`` that its JSON lacks; returns the JSON path. Replicated experiments
    (``IN_PROCESS``) measure each replicate in a fresh Python process unless ``replicate`` names one. Cells of a
    method this machine cannot run (``Method.unavailable``) are not measured, and an experiment holding such
    cells is not archived by ``rerun``: its committed records stay and render."""
    from ..measure import bench as runner

    if name in reports():
        return reports()[name](profile, rerun=rerun, root=root, render_only=render_only)
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS) + sorted(reports())}")
    path = results_path(name, profile, root)
    if rerun and not render_only and (lacking := unmeasurable(EXPERIMENTS[name](profile, root))):
        print(f"rerun of {name!r} skipped, its records kept: this machine cannot measure {sorted(lacking)}")
        rerun = False
    archive_for_rerun(path, rerun, render_only)
    if profile.extras.cost_aware and name in ("tuning", "main", "sampling"):  # the extension's cells come from the
        # costs, measured again with the tuning they feed (the other experiments reuse the tuning's)
        run_costs(profile, rerun=rerun and name == "tuning", root=root, render_only=render_only)
    if profile.tuning.candidates is not None and name not in ("tuning", TALON, TALON_TUNING, VLLM, VLLM_TUNING, FRONTIER) and \
            tunes_here("tuning", profile, root):
        run("tuning", profile, root=root, render_only=render_only)
    if name == TALON and measures(TALON_TUNING, profile, root) and tunes_here(TALON_TUNING, profile, root):
        run(TALON_TUNING, profile, root=root, render_only=render_only)  # its rows' settings: their own tuning
    if name == VLLM and measures(VLLM_TUNING, profile, root) and tunes_here(VLLM_TUNING, profile, root):
        run(VLLM_TUNING, profile, root=root, render_only=render_only)
    todo = missing(name, profile, root, replicate)
    if todo and render_only:
        raise FileNotFoundError(f"render-only: {len(todo)} cell(s) of '{name}' are missing from {path}; "
                                "run without --render first")
    if not (todo := measurable(name, todo, profile)):
        return path
    check_machine(profile)
    load.guard(profile, f"{profile.name}/{name}")
    if name == "memory":
        from ..measure.memory import run_memory

        run_memory(profile, todo, path)
    elif name in IN_PROCESS and replicate is None:
        for r in sorted({c.tags.get("replicate", 0) for c, _ in todo}):
            in_fresh_process(name, profile, root, r)
    else:
        measuring = experiment_profile(name, profile)
        counts = {k: n_prompts(name, measuring, c) for c, k in todo}
        runner.measure_cells(name, measuring, todo, path, counts)
    return path


def check_machine(profile: Profile) -> None:
    """Refuse to measure a profile named for another machine kind than this one (``Models.machine``)."""
    from ..setup.machine import here

    if profile.models.machine is not None and profile.models.machine != here():
        raise ValueError(f"machine={profile.models.machine!r} names the records of that machine kind, but this "
                         f"machine is {here()!r}: measure with --set machine={here()} (or without machine on the "
                         "profile's reference machine)")


def in_fresh_process(name: str, profile: Profile, root: Path | None, replicate: int) -> None:
    """Run one replicate of an experiment in a new Python process (its output streamed here), part of this run
    (``load.child_env``)."""
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as f:
        pickle.dump((name, profile, root, replicate), f)
    cmd = [sys.executable, "-m", "dynatree_lib.harness.experiments.catalog", f.name]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=load.child_env()) as proc:
        for line in proc.stdout:
            print(line, end="", flush=True)
    Path(f.name).unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"replicate {replicate} of {name!r} failed (exit {proc.returncode}); see the output above")


if __name__ == "__main__":  # one replicate, in its own process (``in_fresh_process``)
    _name, _profile, _root, _replicate = pickle.loads(Path(sys.argv[1]).read_bytes())
    run(_name, _profile, root=_root, replicate=_replicate)
