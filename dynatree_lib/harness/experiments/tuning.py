"""Which setting each method runs with: the fastest equal-budget tuning candidate from the logged JSON, the paper's
setting where a profile does not tune, and the cost-aware extension built from the measured forward costs.

Tuning runs greedy and again at a sampling temperature (the tuning experiment's cells); a setting is picked from
the records of the same workload, precision and sampling law (greedy records serve every temperature the tuning
did not run at). The tuning experiment itself (``Tuning``) lives here too: its cells are the candidates.
"""
from __future__ import annotations

import functools
import itertools
import json
import sys
from pathlib import Path

from ... import methods as registry
from ...core.sampling import Sampling
from ...extensions.control import ControlConfig
from ...extensions.cost_aware import CostAwareConfig
from .costs import costs_first, predict_iteration, stale
from ..setup.machine import here, kind_of_record
from ..setup.profiles import Profile
from ..measure.store import config_dict, results_path
from ..setup.weights import is_head, weights_info
from ..setup import variants as v
from ..measure.cell import Cell
from .catalog import PicksSettings, experiment, get

GREEDY = Sampling()


def tuned_families() -> tuple[str, ...]:
    return tuple(n for n, m in registry.REGISTRY.items() if m.study.candidates)


def tuned(p: Profile, family: str, workload: str, root: Path | None = None, sampling: Sampling = GREEDY):
    """The family's setting for ``workload``: the fastest tuning candidate (from the logged JSON), or the paper's
    setting where the profile does not tune the family; a method declaring ``tuning_from`` adopts that method's
    tuned setting into its paper setting (``Study.adopt``) where the profile tunes."""
    if p.tuning.candidates is None or family not in tuned_families():
        study = registry.REGISTRY[family].study
        if study.tuning_from is not None and p.tuning.candidates is not None:
            return study.adopt(p.method(family, workload), tuned(p, study.tuning_from, workload, root, sampling))
        return p.method(family, workload)
    return fastest(p, family, workload, p.tuning.candidates[family], root, sampling=sampling)


@functools.lru_cache(maxsize=None)
def warn_once(message: str, stream=None) -> None:
    print(message, file=stream)


class NotTuned(ValueError):
    """No tuning is logged for the candidates this code would tune: the tuning file is missing, or holds only
    other candidates' records (an older code's, or another precision's); or the forward costs the tuning
    measures first (costs.json), which the cost-aware extension's candidates are made from, are missing."""


def fastest(p: Profile, family: str, workload: str, candidates, root: Path | None, *, sampling: Sampling = GREEDY,
            experiment: str = "tuning", draft: str | None = None):
    """The candidate with the highest mean throughput among ``family``'s records in ``experiment`` (the tuning
    experiment, or notebook 14's tuning on the heads) on ``workload`` at this precision and sampling law (the greedy
    records where the tuning did not run at that temperature); where ``draft`` is given, only the records drafted
    with it (a head tuned beside others in one file). Tuned on the machine at hand where it was (``machine_tuning``).
    """
    path = machine_tuning(p, experiment, root)
    if not path.exists():
        raise NotTuned(f"{path} is missing: run the {experiment} experiment first (notebook "
                       f"{get(experiment).notebook} does)")
    configs = [config_dict(c) for c in candidates]
    # only this code's candidates on tuning prompts: a file can still hold an older tuning's records
    recs = [r for r in json.loads(path.read_text())["records"]
            if r["dataset"] == workload and r["method"] == family and r["dtype"] == p.models.dtype
            and r.get("split") == "tuning" and r["config"] in configs and draft in (None, r["draft"])]
    at = [r for r in recs if r.get("temperature", 0.0) == sampling.temperature]
    recs = at or [r for r in recs if r.get("temperature", 0.0) == 0.0]
    if not recs:
        raise NotTuned(f"{path} holds no tuning records of this code's {family} candidates on {workload} at "
                       f"{p.models.dtype}{f' drafted with {draft}' if draft else ''}; run the {experiment} experiment "
                       "(--rerun if the candidates changed)")
    weights = weights_info(draft or p.models.draft)
    mine = [r for r in recs if r.get("weights", {}).get("draft") == weights]
    if not mine and (draft or not is_head(p.models.draft)):  # a head adopts its profile's tuning (``head_cells``)
        warn_once(f"{path.name}: {family} on {workload} is tuned with an earlier draft's records (the draft was "
                  "rebuilt since); `--rerun` tunes it again")
    recs = mine or recs
    best = max(recs, key=lambda r: r["aggregate"]["tps"]["mean"])
    tuned_on, at_hand = kind_of_record(best.get("environment", {})), here()
    if tuned_on not in (None, at_hand):
        warn_once(f"{path}: {family} on {workload} was tuned on {tuned_on}; this machine is {at_hand}, where another "
                  f"setting may be fastest (bench --experiment {experiment} --set machine={at_hand} tunes it here)",
                  sys.stderr)  # stderr: a render on another machine kind shows the same notebook
    return candidates[configs.index(best["config"])]


def machine_tuning(p: Profile, experiment: str, root: Path | None) -> Path:
    """The tuning file a profile reads: its own folder's; for a machine kind's folder without one, the reference
    machine's (``fastest`` warns that it was tuned elsewhere)."""
    path = results_path(experiment, p, root)
    if path.exists() or p.models.machine is None:
        return path
    return results_path(experiment, p.on_reference_machine(), root)


def measured_curves(p: Profile, dtype: str, root: Path | None) -> dict:
    """The forward-cost curves this profile measured in ``dtype`` (costs.json), refused when missing or stale."""
    path = results_path("costs", p, root)
    if not path.exists():
        raise NotTuned(f"{path} is missing: the cost-aware extension needs the measured forward costs (the tuning "
                       "experiment measures them first: notebook 01, or harness.experiments.costs.run_costs)")
    if how := stale(path, str(p.models.engine)):
        raise NotTuned(f"{path} {how}, the profile runs {p.models.engine!r}: `./run_all.sh {p.name}` measures "
                       "the costs again")
    return json.loads(path.read_text())["curves"][dtype]


def verify_curve(curves: dict) -> tuple:
    """fwd_target(k) as (k, ms) pairs, k ascending, as ``CostAwareConfig.verify_ms`` takes it."""
    return tuple((int(k), round(ms, 3)) for k, ms in sorted(curves["target"].items(), key=lambda kv: int(kv[0])))


def cost_curve(p: Profile, dtype: str, root: Path | None) -> tuple[tuple, float, float]:
    """What this profile measured in ``dtype`` (costs.json), as ``CostAwareConfig`` takes it: fwd_target(k)
    as (k, ms) pairs, one further drafting level, and the rest of an iteration (``costs``' terms)."""
    curves = measured_curves(p, dtype, root)
    # notebook 03's iteration, one node a level: drafting one level (its first forward follows the target's),
    # then two; the difference is a further level, the first level plus the commit the rest of an iteration
    one, _, commit = predict_iteration(curves, 1, 1, 1, 1.0)
    two = predict_iteration(curves, 2, 2, 2, 1.0)[0]
    return verify_curve(curves), round(two - one, 3), round(one + commit, 3)


def head_cost_curve(p: Profile, dtype: str, root: Path | None) -> tuple[tuple, float, float]:
    """``cost_curve`` for the profile's feature head (``extras.head``): the target's verification curve and the loop's
    terms as measured (costs.json), each drafting level, the catch-up after the target's forward included, priced by
    the head's measured step (the ``head_cost`` experiment's head_cost.json: its median share of the target's one-token
    forward)."""
    curves, share = measured_curves(p, dtype, root), head_share(p, root)
    verify, loop = verify_curve(curves), curves["loop"]
    level = share * dict(verify)[1] + loop["level"]
    return verify, round(level, 3), round(level + loop["commit"], 3)


def control_config(p: Profile, dtype: str, head: bool, root: Path | None = None) -> ControlConfig:
    """The controller priced by what this profile measured in ``dtype``: the target's verification curve and a
    drafting level of the profile's draft model, or of its feature head (``head``); refused, as the extension is,
    where the costs are not measured. The loop's AR step and the decision keep their defaults' shares of the
    one-token forward (``ControlConfig`` gives them in one-token forwards)."""
    verify, level, fixed = head_cost_curve(p, dtype, root) if head else cost_curve(p, dtype, root)
    one, shares = verify[0][1], ControlConfig()
    return ControlConfig(verify_ms=verify, draft_ms=level, fixed_ms=fixed, step_ms=round(shares.step_ms * one, 4),
                         decide_ms=round(shares.decide_ms * one, 4))


def head_share(p: Profile, root: Path | None = None) -> float:
    """The feature head's step over the target's one-token forward (head_cost.json's median of paired rounds)."""
    path = results_path("head_cost", p, root)
    if not path.exists():
        raise NotTuned(f"{path} is missing: pricing the head's drafting levels needs its measured step "
                       "(`bench --experiment head_cost` measures it)")
    return json.loads(path.read_text())["drafts"]["head"]["median"]


def cost_candidates(p: Profile, root: Path | None = None) -> tuple[CostAwareConfig, ...]:
    """The extension's tuning candidates: DynaTree's candidates, each with its trees cut by the curves of the
    timed precision (the same number as every family's)."""
    curve = cost_curve(p, p.models.dtype, root)
    return tuple(CostAwareConfig(base, *curve) for base in p.tuning.candidates[registry.DYNATREE])


def cost_aware(p: Profile, workload: str, dtype: str, root: Path | None = None,
               sampling: Sampling = GREEDY) -> CostAwareConfig:
    """The named extension for ``workload`` in ``dtype``: DynaTree's trees cut by the forward-cost curves this
    profile measured in ``dtype``. Its DynaTree settings are, where the profile tunes, the fastest of
    ``cost_candidates`` (tuned with the cut on, as the extension runs), else the paper's."""
    base = (p.method(registry.DYNATREE, workload) if p.tuning.candidates is None
            else fastest(p, registry.DYNATREE_COST, workload, cost_candidates(p, root), root, sampling=sampling).base)
    return CostAwareConfig(base, *cost_curve(p, dtype, root))


# ---- the tuning experiment ---------------------------------------------------------------------------------------

def tuning_families() -> tuple[str, ...]:
    """The families the tuning experiment measures: every tuned one but the opt-in methods (``methods.Method``'s
    role), whose candidates wait for an experiment that names them."""
    return tuple(f for f in tuned_families() if f not in registry.names("opt_in"))


@experiment
class Tuning(PicksSettings):
    name = "tuning"
    notebook = "01_main_results"
    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
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

    def applies(self, p: Profile, root: Path | None = None) -> bool:
        return p.tuning.candidates is not None  # without reading the costs its extension's candidates come from

    def before(self, p: Profile, *, rerun: bool, root: Path | None, render_only: bool) -> None:
        costs_first(p, rerun=rerun, root=root, render_only=render_only)
