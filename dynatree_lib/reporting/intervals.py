"""Intervals that hold the run-to-run noise, for the verdict rule (``verdict``).

A replicate's paired bootstrap over prompts sees how prompts differ, not how two runs of the same prompts differ.
Replicates time the same prompts, so their log ratios differ by run noise alone: the between-run variance of a log
ratio is estimated from the replicates' spread, pooled over every row of an experiment (each row's speedup over AR
in each replicate). It assumes each method's run noise alike and independent, so any ratio of two rows carries the
same variance as a speedup. A workload's interval is then the replicates' mean log ratio
± z·sqrt(s_prompts² + s_run² / R): the prompts are shared by every replicate, the run noise averages down.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator, Sequence

import pandas as pd

from .. import methods as registry
from ..harness.setup.variants import MAIN
from .records import paired, row_id
from .verdict import Interval, Measured

Z = 1.959964  # two-sided 95%
# a row is one method's record in each replicate: what identifies it apart from the replicate
ROW_KEY = ["dataset", "row", "T", "L_max", "dtype", "temperature", "lookup"]


def timed_only(df: pd.DataFrame) -> pd.DataFrame:
    """The timed records: all but the main run's fp32 exactness records (role "exact"), which are not timed."""
    if "tag_role" not in df:
        return df
    return df[df.tag_role.fillna("timed") != "exact"]


def log_se(iv: Interval) -> float:
    """The standard error on the log scale that a 95% interval implies (0 where it has no width)."""
    if not (iv.lo > 0 and iv.hi > 0):
        return 0.0
    return (math.log(iv.hi) - math.log(iv.lo)) / (2 * Z)


def run_variance(groups: Iterable[Sequence[float]]) -> float | None:
    """The pooled between-run variance of log ratios: each group holds one row's ratio in each replicate; None
    where no group has two."""
    squares = dof = 0.0
    for ratios in groups:
        logs = [math.log(r) for r in ratios if r > 0]
        if len(logs) > 1:
            mean = statistics.fmean(logs)
            squares += sum((x - mean) ** 2 for x in logs)
            dof += len(logs) - 1
    return squares / dof if dof else None


def speedup_rows(df: pd.DataFrame) -> Iterator[pd.DataFrame]:
    """Each timed row's records (``records.load``) with a speedup over AR, in replicate order. AR's own rows, a
    ratio of 1 by definition, are left out."""
    timed = timed_only(df)
    timed = timed[(timed.method != registry.AR) & timed.speedup.notna()]
    keys = [k for k in ROW_KEY if k in timed]
    return (g.sort_values("replicate") for _, g in timed.groupby(keys, dropna=False))


def experiment_run_variance(df: pd.DataFrame) -> float | None:
    """``run_variance`` of an experiment's records: every row's speedup over AR, per replicate (``speedup_rows``)."""
    return run_variance(g.speedup.tolist() for g in speedup_rows(df))


def combine(replicates: Sequence[Interval], run_var: float | None) -> Interval:
    """One workload's interval from its replicates' (ratio, bootstrap interval): the mean log ratio, widened by
    the prompts' spread (the replicates' mean bootstrap error) and the run noise over the replicates."""
    logs = [math.log(r.value) for r in replicates]
    prompts = statistics.fmean(log_se(r) ** 2 for r in replicates)
    se = math.sqrt(prompts + (run_var or 0.0) / len(replicates))
    mean = statistics.fmean(logs)
    return Interval(math.exp(mean), math.exp(mean - Z * se), math.exp(mean + Z * se))


def one_run(iv: Interval, run_var: float | None) -> Interval:
    """One replicate's interval widened by one run's noise: where another run of the same prompts should fall."""
    se = math.sqrt(log_se(iv) ** 2 + (run_var or 0.0))
    return Interval(iv.value, iv.value * math.exp(-Z * se), iv.value * math.exp(Z * se))


def agreement(pairs: Sequence[tuple[Interval, Interval]], run_var: float | None) -> dict[str, int]:
    """How often replicate pairs of the same rows agree: the second's ratio inside the first's bootstrap interval
    alone, and inside it widened by the run noise (``one_run``)."""
    inside = lambda iv, x: iv.lo <= x <= iv.hi
    return {"rows": len(pairs), "inside bootstrap": sum(inside(a, b.value) for a, b in pairs),
            "inside with run noise": sum(inside(one_run(a, run_var), b.value) for a, b in pairs)}


def paired_measured(df: pd.DataFrame, row_a: str, row_b: str, *, lookup: bool | None = None,
                    run_var: float | None = None) -> dict[str, Measured]:
    """{workload: ``Measured``} of one row's throughput over another's (row ids, ``records.row_id``) on the prompts
    both measured, per replicate (``records.paired``) and combined with the experiment's run noise (``run_var``; by
    default estimated from ``df``: a caller that passes a slice passes the whole experiment's
    ``experiment_run_variance``, so that every row of one experiment shares one estimate). ``lookup``: only the rows drafting with the lookup (True) or without it (False),
    None: either."""
    if run_var is None:
        run_var = experiment_run_variance(df)
    df = timed_only(df)
    if lookup is not None:
        df = df[df.lookup == lookup]
    out = {}
    for ws, w in df.groupby("dataset", sort=False):
        reps, prompts, clean = [], [], True
        for _, r in w.groupby("replicate"):
            x, y = (r[r.row == i] for i in (row_a, row_b))
            if x.empty or y.empty:
                continue
            ratio, lo, hi, n = paired(x.iloc[0].tps_by_prompt, y.iloc[0].tps_by_prompt)
            reps.append(Interval(ratio, lo, hi))
            prompts.append(n)
            clean &= x.iloc[0].mark == "" and y.iloc[0].mark == ""
        if reps:
            out[ws] = Measured(combine(reps, run_var), tuple(reps), min(prompts), clean)
    return out


def main_measured(df: pd.DataFrame, a: str, b: str, *, lookup: bool | None = None,
                  run_var: float | None = None) -> dict[str, Measured]:
    """``paired_measured`` of method ``a``'s main row over method ``b``'s."""
    return paired_measured(df, row_id(a, MAIN), row_id(b, MAIN), lookup=lookup, run_var=run_var)


def replicate_pairs(df: pd.DataFrame) -> list[tuple[Interval, Interval]]:
    """Every row's speedup over AR with its bootstrap interval in its first two replicates."""
    pairs = []
    for g in speedup_rows(df):
        if g.replicate.nunique() > 1:
            a, b = (Interval(r.speedup, r.speedup_lo, r.speedup_hi) for r in g.head(2).itertuples())
            pairs.append((a, b))
    return pairs


def run_noise_table(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per experiment with replicates: its run noise (s_run, the between-run standard deviation of a log ratio) and
    how often a row's second replicate falls inside its first's interval, from the bootstrap alone and with the run
    noise added (``agreement``)."""
    rows = {}
    for name, df in frames.items():
        if df.empty:  # no records of the current cells yet
            continue
        pairs, var = replicate_pairs(df), experiment_run_variance(df)
        if not pairs or var is None:
            continue
        a = agreement(pairs, var)
        rows[name] = {"rows": a["rows"], "run noise s_run": f"{math.sqrt(var):.1%}",
                      "inside the bootstrap interval": f"{a['inside bootstrap']} of {a['rows']}",
                      "inside with the run noise": f"{a['inside with run noise']} of {a['rows']}"}
    t = pd.DataFrame(rows).T
    t.index.name = "experiment"
    return t
