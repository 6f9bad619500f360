"""The one rule that turns a speedup claim's numbers into the scorecard's verdict.

A claim "A is faster than B" is measured per workload, once per replicate, as a ratio of mean throughputs with its
95% paired bootstrap interval ``(ratio, lo, hi)``. A workload *reproduces* the claim when every replicate's interval
lies above 1 (replicates must agree). Then, in this order:

- **no**: every point estimate is below 1 (the method is slower everywhere, whatever the intervals say);
- **tie**: every interval includes 1 (no difference can be told from the noise);
- **reproduces**: every workload reproduces the claim;
- **partly**: some workloads reproduce it and others do not;
- **no**: none does.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

Estimate = tuple[float, float, float]  # (ratio, lo, hi): a ratio over 1 means the claim's direction
VERDICTS = ("reproduces", "partly", "tie", "no")


def verdict(per_workload: Mapping[str, Sequence[Estimate]]) -> str:
    """The verdict (``VERDICTS``, see the module docstring) of one claim from its estimates per workload (one per
    replicate; workloads without estimates are left out). A claim with no estimate at all reads "no"."""
    groups = [list(rs) for rs in per_workload.values() if rs]
    estimates = [e for rs in groups for e in rs]
    if not estimates or all(r < 1 for r, _, _ in estimates):
        return "no"
    if all(lo <= 1 <= hi for _, lo, hi in estimates):
        return "tie"
    reproduced = [all(lo > 1 for _, lo, _ in rs) for rs in groups]
    if all(reproduced):
        return "reproduces"
    return "partly" if any(reproduced) else "no"

