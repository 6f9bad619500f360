"""Forward-cost curves and a cost model of speculative decoding built from them.

``run_costs`` measures fwd(k), the time of one cached forward of k tokens (k = 1..64) over a cache of
L_max tokens, for the target and the draft, in the timed and the exact precision, on the profile's
engine; with the bandwidth bound of one-token decoding beside them. ``predict_ms_per_token`` turns the
curves and a row's logged tree statistics into a predicted time per generated token:

    per iteration:  fwd_target(nodes + 1)                          verify the tree (root included)
                  + fwd_draft_after_target(L)                      draft reads the tokens committed last time
                                                                   (its weights just evicted by the target's)
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
COLD = "draft_after_target"  # the curve of a draft forward that follows a target forward


@torch.no_grad()
def forward_costs(runner, context: int, ks=KS, reps: int = 15, vocab: int = 1000, seed: int = 0,
                  between=None) -> dict:
    """Median milliseconds of one forward of k new tokens over ``context`` cached tokens, per k.
    ``between``: another runner (holding a cache) that runs one untimed one-token forward before each
    timed one, as the decoding loop alternates target and draft (its weights push the timed model's out
    of the CPU caches)."""
    g = torch.Generator().manual_seed(seed)
    dev = next(runner.model.parameters()).device
    vocab = min(vocab, runner.model.config.vocab_size)
    ids = torch.randint(vocab, (context + max(ks),), generator=g).to(dev)
    for r in (runner, between) if between is not None else (runner,):
        r.reset()
        r.forward(ids[:context], torch.arange(context, device=dev), last_only=True)
    one = torch.tensor([context], device=dev)
    pos = {k: torch.arange(context, context + k, device=dev) for k in ks}
    ts: dict = {k: [] for k in ks}
    # In rounds (every k once per round, two warm-up rounds): a slow spell of a shared machine then hits
    # every k alike instead of bending the curve at whichever k it fell on. Largest k first, so that each
    # forward follows one of about its size (a one-token forward after a 64-token one would find the
    # draft's weights pushed out of the CPU caches by 64 rows of logits: not back to back any more).
    order = sorted(ks, reverse=True)
    for _ in range(reps + 2):
        for k in order:
            if between is not None:
                greedy(between.forward(ids[context:context + 1], one)).tolist()
                between.truncate(context)
            t0 = time.perf_counter()
            greedy(runner.forward(ids[context:context + k], pos[k])).tolist()  # argmax and host sync, as the loops do
            ts[k].append(time.perf_counter() - t0)
            runner.truncate(context)
    return {k: 1e3 * sorted(t[2:])[len(t[2:]) // 2] for k, t in ts.items()}


def run_costs(profile, rerun: bool = False, root: Path | None = None, render_only: bool = False) -> Path:
    """Measure (or reuse) the forward-cost curves of the profile's pair; returns the JSON path.

    Per precision: ``target`` and ``draft`` (back-to-back forwards of one model), ``draft_after_target``
    (each draft forward right after a target forward: the first draft forward of every iteration), the
    bandwidth bound and the engine; with a ``draft_vocab`` profile also ``draft_full_vocab`` (the same
    draft scoring every token: what the subset head saves). A file from before ``draft_after_target`` existed gets that curve
    added (its other curves kept, the addition's environment logged under ``added``)."""
    from .fastpath import StaticRunner
    from .models import load_pair
    from .runners import HFRunner, as_runner

    path = (root or RESULTS) / profile.name / "costs.json"
    old = None if needs_run(path, rerun, render_only, profile.threads) else json.loads(path.read_text())
    if old is not None and (render_only or all(COLD in c for c in old["curves"].values())):
        return path
    context = max(profile.L_max.values())
    curves = {} if old is None else old["curves"]
    for dtype in dict.fromkeys(d for d in (profile.dtype, profile.exact_dtype) if d):
        target, draft, _ = load_pair(profile.target, profile.draft, profile.device, dtype, profile.context_override,
                                     profile.engine, profile.max_len, profile.draft_vocab)
        t, d = as_runner(target), as_runner(draft)
        if old is None:
            curves[dtype] = {"target": forward_costs(t, context), "draft": forward_costs(d, context),
                             "bound": bound(t.model, profile.device), "engine": t.engine,
                             "draft_vocab": profile.draft_vocab}
            if profile.draft_vocab is not None:
                full = HFRunner(d.model) if profile.engine == "eager" else \
                    StaticRunner(d.model, profile.max_len, profile.engine == "static+compile")
                curves[dtype]["draft_full_vocab"] = forward_costs(full, context)
        curves[dtype][COLD] = forward_costs(d, context, ks=(1, 2, 4, 8), between=t)
    path.parent.mkdir(parents=True, exist_ok=True)
    if old is None:
        out = {"profile": profile.name, "context": context, "ks": list(KS), "curves": curves,
               "environment": environment(profile.device)}
    else:
        out = dict(old, curves=curves, added={COLD: environment(profile.device)})
    path.write_text(json.dumps(out, indent=1))
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
    if method == "ar":
        return interp(curves["target"], 1)
    return sum(predict_iteration(curves, nodes, depth, draft_forwards, L_bar)) / L_bar


def predict_iteration(curves: dict, nodes: float, depth: float, draft_forwards: float, L_bar: float) -> tuple[float, float]:
    """Predicted milliseconds of one iteration's drafting and verification (see module docstring)."""
    fd = curves["draft"]
    draft = interp(curves.get(COLD, fd), L_bar)
    if draft_forwards > 1:
        draft += (draft_forwards - 1) * interp(fd, nodes / max(depth, 1))
    return draft, interp(curves["target"], nodes + 1)


def chain_speedup(curves: dict, alpha: float, K: int) -> float:
    """Predicted speedup over AR of a K-token draft chain whose tokens the target accepts independently
    with probability ``alpha``: (1 - alpha^(K+1)) / (1 - alpha) tokens per iteration (bonus included) for
    fwd_target(K + 1) + fwd_draft(tokens) (after a target forward) + (K - 1) fwd_draft(1). The loop's own
    work is left out, so this is a ceiling for what a drafter of that acceptance can reach on these costs."""
    tokens = (1 - alpha ** (K + 1)) / (1 - alpha) if alpha < 1 else K + 1.0
    # a chain is a tree of K nodes, K levels deep, drafted in K forwards
    return interp(curves["target"], 1) / predict_ms_per_token(curves, "linear", K, K, K, tokens)
