"""Which setting a method decodes with outside the experiments (the CLI's ``generate`` and ``show-tree``): what the
profile's records tuned for its draft, in one place, so that no caller reaches into an experiment for it."""
from __future__ import annotations

import dataclasses

from ... import methods as registry
from ...core.sampling import Sampling
from ..setup.profiles import Profile
from ..setup.weights import is_head
from .talon import row_setting, talon_rows
from .tuning import NotTuned, cost_aware, tuned

GREEDY = Sampling()


def decode_setting(p: Profile, method: str, workload: str, *, sampling: Sampling = GREEDY, dtype: str | None = None):
    """``method``'s setting on ``workload`` with ``p``'s draft: the cost-aware extension built from the measured
    costs; on a feature head, its row's fastest candidate in notebook 14's tuning on the heads (``head_setting``);
    else its tuned setting at this sampling law. Raises ``NotTuned`` naming the record it lacks."""
    if method == registry.DYNATREE_COST:
        return cost_aware(p, workload, dtype or p.models.dtype, sampling=sampling)
    if is_head(p.models.draft):
        return head_setting(p, method, workload)
    return tuned(p, method, workload, sampling=sampling)


def head_setting(p: Profile, method: str, workload: str):
    """``method``'s setting on the head ``p`` drafts with: its TALON row's fastest candidate in notebook 14's tuning
    (``talon.row_setting``), else its published one."""
    ref = p.models.draft
    p = dataclasses.replace(p, extras=dataclasses.replace(p.extras, head=ref))
    rows = [r for r in talon_rows(p, workload, None) if r.family == method and r.draft in (None, ref)]
    rows = [r for r in rows if r.draft == ref] or rows
    if not rows:
        raise NotTuned(f"no TALON tuning row for {method} on {ref}")
    return row_setting(p, rows[0], workload)
