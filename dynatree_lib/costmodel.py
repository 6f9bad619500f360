"""Forward-cost curves and a cost model of speculative decoding built from them.

``run_costs`` measures fwd(k), the time of one cached forward of k tokens (k = 1..64) over a cache of
L_max tokens, for the target and the draft, in the timed and the exact precision, on the profile's
engine; with the bandwidth bound of one-token decoding beside them. ``predict_ms_per_token`` turns the
curves and a row's logged tree statistics into a predicted time per generated token:

    per iteration:  fwd_target(nodes + 1)                          verify the tree (root included)
                  + fwd_draft(L)                                   draft reads the tokens committed last time
                  + (draft_forwards - 1) * fwd_draft(nodes / depth)  one draft forward per further level
    per token:      iterations * that / tokens                     (prefill excluded; AR: fwd_target(1))

What it leaves out is the loop's own work (tree bookkeeping, top-k, masks, commits): the gap between
prediction and measurement, which notebook 03 shows.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from .bench import RESULTS, bound, environment, needs_run
from .decoders import greedy

KS = (1, 2, 4, 8, 16, 32, 64)


@torch.no_grad()
def forward_costs(runner, context: int, ks=KS, reps: int = 15, vocab: int = 1000, seed: int = 0) -> dict:
    """Median milliseconds of one forward of k new tokens over ``context`` cached tokens, per k."""
    g = torch.Generator().manual_seed(seed)
    dev = next(runner.model.parameters()).device
    vocab = min(vocab, runner.model.config.vocab_size)
    ids = torch.randint(vocab, (context + max(ks),), generator=g).to(dev)
    runner.reset()
    runner.forward(ids[:context], torch.arange(context, device=dev), last_only=True)
    out = {}
    for k in ks:
        pos = torch.arange(context, context + k, device=dev)
        ts = []
        for _ in range(reps + 2):
            t0 = time.perf_counter()
            greedy(runner.forward(ids[context:context + k], pos)).tolist()  # argmax and host sync, as the loops do
            ts.append(time.perf_counter() - t0)
            runner.truncate(context)
        out[k] = 1e3 * sorted(ts[2:])[len(ts[2:]) // 2]
    return out


def run_costs(profile, rerun: bool = False, root: Path | None = None, render_only: bool = False) -> Path:
    """Measure (or reuse) the forward-cost curves of the profile's pair; returns the JSON path."""
    from .models import load_pair
    from .runners import as_runner

    path = (root or RESULTS) / profile.name / "costs.json"
    if not needs_run(path, rerun, render_only, profile.threads):
        return path
    context = max(profile.L_max.values())
    curves = {}
    for dtype in dict.fromkeys(d for d in (profile.dtype, profile.exact_dtype) if d):
        target, draft, _ = load_pair(profile.target, profile.draft, profile.device, dtype, profile.context_override,
                                     profile.engine, profile.max_len)
        t, d = as_runner(target), as_runner(draft)
        curves[dtype] = {"target": forward_costs(t, context), "draft": forward_costs(d, context),
                         "bound": bound(t.model, profile.device), "engine": t.engine}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"profile": profile.name, "context": context, "ks": list(KS), "curves": curves,
                                "environment": environment(profile.device)}, indent=1))
    return path


def interp(curve: dict, k: float) -> float:
    """fwd(k) by linear interpolation between measured k (clamped at the ends)."""
    ks = sorted(int(x) for x in curve)
    v = [curve[str(x)] if str(x) in curve else curve[x] for x in ks]
    if k <= ks[0]:
        return v[0]
    for (k0, v0), (k1, v1) in zip(zip(ks, v), zip(ks[1:], v[1:])):
        if k <= k1:
            return v0 + (v1 - v0) * (k - k0) / (k1 - k0)
    return v[-1] + (v[-1] - v[-2]) * (k - ks[-1]) / (ks[-1] - ks[-2])


def predict_ms_per_token(curves: dict, method: str, nodes: float, depth: float, draft_forwards: float,
                         L_bar: float) -> float:
    """Predicted milliseconds per generated token (see module docstring); ``curves`` is one precision's
    entry of costs.json, the other arguments are a row's per-iteration means."""
    ft, fd = curves["target"], curves["draft"]
    if method == "ar":
        return interp(ft, 1)
    per_iter = interp(ft, nodes + 1) + interp(fd, L_bar)
    if draft_forwards > 1:
        per_iter += (draft_forwards - 1) * interp(fd, nodes / max(depth, 1))
    return per_iter / L_bar
