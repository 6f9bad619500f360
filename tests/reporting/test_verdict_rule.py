"""The one verdict rule (docs/usage.md#verdicts): five words, its evidence minimums, and intervals that hold the
run-to-run noise."""
import math

import pytest

from dynatree_lib.reporting import intervals
from dynatree_lib.reporting.verdict import (COUNTS, MEMORY, TIMING, VERDICTS, Interval, Measured, exact_verdict,
                                            shortfall, side, verdict)


def m(*reps, prompts=24, clean=True):
    """A workload measured in replicates (ratio, lo, hi), its interval the first replicate's."""
    ivs = tuple(Interval(*r) for r in reps)
    return Measured(ivs[0], ivs, prompts, clean)


UP, DOWN, ACROSS = (1.3, 1.1, 1.5), (0.8, 0.7, 0.9), (1.02, 0.95, 1.1)


@pytest.mark.parametrize("per_ws, expected", [
    ({"a": m(UP, UP), "b": m(UP, UP)}, "reproduces"),
    ({"a": m(UP, UP), "b": m(ACROSS, ACROSS)}, "partly"),
    ({"a": m(DOWN, DOWN), "b": m(DOWN, DOWN)}, "refuted"),
    ({"a": m(UP, UP), "b": m(DOWN, DOWN)}, "inconclusive"),        # a mix with a workload below
    ({"a": m(ACROSS, ACROSS), "b": m(ACROSS, ACROSS)}, "inconclusive"),
    ({"a": m(DOWN, DOWN), "b": m(ACROSS, ACROSS)}, "inconclusive"),
    ({"a": Measured(Interval(*UP), (Interval(*UP), Interval(*DOWN)), 24), "b": m(UP, UP)}, "inconclusive"),  # signs
    ({"a": m(UP, UP, prompts=4)}, "not measured"),                 # too few prompts
    ({"a": m(UP)}, "not measured"),                                # one replicate
    ({"a": m(UP, UP, clean=False)}, "not measured"),               # a dirty tree or a busy machine
    ({}, "not measured"),
])
def test_the_five_words(per_ws, expected):
    assert verdict(per_ws, TIMING) == expected and expected in VERDICTS


def test_every_word_is_reachable_and_none_else():
    assert set(VERDICTS) == {"reproduces", "partly", "inconclusive", "refuted", "not measured"}


def test_a_bound_of_its_own():
    """Memory at most 10% above AR's: the claim's side is under 1.10."""
    under, over = m((1.05, 1.03, 1.07)), m((1.13, 1.12, 1.14))
    assert verdict({"a": under}, MEMORY, bound=1.10, holds_above=False) == "reproduces"
    assert verdict({"a": over}, MEMORY, bound=1.10, holds_above=False) == "refuted"
    assert side(Interval(1.1, 1.05, 1.15), 1.10, holds_above=False) == "across"


def test_each_currency_has_its_minimum():
    one = {"a": m(UP, prompts=12)}
    assert verdict(one, COUNTS) == "reproduces" and verdict(one, TIMING) == "not measured"
    assert verdict({"a": m(UP, prompts=5)}, MEMORY) == "reproduces"
    assert shortfall(one, TIMING) == "12 prompts of 20, 1 replicate of 2"
    assert shortfall({"a": m(UP, UP, clean=False)}, TIMING) == "dirty or busy"


def test_exactness_counts_outputs():
    assert exact_verdict(24, 24) == "reproduces" and exact_verdict(23, 24) == "refuted"
    assert exact_verdict(0, 0) == "not measured"


def test_run_variance_pools_the_replicates_spread():
    # two rows, log ratios differ by ±d between replicates: pooled variance d²/2 per row
    d = 0.1
    rows = [(math.exp(0.2), math.exp(0.2 + d)), (1.0, math.exp(-d))]
    assert intervals.run_variance(rows) == pytest.approx(d * d / 2)
    assert intervals.run_variance([(1.2,), (1.1,)]) is None


def test_the_combined_interval_widens_with_run_noise_and_narrows_with_replicates():
    rep = Interval(1.2, 1.1, 1.3)
    alone = intervals.combine([rep, rep], 0.0)
    noisy = intervals.combine([rep, rep], 0.01)
    assert alone.lo == pytest.approx(1.2 * math.exp(-intervals.log_se(rep) * intervals.Z), rel=1e-9)
    assert noisy.lo < alone.lo and noisy.hi > alone.hi
    three = intervals.combine([rep] * 3, 0.01)
    assert noisy.lo < three.lo < alone.lo


def test_a_replicate_outside_the_bootstrap_falls_inside_with_the_run_noise():
    """Two greedy replicates that disagree beyond their bootstrap intervals (as on the Intel kind's HumanEval TALON
    row, 0.94 [0.91, 0.97] against 1.09 [1.03, 1.18]) agree once the run noise is in."""
    a, b = Interval(0.94, 0.91, 0.97), Interval(1.09, 1.03, 1.18)
    var = intervals.run_variance([(0.94, 1.09)])
    got = intervals.agreement([(a, b)], var)
    assert got == {"rows": 1, "inside bootstrap": 0, "inside with run noise": 1}
