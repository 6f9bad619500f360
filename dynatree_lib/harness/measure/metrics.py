"""Metric definitions: one function each, computed from a ``GenerationResult`` or from logged rows.

Per prompt (one generation of T new tokens):
- ``tps``: new tokens / wall seconds of the whole generation (prefill included; warmup runs excluded).
- ``ttft_ms``: time from the call to the first new token being known (prefill + first iteration).
- ``tpot_ms``: (wall - TTFT) / (tokens - 1): mean time per output token after the first.
- ``iterations``: target verification forwards (#Iter.). AR: one per token.
- ``L_bar``: tokens committed per iteration = tokens / iterations (AR: 1).
- ``ell_bar``: mean accepted draft tokens per iteration, before the bonus token. Every iteration commits
  accepted + 1 tokens (except a final one cut at T or EOS), so ell_bar = L_bar - 1 up to that cut.
- ``accept_rate``: sum of accepted / sum of drafted depth (deepest drafted node) over iterations: the
  fraction of the draft's reach that the target confirmed. For a linear chain of K this is the usual
  acceptance rate accepted/K; it never exceeds 1.
- ``node_efficiency``: sum of accepted / sum of drafted nodes: the share of verified draft nodes that
  were committed (1/branching-ish for trees).
- ``draft_forwards_per_iter``: draft-model forwards per verification (TALON's draft-efficiency axis).
- ``draft_nodes_per_iter``: drafted nodes sent to verification per iteration.
- ``drafted_at`` / ``accepted_at`` (lists, position j at index j - 1): verifications that drafted a token at depth
  j / that accepted one there; accepted_at[j-1] / drafted_at[j-1] is the acceptance at position j (a chain's is
  conditional on reaching j). vLLM's rows give its counters: accepted per position over all its drafts.
- ``idle_cpu_s`` / ``idle_wall_s`` (vLLM rows): the CPU seconds its worker process tree spent, over the wall
  seconds, between its previous request and this one (while the methods interleaved with it ran).
- ``host_s`` (rows whose target ran on the fused engine, from 2026-12-06 on): the generation's wall seconds outside
  the one-call forwards of target, draft model and EAGLE-3 head (``kernels.CallClock``, from each call to its
  return): the decoding loop, the drafter's tree growth, masks and bookkeeping, and any draft work that is not such a
  call (the context lookup, Medusa and Hydra heads). ``host_s / wall_s`` is the host's share of the time.
- ``read_bandwidth_gbs`` (AR rows): memory read bandwidth probed right after the generation
  (``environment.BandwidthProbe``); AR's bandwidth bound is weight bytes over the mean of these probes.
  ``read_bandwidth_before_gbs``: the same probed right before it (records from 2026-12-06 on).
- ``footprint_mb`` (memory rows): one generation's peak memory above the bare runtime, with only the models the
  method uses loaded (weights, caches, the generation's tensors); ``above_start_mb``: its peak above what the
  process held right before it; ``peak_mem_mb``, ``start_mem_mb``, ``runtime_mb``: the absolute figures. A fresh
  process per memory cell, after one warm-up run: CUDA's allocated bytes on GPU, the RSS on CPU (``memory``).
- ``loop_share`` / ``periodic_tail`` (AR rows): the share of output positions whose preceding 12 tokens occurred
  earlier in prompt + output (what a context lookup can copy), and whether the last 128 output tokens are exactly
  periodic (the output ends in a loop).
- ``equals_ar`` / ``ar_agreement``: output identical to greedy AR for the prompt / fraction of positions
  equal to AR's (only StreamingLLM + spec, which is not exact once its window slides, goes below 1).
- HF assisted generation exposes no per-iteration log: its iterations are counted target forwards,
  accepted = committed - 1 per iteration, draft depth = assistant forwards, TTFT is not measured.
- ``speedup``: TPS / TPS_AR of the same prompts, recomputed from the same experiment file, workload, T, L_max,
  precision, temperature and replicate; never stored. Spec-Bench reports speedup as a ratio of total tokens over
  total time per category; ours is the ratio of mean per-prompt throughputs, the same as for the continuations.

How these differ from the paper (its Table 3 is internally inconsistent: ell_bar > L_bar in every row and
acceptance above 100%): our ell_bar is strictly the accepted length before the bonus, so ell_bar < L_bar;
our acceptance is bounded by 1. We report both our definitions and the paper's numbers side by side.
"""
from __future__ import annotations

import math
import statistics

from ...core.result import GenerationResult


def prompt_metrics(res: GenerationResult) -> dict:
    """Every per-prompt metric of one generation (see module docstring)."""
    n_tok, t = len(res.tokens), res.totals
    it = max(t.iterations, 1)
    row = {
        "tokens": n_tok,
        "wall_s": res.wall_s,
        "tps": n_tok / res.wall_s,
        "ttft_ms": 1e3 * res.ttft_s,
        "tpot_ms": 1e3 * (res.wall_s - res.ttft_s) / (n_tok - 1) if n_tok > 1 else float("nan"),
        "iterations": t.iterations,
        "L_bar": n_tok / it,
        "ell_bar": t.accepted / it,
        "accept_rate": t.accepted / t.drafted_depth if t.drafted_depth else float("nan"),
        "node_efficiency": t.accepted / t.drafted_nodes if t.drafted_nodes else float("nan"),
        "draft_forwards_per_iter": t.draft_forwards / it,
        "draft_nodes_per_iter": t.drafted_nodes / it,
        "depth_per_iter": t.drafted_depth / it,
        "ms_per_token": 1e3 * (res.wall_s - res.prefill_s) / n_tok,
        "target_forwards": res.target_forwards,
        "engine": res.engine,
    }
    if res.log is not None:  # where the time goes (speculative loop): seconds per phase
        for phase in ("draft", "verify", "commit"):
            row[f"{phase}_s"] = sum(getattr(res.log, f"{phase}_s"))
        row["prefill_s"] = res.prefill_s
        row |= position_counts(res.log.depth, res.log.accepted)
    return row | res.extra


def position_counts(depth: list[int], accepted: list[int]) -> dict:
    """Per draft position j (1-based, the list's index + 1): the verifications that drafted a token at depth j
    (``drafted_at``) and those that accepted one there (``accepted_at``); their ratio is the acceptance at j."""
    top = max(depth, default=0)
    return {"drafted_at": [sum(d >= j for d in depth) for j in range(1, top + 1)],
            "accepted_at": [sum(a >= j for a in accepted) for j in range(1, top + 1)]}


LOOP_N = 12     # a position copies earlier text when the 12 tokens before it occurred earlier (the lookup's longest match)
LOOP_TAIL = 128  # an output ends in a loop when its last 128 tokens are exactly periodic


def loop_share(prompt: list[int], output: list[int], n: int = LOOP_N) -> float:
    """The share of output positions whose preceding ``n`` tokens (prompt and output before them) already occurred
    as an n-gram earlier: where copying the text that followed last time is possible."""
    seq, seen, hits = list(prompt), set(), 0
    for i in range(n, len(prompt)):
        seen.add(tuple(seq[i - n:i]))
    for x in output:
        key = tuple(seq[-n:])
        hits += len(seq) >= n and key in seen
        seen.add(key)
        seq.append(x)
    return hits / len(output) if output else float("nan")


def periodic_tail(output: list[int], span: int = LOOP_TAIL) -> bool:
    """Whether the output's last ``span`` tokens repeat one period exactly (a period of at most span / 2)."""
    tail = output[-span:]
    if len(tail) < span:
        return False
    return any(all(tail[i] == tail[i - P] for i in range(P, span)) for P in range(1, span // 2 + 1))


def mean_std(xs: list[float]) -> tuple[float, float]:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not xs:
        return float("nan"), float("nan")
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


# A divergence from AR in fp32 counts as a numerical near-tie when the target's top-1 and top-2 logits were
# at most this far apart where it happened (observed fp32 flips: ~1e-5; a decoder bug has no such bound).
TIE_GAP = 1e-3

AGG_KEYS = ("tps", "ttft_ms", "tpot_ms", "iterations", "L_bar", "ell_bar", "accept_rate", "node_efficiency",
            "draft_forwards_per_iter", "draft_nodes_per_iter", "depth_per_iter", "peak_mem_mb", "wall_s", "ar_agreement",
            "first_divergence", "draft_s", "verify_s", "commit_s", "prefill_s", "host_s", "ms_per_token",
            "read_bandwidth_gbs", "tokens", "loop_share", "start_mem_mb", "above_start_mb", "footprint_mb",
            "runtime_mb", "target_tensors_mb", "draft_tensors_mb")


def aggregate(rows: list[dict]) -> dict:
    """Mean and std over prompts of each metric, plus how many outputs equal AR."""
    out = {}
    for k in AGG_KEYS:
        if any(k in r for r in rows):
            m, s = mean_std([r.get(k) for r in rows])
            out[k] = {"mean": m, "std": s}
    out["equals_ar"] = sum(bool(r.get("equals_ar")) for r in rows)
    gaps = [r["divergence_gap"] for r in rows if r.get("divergence_gap") is not None]
    out["max_divergence_gap"] = max(gaps) if gaps else None  # widest logit gap at a divergence from AR
    out["n"] = len(rows)
    return out
