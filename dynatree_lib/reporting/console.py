"""What ``generate`` prints about a decode: a summary line, its metrics as JSON, and ``--compare-ar``'s comparison."""
from __future__ import annotations

import json
import math


def summary(name: str, res) -> str:
    """One line a user reads: tokens, verifications, tokens per verification, tokens/s and the engine that ran."""
    from ..harness.measure.metrics import prompt_metrics

    m = prompt_metrics(res)
    return (f"{name}: {m['tokens']} tokens in {m['iterations']} target verifications ({m['L_bar']:.2f} tokens per "
            f"verification), {m['tps']:.1f} tokens/s, engine {m['engine']}")


def metrics_json(res) -> str:
    """The generation's metrics as one line of valid JSON (a metric that does not apply, such as AR's acceptance,
    is null, never NaN)."""
    from ..harness.measure.metrics import prompt_metrics

    clean = lambda v: (round(v, 3) if math.isfinite(v) else None) if isinstance(v, float) else v
    return json.dumps({k: clean(v) for k, v in prompt_metrics(res).items()}, allow_nan=False)


COMPARE_ROUNDS = 3  # AR and the method alternate this many times after a warm-up of each


def compare_ar(ar, spec, greedy: bool) -> str:
    """``--compare-ar``: AR and the method decode the same prompt alternately (a warm-up of each, then
    ``COMPARE_ROUNDS`` pairs, so that a drift of the machine's speed hits both); the median of the pairs' speedups, and
    whether the method's tokens equal AR's (greedy; sampled runs draw differently)."""
    import statistics

    from ..harness.measure.metrics import prompt_metrics

    ar(), spec()
    pairs = [(ar(), spec()) for _ in range(COMPARE_ROUNDS)]
    ratios = sorted(prompt_metrics(b)["tps"] / prompt_metrics(a)["tps"] for a, b in pairs)
    equal = all(a.tokens == b.tokens for a, b in pairs)
    same = ("equal to AR's" if equal else "DIFFERENT from AR's") if greedy else "sampled, so not compared with AR's"
    return (f"speedup over AR: {statistics.median(ratios):.2f}x (median of {COMPARE_ROUNDS} alternations, "
            f"{ratios[0]:.2f}-{ratios[-1]:.2f}x); tokens: {same}")
