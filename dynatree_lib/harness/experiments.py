"""The paper's experiments as lists of benchmark cells, and one runner that logs them to JSON.

Tables 1-3 come from one run (``main``), as in the paper, on every workload's sealed test prompts, measured
``replicates`` times, each replicate in a process of its own; the other experiments each have a file. Every
notebook calls ``run(name, profile)``, which measures the cells its JSON lacks and returns the path;
``render_only=True`` refuses to measure anything (rebuilding tables and figures from JSON alone).

Tuning (profiles with candidates): every method family gets the same number of candidate settings, measured on
the tuning prompts, greedy and at the sampling experiment's temperature; ``tuning.tuned`` picks each family's
fastest candidate from ``tuning.json`` and every other experiment uses it. Design and diagnosis use the dev
prompts (the pair report, the tree drawings); the test prompts appear only in measured JSON.
"""
from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import methods as registry
from ..core.policies import FixedTreeConfig
from ..core.sampling import Sampling
from . import peers  # registers llama.cpp as a method
from .costs import run_costs
from .measure import Cell
from .profiles import Profile
from .store import ResultStore, config_dict, record_key, results_path
from .tuning import cost_aware, cost_candidates, tuned, tuned_families

NO_SKIP = "DynaTree + cost budget, every level drafted (ext.)"  # the extension with lookup_skip off
NO_RECORD = "DynaTree + cost budget, no copy record (ext.)"  # ... skipping on the copy weight alone (skip_window 0)
PAPER_DYNATREE = "DynaTree (paper settings)"
ALONE = " · network alone"  # label suffix of a control row: the draft without its context lookup
CONTROLS = ("linear", "fixed_tree", "dynatree", "dynatree_cost")  # methods shown with and without the lookup
GREEDY = Sampling()


def label(name: str) -> str:
    """What tables and plots call a registered method."""
    return registry.REGISTRY[name].label


def main_methods() -> tuple[str, ...]:
    """The methods of the main and memory tables: the paper's, the other seed systems, and any extension with a
    default setting (the cost-aware extension is built from the measured costs instead)."""
    ext = tuple(n for n in registry.names("extension") if registry.REGISTRY[n].paper is not None)
    return registry.names("paper") + registry.names("seed") + ext


def _cell(p: Profile, ws: str, family: str, T: int, L: int | None = None, tags: dict | None = None,
          dtype: str | None = None, root: Path | None = None, sampling: Sampling = GREEDY, split: str = "test") -> Cell:
    cfg = tuned(p, family, ws, root, sampling)
    return Cell(ws, family, label(family), cfg, T, p.L_max(ws) if L is None else L, dtype or p.models.dtype,
                dict(tags or {}), sampling, True, split)


def _four(p: Profile, ws: str, T: int, L: int, tags: dict | None = None, root=None) -> list[Cell]:
    """The paper's Table 1 methods (``methods.names("paper")``)."""
    return [_cell(p, ws, m, T, L, tags, root=root) for m in registry.names("paper")]


def _short(cfg) -> str:
    d = dataclasses.asdict(cfg)
    return " ".join(f"{k}={v}" for k, v in d.items() if k not in ("dynamic_breadth", "dynamic_depth", "history",
                                                                    "W", "a_star", "eta_D", "eta_h"))


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
            cells.append(Cell(ws, "ar", "AR", None, T, p.L_max(ws), p.models.dtype, dict(tags), s, True, "tuning"))
            for fam in tuned_families():
                for i, cfg in enumerate(p.tuning.candidates[fam]):
                    cells.append(Cell(ws, fam, f"{label(fam)} #{i}: {_short(cfg)}", cfg, T, p.L_max(ws), p.models.dtype,
                                      {"candidate": i, **tags}, s, True, "tuning"))
            for i, cfg in enumerate(cost):
                cells.append(Cell(ws, "dynatree_cost", f"{label('dynatree_cost')} #{i}: {_short(cfg.base)}", cfg, T,
                                  p.L_max(ws), p.models.dtype, {"candidate": i, **tags}, s, True, "tuning"))
    return cells


def extension_cells(p: Profile, ws: str, dtype: str, tags: dict, root, sampling: Sampling = GREEDY,
                    variants: bool = True) -> list[Cell]:
    """The cost-aware extension (built from the measured costs), and where the draft has a lookup, the same
    without its lookup skip (what the skipped forwards add) and skipping without the record of its copies."""
    if not p.extras.cost_aware:
        return []
    ext = cost_aware(p, ws, dtype, root, sampling)
    T, L = p.protocol.T, p.L_max(ws)
    cells = [Cell(ws, "dynatree_cost", label("dynatree_cost"), ext, T, L, dtype, {**tags, "extension": True}, sampling)]
    if variants and p.models.draft_lookup:
        cells.append(Cell(ws, "dynatree_cost", NO_SKIP, dataclasses.replace(ext, lookup_skip=1.0), T, L, dtype,
                          {**tags, "extension": True, "lookup_skip": False}, sampling))
        cells.append(Cell(ws, "dynatree_cost", NO_RECORD, dataclasses.replace(ext, skip_window=0), T, L, dtype,
                          {**tags, "extension": True, "skip_window": 0}, sampling))
    return cells


def controls(cells: list[Cell]) -> list[Cell]:
    """The same cells drafting with the network alone, for the methods in ``CONTROLS`` (their main rows only)."""
    return [dataclasses.replace(c, label=c.label + ALONE, lookup=False, tags={**c.tags, "control": True})
            for c in cells if c.method in CONTROLS and c.label in (label(c.method),)]


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
                row = [_cell(p, ws, m, p.protocol.T, None, tags, dtype, root) for m in main_methods()]
                if p.tuning.candidates is not None:
                    row.append(Cell(ws, "dynatree", PAPER_DYNATREE, p.method("dynatree", ws), p.protocol.T, p.L_max(ws),
                                    dtype, {**tags, "paper_settings": True}))
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
            if p.tuning.candidates is not None:
                cells.append(Cell(ws, "dynatree", PAPER_DYNATREE, p.method("dynatree", ws), p.protocol.T, p.L_max(ws),
                                  p.models.dtype, {**tags, "paper_settings": True}, s))
            cells += extension_cells(p, ws, p.models.dtype, tags, root, s, variants=False)
    return cells


def ablation_cells(p: Profile, root=None) -> list[Cell]:
    """The paper's Table 4 on WikiText-2: the fixed tree D=5, B=2 (the paper's baseline), the fixed tree that the
    tuned DynaTree reduces to (D = D0, B = B_mid), + dynamic breadth & depth, + history adaptation."""
    ws, T = "wikitext2", p.protocol.T
    full = tuned(p, "dynatree", ws, root)
    L, dt = p.L_max(ws), p.models.dtype
    paper = FixedTreeConfig(D=5, B=2, tau=full.tau, n_max=full.n_max)
    matched = FixedTreeConfig(D=full.D0, B=full.B_mid, tau=full.tau, n_max=full.n_max)
    return [Cell(ws, "ar", "AR", None, T, L, dt),
            Cell(ws, "fixed_tree", "Fixed Tree (D=5, B=2)", paper, T, L, dt, {"step": 0}),
            Cell(ws, "fixed_tree", f"Fixed Tree (D={full.D0}, B={full.B_mid}: tuned DynaTree's D0, B_mid)", matched,
                 T, L, dt, {"step": 0.5}),
            Cell(ws, "dynatree", "+ Dynamic Breadth & Depth", dataclasses.replace(full, history=False), T, L, dt,
                 {"step": 1}),
            Cell(ws, "dynatree", "+ History Adaptation", full, T, L, dt, {"step": 2})]


def length_cells(p: Profile, root=None) -> list[Cell]:
    return [c for T in p.sweeps.T_list for c in _four(p, "wikitext2", T, p.L_max("wikitext2"), {"T": T}, root)]


def prompt_length_cells(p: Profile, root=None) -> list[Cell]:
    return [c for L in p.sweeps.L_max_list for c in _four(p, "wikitext2", p.protocol.T, L, {"L_max": L}, root)]


def fixed_sweep_cells(p: Profile, root=None) -> list[Cell]:
    """The fixed tree's grid, plus the paper's main-table setting (D=8, B=3, tau=0.1) if the grid lacks it."""
    ws, L, g, T, dt = "wikitext2", p.L_max("wikitext2"), p.sweeps.fixed_grid, p.protocol.T, p.models.dtype
    grid = [(D, B, tau) for D in g["D"] for B in g["B"] for tau in g["tau"]]
    paper = (p.paper.fixed.D, p.paper.fixed.B, p.paper.fixed.tau)
    cells = [Cell(ws, "ar", "AR", None, T, L, dt)]
    for D, B, tau in grid + ([paper] if paper not in grid else []):
        cfg = FixedTreeConfig(D=D, B=B, tau=tau, n_max=p.paper.fixed.n_max)
        cells.append(Cell(ws, "fixed_tree", f"fixed D={D} B={B} tau={tau}", cfg, T, L, dt, {"D": D, "B": B, "tau": tau}))
    return cells


def dynatree_sweep_cells(p: Profile, root=None) -> list[Cell]:
    ws, L, T, dt = "wikitext2", p.L_max("wikitext2"), p.protocol.T, p.models.dtype
    base = tuned(p, "dynatree", ws, root)
    cells = [Cell(ws, "ar", "AR", None, T, L, dt),
             Cell(ws, "fixed_tree", "Fixed Tree", tuned(p, "fixed_tree", ws, root), T, L, dt, {"sweep": "reference"})]
    for th, tl in p.sweeps.threshold_pairs:
        cells.append(Cell(ws, "dynatree", f"dynatree tau_h={th} tau_l={tl}", dataclasses.replace(base, tau_h=th, tau_l=tl),
                          T, L, dt, {"sweep": "thresholds", "tau_h": th, "tau_l": tl}))
    for b in p.sweeps.breadth_list:
        cfg = dataclasses.replace(base, B_min=b[0], B_mid=b[1], B_max=b[2])
        cells.append(Cell(ws, "dynatree", f"dynatree B={b}", cfg, T, L, dt, {"sweep": "breadth", "B": list(b)}))
    for d0, dmax in p.sweeps.depth_list:
        cells.append(Cell(ws, "dynatree", f"dynatree D0={d0} D_max={dmax}", dataclasses.replace(base, D0=d0, D_max=dmax),
                          T, L, dt, {"sweep": "depth", "D0": d0, "D_max": dmax}))
    return cells


def trees_cells(p: Profile, root=None) -> list[Cell]:
    """Notebook 09: the tree methods with their trees recorded (``trees_per_prompt`` iterations each), on dev
    prompts (the drawings show them)."""
    return [_cell(p, ws, m, p.protocol.T, None, {"record_trees": p.extras.trees_per_prompt}, root=root, split="dev")
            for ws in p.workloads for m in ("ar", "fixed_tree", "dynatree", "talon")]


def memory_cells(p: Profile, root=None) -> list[Cell]:
    """Table 5: peak memory, each cell in a process of its own (``memory.measure_in_process``)."""
    return [_cell(p, ws, m, p.protocol.T, None, {"role": "memory"}, root=root)
            for ws in p.workloads for m in main_methods()]


def peers_cells(p: Profile, root=None) -> list[Cell]:
    """Notebook 12: llama.cpp's modes (``peers.PEERS``) beside our AR, DynaTree and the extension (without its
    variants), greedy on the main table's first prompts in the timed precision, each replicate in a fresh process;
    none where the profile runs no peers. Whether llama.cpp is built decides what ``run`` measures, not the cells."""
    if not p.extras.peers_n_prompts:
        return []
    cells, T = [], p.protocol.T
    for r in range(p.protocol.replicates):
        tags = {"role": "peer", **({"replicate": r} if r else {})}  # no replicate tag reads as replicate 0
        for ws in p.workloads:
            cells += [_cell(p, ws, m, T, None, tags, root=root) for m in ("ar", "dynatree")]
            cells += extension_cells(p, ws, p.models.dtype, tags, root, variants=False)
            cells += [Cell(ws, "llamacpp", lab, cfg, T, p.L_max(ws), p.models.dtype,
                           {**tags, "own_ar": lab == peers.OWN_AR}) for lab, cfg in peers.PEERS]
    return cells


EXPERIMENTS = {"tuning": tuning_cells, "main": main_cells, "sampling": sampling_cells, "ablation": ablation_cells,
               "length_scaling": length_cells, "prompt_length": prompt_length_cells, "fixed_sweep": fixed_sweep_cells,
               "dynatree_sweep": dynatree_sweep_cells, "trees": trees_cells, "memory": memory_cells,
               "peers": peers_cells}
IN_PROCESS = ("main", "peers")  # experiments whose replicates each run in a fresh process


def n_prompts(name: str, p: Profile, cell: Cell) -> int:
    """Prompts per cell: per continuation dataset, or per Spec-Bench category."""
    spec = cell.dataset == "spec_bench"
    if name == "tuning":
        return p.tuning.n_questions if spec else p.tuning.n
    if name == "trees":
        return 1 if spec else p.extras.trees_n_prompts
    if name == "memory":
        return 1
    if name == "peers":
        return p.extras.peers_n_questions if spec else p.extras.peers_n_prompts
    if cell.tags.get("role") == "exact":
        return 1 if spec else p.protocol.n_exact
    n = p.protocol.n_questions if spec else p.protocol.n_prompts
    if name in ("main", "sampling"):
        slow = registry.REGISTRY[cell.method].engine != "ours" or name == "sampling"
        return max(1, round(n * p.protocol.slow_share)) if slow else n
    return p.sweeps.n_prompts  # ablation and sweeps (WikiText-2)


def cell_key(name: str, p: Profile, c: Cell) -> str:
    seed = p.tuning.seed if name == "tuning" else p.protocol.seed
    m, s = p.models, c.sampling
    return record_key(profile=p.name, target=m.target, draft=m.draft, dtype=c.dtype, engine=str(m.engine),
                      kv=p.protocol.kv_mode, seed=seed, n=n_prompts(name, p, c), warmup=p.protocol.warmup,
                      ds=c.dataset, method=c.method, label=c.label, config=config_dict(c.config), T=c.T, L=c.L_max,
                      tags=c.tags, split=c.split, lookup=c.lookup and m.draft_lookup, temperature=s.temperature,
                      top_k=s.top_k, top_p=s.top_p, max_prompt=p.protocol.max_prompt,
                      **({"draft_vocab": m.draft_vocab} if m.draft_vocab else {}))


def missing(name: str, profile: Profile, root: Path | None = None, replicate: int | None = None) -> list:
    """(cell, key) of every cell of ``name`` (of one replicate, if given) that its JSON lacks."""
    store = ResultStore(results_path(name, profile, root))
    cells = [c for c in EXPERIMENTS[name](profile, root)
             if replicate is None or c.tags.get("replicate", 0) == replicate]
    return [(c, k) for c in cells if store.get(k := cell_key(name, profile, c)) is None]


def measures(name: str, profile: Profile, root: Path | None = None) -> bool:
    """Whether the profile has any cell of experiment ``name`` (a profile without temperatures samples nothing)."""
    return bool(EXPERIMENTS[name](profile, root))


def unmeasurable(cells: list[Cell]) -> dict[str, str]:
    """{method: what this machine lacks to measure it} for the cells' methods that cannot run here."""
    methods = dict.fromkeys(c.method for c in cells)
    return {m: why for m in methods if (why := registry.REGISTRY[m].unavailable()) is not None}


def measurable(name: str, todo: list, profile: Profile) -> list:
    """The missing (cell, key) pairs this machine can measure; says which it cannot, and why."""
    lacking = unmeasurable([c for c, _ in todo])
    for method, why in lacking.items():
        n = sum(c.method == method for c, _ in todo)
        print(f"{name}: {n} cell(s) of {method!r} not measured on this machine: {why}")
    return [(c, k) for c, k in todo if c.method not in lacking]


def run(name: str, profile: Profile, rerun: bool = False, root: Path | None = None, render_only: bool = False,
        replicate: int | None = None) -> Path:
    """Run every cell of experiment ``name`` that its JSON lacks; returns the JSON path. Replicated experiments
    (``IN_PROCESS``) measure each replicate in a fresh Python process unless ``replicate`` names one. Cells of a
    method this machine cannot run (``Method.unavailable``) are not measured, and an experiment holding such
    cells is not archived by ``rerun``: its committed records stay and render."""
    from . import runner

    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}")
    path = results_path(name, profile, root)
    if rerun and not render_only and (lacking := unmeasurable(EXPERIMENTS[name](profile, root))):
        print(f"rerun of {name!r} skipped, its records kept: this machine cannot measure {sorted(lacking)}")
        rerun = False
    if rerun and not render_only and (old := ResultStore(path).archive()):
        print(f"rerun: previous results kept at {old}")
    if profile.extras.cost_aware and name in ("tuning", "main", "sampling"):  # the extension's cells come from the
        # costs, measured again with the tuning they feed (the other experiments reuse the tuning's)
        run_costs(profile, rerun=rerun and name == "tuning", root=root, render_only=render_only)
    if profile.tuning.candidates is not None and name != "tuning":
        run("tuning", profile, root=root, render_only=render_only)
    todo = missing(name, profile, root, replicate)
    if todo and render_only:
        raise FileNotFoundError(f"render-only: {len(todo)} cell(s) of '{name}' are missing from {path}; "
                                "run without --render first")
    if not (todo := measurable(name, todo, profile)):
        return path
    if name == "memory":
        from .memory import run_memory

        run_memory(profile, todo, path)
    elif name in IN_PROCESS and replicate is None:
        for r in sorted({c.tags.get("replicate", 0) for c, _ in todo}):
            in_fresh_process(name, profile, root, r)
    else:
        counts = {k: n_prompts(name, profile, c) for c, k in todo}
        runner.measure_cells(name, profile, todo, path, counts)
    return path


def in_fresh_process(name: str, profile: Profile, root: Path | None, replicate: int) -> None:
    """Run one replicate of an experiment in a new Python process (its output streamed here)."""
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as f:
        pickle.dump((name, profile, root, replicate), f)
    cmd = [sys.executable, "-m", "dynatree_lib.harness.experiments", f.name]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            print(line, end="", flush=True)
    Path(f.name).unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"replicate {replicate} of {name!r} failed (exit {proc.returncode}); see the output above")


if __name__ == "__main__":  # one replicate, in its own process (``in_fresh_process``)
    _name, _profile, _root, _replicate = pickle.loads(Path(sys.argv[1]).read_bytes())
    run(_name, _profile, root=_root, replicate=_replicate)
