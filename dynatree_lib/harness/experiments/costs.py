"""Forward-cost curves and a cost model of speculative decoding built from them.

``run_costs`` measures fwd(k), the time of one cached forward of k tokens (k = 1..64) over a cache of
L_max tokens, for the target and the draft, in the timed and the exact precision, on the profile's
engine; with the bandwidth bound of one-token decoding beside them. ``predict_ms_per_token`` turns the
curves and a row's logged tree statistics into a predicted time per generated token:

    per iteration:  fwd_target(nodes + 1)                          verify the tree (root included)
                  + fwd_draft_after_target(L)                      draft reads the tokens committed last time
                                                                   (its weights just evicted by the target's)
                  + (draft_forwards - 1) * fwd_draft(nodes / depth)  one draft forward per further level
                  + draft_forwards * level                         the drafter's own work per level
                  + commit                                         path selection and the KV gather
    per token:      iterations * that / tokens                     (prefill excluded; AR: fwd_target(1))

``level`` and ``commit`` (``loop_costs``) time the loop's own code without model forwards: a drafting
level with the real draft's logits replayed (log-softmax, top-k, selection, tree growth, masks) and a
commit of a verified tree. What the model still leaves out shows as the gap between predicted and measured
time in notebook 03.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from ... import methods as registry
from ...core.loop import GreedyVerifier
from ...core.drafter import DraftState, draft_tree
from ...core.engines.runner import Draft, greedy
from ...core.engines.hf import as_runner
from ...core.drafts.lookup import LookupRunner
from ...core.tree import select_path
from ..measure.environment import BandwidthProbe, bound, environment
from ..measure.store import needs_run, results_path, write_report
from .catalog import Document, experiment

KS = (1, 2, 4, 8, 16, 32, 64)
COLD = "draft_after_target"  # the curve of a draft forward that follows a target forward


@torch.no_grad()
def forward_costs(runner, context: int, ks=KS, reps: int = 15, vocab: int = 1000, *, seed: int = 0,
                  between=None, argmax: bool = False, target=None, per_round: bool = False) -> dict:
    """Median milliseconds of one forward of k new tokens over ``context`` cached tokens, per k.
    ``between``: a target runner (holding a cache) whose untimed one-token ``argmax`` precedes each timed
    forward, as the decoding loop alternates target and draft (its weights push the timed model's out of the
    CPU caches). ``argmax``: time ``runner.argmax`` (a target's call in the loops) instead of the logits and
    their ``greedy`` (a draft's). A draft on the target's features (``reads_features``: an EAGLE-3 head) is handed
    those of the tokens it reads by ``target`` (default ``between``), untimed (``hand_features``). ``per_round``: each
    k's milliseconds in every timed round (warm-ups dropped) instead of their median."""
    g = torch.Generator().manual_seed(seed)
    dev = next(runner.model.parameters()).device
    vocab = min(vocab, runner.model.config.vocab_size)
    ids = torch.randint(vocab, (context + max(ks),), generator=g).to(dev)
    for r in (runner, between) if between is not None else (runner,):
        r.reset()
        if r.reads_features:
            hand_features(r, target if target is not None else between, ids)
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
                between.argmax(ids[context:context + 1], one).tolist()
                between.truncate(context)
            t0 = time.perf_counter()
            new = ids[context:context + k]  # a target's argmax or a draft's logits, then the host sync, as the loops do
            (runner.argmax(new, pos[k]) if argmax else greedy(runner.forward(new, pos[k]))).tolist()
            ts[k].append(time.perf_counter() - t0)
            runner.truncate(context)
    if per_round:
        return {k: [1e3 * x for x in t[2:]] for k, t in ts.items()}
    return {k: _warm_median_ms(t) for k, t in ts.items()}


def hand_features(draft, target, ids) -> None:
    """Give a draft on the target's hidden states (just reset) the target's features of ``ids``, from a target
    forward over them, as the decoding loop hands them over (``core.loop.FeatureLink``); the target's cache
    holds ``ids`` afterwards."""
    if target is None:
        raise ValueError(f"the draft {type(draft).__name__} reads the target's hidden states: time it with its "
                         "target runner (target=)")
    target.keep_features(draft.reads_features)
    target.reset()
    target.forward(ids, torch.arange(ids.numel(), device=ids.device), last_only=True)
    draft.observe_target(target.features, 0)


def one_token_ratio(target, draft, context: int, rounds: int = 15, reps: int = 5, *, span_s: float = 0.0,
                    probe: BandwidthProbe | None = None) -> dict:
    """The draft's one-token forward cost over the target's, in ``rounds`` pairs: each round times the target's
    (``argmax``, as the loops call it) and right after it the draft's one-token forward (``forward_costs``,
    ``reps`` each), and with a ``probe`` the memory read bandwidth beside them. The machine's bandwidth drifts
    between phases over minutes and the bandwidth-bound target follows it more than a draft that fits the CPU
    caches, so the ratio depends on the phase: pairing keeps both sides of a round in one phase, and ``span_s``
    spreads the rounds over that many seconds so that the median and quartiles cover the phases met. A draft on
    the target's features (an EAGLE-3 head) is handed the features of its context by the target, untimed, and the
    target keeps them in its timed forwards too, as it does when decoding with such a draft."""
    t_ms, d_ms, gbs = [], [], []
    if draft.reads_features:
        target.keep_features(draft.reads_features)
    start = time.perf_counter()
    for i in range(rounds):
        time.sleep(max(0.0, start + span_s * i / max(rounds - 1, 1) - time.perf_counter()))
        t_ms.append(forward_costs(target, context, ks=(1,), reps=reps, seed=i, argmax=True)[1])
        d_ms.append(forward_costs(draft, context, ks=(1,), reps=reps, seed=i, target=target)[1])
        gbs.append(probe.read_gbs() if probe is not None else float("nan"))
    ratios = torch.tensor([d / t for d, t in zip(d_ms, t_ms)], dtype=torch.float64)
    q1, med, q3 = ratios.quantile(torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64)).tolist()
    return {"target_ms": t_ms, "draft_ms": d_ms, "read_gbs": gbs, "median": med, "quartiles": [q1, q3],
            "rounds": rounds, "reps": reps, "span_s": span_s}


def _warm_median_ms(seconds: list[float]) -> float:
    """Median in milliseconds of timed repetitions, the first two (warm-up) dropped."""
    t = sorted(seconds[2:])
    return 1e3 * t[len(t) // 2]


class _Replay(Draft):
    """A draft stand-in answering every forward at once with rows of logits recorded from the real draft
    (the ``Runner`` calls the drafter makes): drafting's own work, timed without its forwards."""

    engine = "replay"

    def __init__(self, logits: torch.Tensor, vocab):
        self.logits, self.vocab, self.length = logits, vocab, 0

    def forward(self, tokens, positions, visible=None, tree_start=None, last_only=False):
        q = tokens.numel()
        self.length += q
        i = self.length % (self.logits.shape[0] - 64)  # vary the rows, hence the trees
        return self.logits[i:i + (1 if last_only else q)]

    def truncate(self, length: int) -> None:
        self.length = length


@torch.no_grad()
def loop_costs(target, draft, policy, context: int, reps: int = 30, *, vocab: int = 1000, seed: int = 0) -> dict:
    """Median milliseconds of the speculative loop's own work: ``level``, one drafting level without its
    forward (the real draft's logits over ``context`` tokens replayed; ``policy`` shapes the trees), and
    ``commit``, selecting the accepted path of such a tree (the first child at every level accepted, the
    tree verified into the target's cache untimed) and gathering its KV entries there."""
    g = torch.Generator().manual_seed(seed)
    dev = next(target.model.parameters()).device
    ids = torch.randint(min(vocab, target.model.config.vocab_size), (context + 1,), generator=g).to(dev)
    pos = torch.arange(context, device=dev)
    draft.reset()
    if draft.reads_features:
        hand_features(draft, target, ids[:context])
    replay = _Replay(draft.forward(ids[:context], pos), draft.vocab)
    draft.reset()
    target.reset()
    target.forward(ids[:context], pos, last_only=True)
    level, commit = [], []
    for _ in range(reps + 2):
        replay.length = context
        t0 = time.perf_counter()
        tree, n_fwd = draft_tree(replay, DraftState(context), ids, policy, 64)
        level.append((time.perf_counter() - t0) / n_fwd)
        parents = tree.parents[:tree.size].tolist()
        nxt = torch.zeros(tree.size, dtype=torch.long, device=dev)
        for i, par in reversed(list(enumerate(parents))):  # each node's first child is the target's choice
            if par >= 0:
                nxt[par] = tree.tokens[i]
        GreedyVerifier().verify(target, tree)  # untimed: puts the tree in the target's cache, as the loop has it here
        t0 = time.perf_counter()
        path = select_path(tree, nxt)
        torch.cat([tree.tokens[path[1:]], nxt[path[-1:]]]).tolist()
        target.commit(context, path)
        commit.append(time.perf_counter() - t0)
        target.truncate(context)
    return {"level": _warm_median_ms(level), "commit": _warm_median_ms(commit)}


def run_costs(profile, rerun: bool = False, root: Path | None = None, render_only: bool = False) -> Path:
    """Measure (or reuse) the forward-cost curves of the profile's pair; returns the JSON path.

    Per precision: ``target`` and ``draft`` (back-to-back forwards of one model), ``draft_after_target``
    (each draft forward right after a target forward: the first draft forward of every iteration), with a
    ``draft_vocab`` profile ``draft_full_vocab`` (the same draft scoring every token: what the subset head
    saves), ``loop`` (the loop's own work, ``loop_costs``), the bandwidth bound and the engine; beside the
    curves ``one_token``, the draft/target cost in paired rounds (``one_token_ratio``), and the weights. ``rerun``,
    or a file measured on another engine: measure everything again, the old file kept as ``costs.bak.json``. A
    file without ``one_token`` gets it added, its curves kept (the tuning's cost-aware candidates are built from
    them), unless it names other weights than the profile's."""
    from ..setup.models import on_engine
    from ..setup.weights import weights_info

    path = results_path("costs", profile, root)
    engine = str(profile.models.engine)
    if path.exists() and (how := stale(path, engine)):
        if render_only:
            raise ValueError(f"{path} {how}, the profile runs {engine!r}: `./run_all.sh {profile.name}` (without "
                             "--render) measures it again")
        print(f"{path} {how}; measuring the costs again on {engine!r}")
        rerun = True
    weights = {"target": weights_info(profile.models.target), "draft": weights_info(profile.models.draft)}
    if not needs_run(path, rerun, render_only, profile):
        if not render_only and "one_token" not in (out := json.loads(path.read_text())):
            if out.get("weights", weights) != weights:
                raise ValueError(f"{path} was measured with other weights than the profile's: run with --rerun")
            path.write_text(json.dumps({**out, "one_token": _one_token(profile, out["context"], weights)}, indent=1))
        return path
    context, curves = max(profile.protocol.L_max.values()), {}
    probe = BandwidthProbe(profile.models.device)
    for dtype, t, d in _runners(profile, "both"):  # the draft's model keeps its weights: its full-vocabulary runner
        curves[dtype] = {"target": forward_costs(t, context, argmax=True), "draft": forward_costs(d, context, target=t),
                         COLD: forward_costs(d, context, ks=(1, 2, 4, 8), between=t),
                         "loop": loop_costs(t, d, profile.method(registry.DYNATREE, profile.workloads[0]).policy(),
                                            context),
                         "bound": bound(t.model, probe), "engine": t.engine, "draft_vocab": profile.models.draft_vocab}
        if profile.models.draft_vocab is not None and not d.reads_features:  # a head scores its own vocabulary only
            full = as_runner(on_engine(d.model, profile.models.engine, profile.max_len))
            curves[dtype]["draft_full_vocab"] = forward_costs(full, context)
    probe.release()
    out = {"profile": profile.name, "engine": engine, "context": context, "ks": list(KS), "curves": curves,
           "weights": weights, "environment": environment(profile.models.device)}
    write_report(path, {**out, "one_token": _one_token(profile, context, weights)}, replace=rerun)
    return path


def stale(path: Path, engine: str) -> str | None:
    """Why the costs file at ``path`` cannot serve a profile that runs ``engine``, or None if it can."""
    was = json.loads(path.read_text()).get("engine")
    if was == engine:
        return None
    return "predates the engine field" if was is None else f"was measured on engine {was!r}"


def _runners(profile, models_for: str = "ours"):
    """(precision, target runner, draft network runner) for the timed and the exact precision: the draft
    without its context lookup, whose own work the loop costs hold (``models_for``: ``Models.load_pair``'s)."""
    if profile.models.threads:
        torch.set_num_threads(profile.models.threads)
    for dtype in dict.fromkeys(d for d in (profile.models.dtype, profile.models.exact_dtype) if d):
        target, draft, _ = profile.models.load_pair(dtype, profile.max_len, models_for=models_for)
        d = as_runner(draft)
        yield dtype, as_runner(target), d.inner if isinstance(d, LookupRunner) else d


def _one_token(profile, context: int, weights: dict) -> dict:
    """``one_token_ratio`` per precision, spread over the profile's ``cost_span_s``, with the weights and the
    environment it was measured in (a file measured before ``one_token`` existed gets it later than its curves)."""
    probe = BandwidthProbe(profile.models.device)
    by_dtype = {dtype: one_token_ratio(t, d, context, span_s=profile.extras.cost_span_s, probe=probe)
                for dtype, t, d in _runners(profile)}
    probe.release()
    return {"by_dtype": by_dtype, "weights": weights, "environment": environment(profile.models.device)}


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
                         *, L_bar: float) -> float:
    """Predicted milliseconds per generated token (see module docstring); ``curves`` is one precision's
    entry of costs.json, the other arguments are a row's per-iteration means."""
    if method == registry.AR:
        return interp(curves["target"], 1)
    return sum(predict_iteration(curves, nodes, depth, draft_forwards, L_bar)) / L_bar


def predict_iteration(curves: dict, nodes: float, depth: float, draft_forwards: float,
                      L_bar: float) -> tuple[float, float, float]:
    """Predicted milliseconds of one iteration's drafting, verification and commit (see module docstring)."""
    fd, loop = curves["draft"], curves["loop"]
    draft = interp(curves[COLD], L_bar) + draft_forwards * loop["level"]
    if draft_forwards > 1:
        draft += (draft_forwards - 1) * interp(fd, nodes / max(depth, 1))
    return draft, interp(curves["target"], nodes + 1), loop["commit"]


def head_curves(curves: dict, head_share: float) -> dict:
    """One precision's curves (costs.json) with the draft's forwards priced as a feature head's step: the draft
    model's width curves, cold one included, scaled so that one step costs ``head_share`` of the target's one-token
    forward (head_cost.json's median, timed in paired rounds). The target's curve and the loop's terms stay. (The
    extension's ``tuning.head_cost_curve`` prices every level at the warm step instead: it ranks trees, and a cold
    first step, the same for every tree, does not change which is cheaper.)"""
    scale = head_share * interp(curves["target"], 1) / interp(curves["draft"], 1)
    return curves | {name: {k: ms * scale for k, ms in curves[name].items()} for name in ("draft", COLD)}


def chain_speedup(curves: dict, alpha: float, K: int) -> float:
    """Predicted speedup over AR of a K-token draft chain whose tokens the target accepts independently
    with probability ``alpha``: (1 - alpha^(K+1)) / (1 - alpha) tokens per iteration (bonus included) for
    fwd_target(K + 1) + fwd_draft(tokens) (after a target forward) + (K - 1) fwd_draft(1), plus the loop's
    measured work where the curves have it; a ceiling for what a drafter of that acceptance can reach on
    these costs (draft forwards priced back to back)."""
    tokens = (1 - alpha ** (K + 1)) / (1 - alpha) if alpha < 1 else K + 1.0
    # a chain is a tree of K nodes, K levels deep, drafted in K forwards
    return interp(curves["target"], 1) / predict_ms_per_token(curves, registry.LINEAR, K, K, K, L_bar=tokens)


def costs_first(p, *, rerun: bool, root: Path | None, render_only: bool) -> None:
    """The forward costs the extension's cells are built from (``costs.json``), where the profile runs the
    extension (``Experiment.before`` of the experiments with its cells); ``rerun`` measures them again (the tuning's
    rerun does: the other experiments reuse its costs)."""
    if p.extras.cost_aware:
        run_costs(p, rerun=rerun, root=root, render_only=render_only)


@experiment
class Costs(Document):
    """The forward costs of the target and the draft at each width (notebook 03's curves, the extension's input)."""
    name = "costs"
    notebook = "00_setup"
    make = run_costs
