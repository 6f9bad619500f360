"""The one verdict rule: five words for every claim, in wall time on a named machine and in a method's own numbers.

A claim bounds a quantity per workload: a ratio over 1 ("A is faster than B"), or a bound of its own ("DynaTree's
memory is within 10% of AR's": the ratio below 1.10). Each workload's interval lies *above* the bound (the claim's
side), *below* it, or *across* it. Then:

- **reproduces**: every workload above;
- **partly**: at least one workload above, and none below;
- **refuted**: every workload below;
- **inconclusive**: any other mix, and any workload whose replicates lie on opposite sides;
- **not measured**: a workload has fewer prompts or replicates than the claim's kind needs (``Evidence``), or a
  record comes from a dirty tree or a busy machine.

Exactness claims count outputs: all equal reproduces, any unequal refutes. docs/usage.md#verdicts states the rule.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

REPRODUCES, PARTLY, INCONCLUSIVE, REFUTED, NOT_MEASURED = VERDICTS = (
    "reproduces", "partly", "inconclusive", "refuted", "not measured")
ABOVE, BELOW, ACROSS = "above", "below", "across"


@dataclass(frozen=True)
class Evidence:
    """The least a claim's workload needs before it gets a verdict: prompts per workload and replicates, each in a
    process of its own."""
    prompts: int
    replicates: int


TIMING = Evidence(prompts=20, replicates=2)   # wall time: run-to-run noise needs two runs to be estimated
COUNTS = Evidence(prompts=12, replicates=1)   # τ, δ, nodes: deterministic greedy on one engine
MEMORY = Evidence(prompts=5, replicates=1)    # bytes


@dataclass(frozen=True)
class Interval:
    """An estimate with its 95% interval."""
    value: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Measured:
    """One workload's measurement of a claim: its interval (holding the run-to-run noise where it is timed), each
    replicate's own interval, the prompts it rests on, and whether every record is clean (committed tree, idle
    machine)."""
    interval: Interval
    replicates: tuple[Interval, ...]
    prompts: int
    clean: bool = True

    def enough(self, need: Evidence) -> bool:
        return self.clean and self.prompts >= need.prompts and len(self.replicates) >= need.replicates


def side(iv: Interval, bound: float = 1.0, *, holds_above: bool = True) -> str:
    """Where an interval lies against the claim's bound, seen from the claim: ABOVE is the claim's side (over the
    bound for a claim of "more", under it for a claim of "at most")."""
    if iv.lo > bound:
        return ABOVE if holds_above else BELOW
    if iv.hi < bound:
        return BELOW if holds_above else ABOVE
    return ACROSS


def verdict(per_workload: Mapping[str, Measured], need: Evidence, *, bound: float = 1.0,
            holds_above: bool = True) -> str:
    """The claim's verdict (``VERDICTS``; the module docstring states the rule). No workload reads not measured."""
    if not per_workload or not all(m.enough(need) for m in per_workload.values()):
        return NOT_MEASURED
    where = lambda iv: side(iv, bound, holds_above=holds_above)
    if any({ABOVE, BELOW} <= {where(r) for r in m.replicates} for m in per_workload.values()):
        return INCONCLUSIVE
    sides = [where(m.interval) for m in per_workload.values()]
    if all(s == ABOVE for s in sides):
        return REPRODUCES
    if all(s == BELOW for s in sides):
        return REFUTED
    return PARTLY if ABOVE in sides and BELOW not in sides else INCONCLUSIVE


def exact_verdict(equal: int, total: int) -> str:
    """An exactness claim: every output equals the reference's (reproduces), any does not (refuted)."""
    if total == 0:
        return NOT_MEASURED
    return REPRODUCES if equal == total else REFUTED


def shortfall(per_workload: Mapping[str, Measured], need: Evidence) -> str:
    """Why a claim reads not measured, in a few words (empty where it does not): "dirty or busy" where a record
    comes from a dirty tree or a busy machine."""
    if not per_workload:
        return "no records"
    ms = list(per_workload.values())
    why = []
    if not all(m.clean for m in ms):
        why.append("dirty or busy")
    if (n := min(m.prompts for m in ms)) < need.prompts:
        why.append(f"{n} prompt{'s' * (n != 1)} of {need.prompts}")
    if (r := min(len(m.replicates) for m in ms)) < need.replicates:
        why.append(f"{r} replicate{'s' * (r != 1)} of {need.replicates}")
    return ", ".join(why)
