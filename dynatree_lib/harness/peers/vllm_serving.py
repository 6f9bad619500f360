"""Speculation that knows the load (issue 90): a cost model of one vLLM decoding step at ``b`` concurrent sequences
drafting ``k`` tokens each with our EAGLE-3 head, from curves measured through vLLM itself, and the schedule of k per
batch size it predicts, in the form vLLM's own dynamic speculative decoding takes
(``num_speculative_tokens_per_batch_size``, vLLM 0.32.0).

One step at batch b and k > 0 verifies b·(k + 1) rows and drafts k tokens per sequence, then commits
1 + a_1 + ... + a_k tokens per sequence on average (a_j: the share of drafts whose token at position j is accepted;
a greedy chain accepts j only after 1..j-1, so the a_j fall). Its time is

    step(b, k) = forward(b·(k + 1)) + draft_fixed(b) + k · draft_step(b)

``forward(n)``: vLLM's AR step at n sequences, the target's forward at n rows with vLLM's per-step work.
``draft_fixed`` and ``draft_step``: what speculating adds to that forward, a part paid once a step (the rejection
sampler, the head's first pass over the verified rows) and a part per draft token, read off vLLM's EAGLE-3 steps at
k = 1 and at k = ``K_MAX`` (two equations per batch size). k = 0 is vLLM's AR: forward(b).

The schedule drafts the model's best k >= 1 where its predicted throughput beats no speculation's by more than
``margin``, the standard error of the calibration's means (``calibration_noise``), and runs vLLM's AR (k = 0)
elsewhere: a predicted gain inside the margin is one the measurements cannot tell from none, and a draft that does not
pay costs throughput. Among k >= 1 the model's argmax decides, as their predicted gaps are what the model is for.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core.validate import require
from .vllm import ENGINE_ENV, HEAD_DIR, SERVE_COMMAND, VllmScheduled, plugin_env, speculative_config

K_MAX = 4                          # the longest draft measured and scheduled
LOADS = (1, 2, 4, 8, 16, 32)       # concurrent requests measured
MAX_NUM_SEQS = max(LOADS)          # vLLM's max_num_seqs for every serving engine
FORWARD_ROWS = (1, 2, 4, 8, 16, 32, 64, 96, 128, 160)  # rows of vLLM's AR step measured: up to 32 x (K_MAX + 1)


def interpolate(curve: dict, x: float) -> float:
    """``curve`` (x -> y, at least two points) at ``x``: piecewise linear, the end segments' slopes beyond them."""
    xs = sorted(curve)
    require(len(xs) >= 2, f"a curve needs two points, got {curve}")
    i = min(max(sum(1 for v in xs if v <= x) - 1, 0), len(xs) - 2)
    x0, x1 = xs[i], xs[i + 1]
    return curve[x0] + (curve[x1] - curve[x0]) * (x - x0) / (x1 - x0)


@dataclass(frozen=True)
class BatchCosts:
    """What the model needs, measured on one machine: ``forward_ms`` (rows -> ms of vLLM's AR step at that many
    sequences), ``draft_fixed_ms`` and ``draft_step_ms`` (batch size -> ms, the module docstring) and
    ``accepted_at`` (a_1..a_K_MAX)."""

    forward_ms: dict
    draft_fixed_ms: dict
    draft_step_ms: dict
    accepted_at: tuple
    margin: float = 0.0

    def __post_init__(self) -> None:
        require(len(self.accepted_at) >= K_MAX, f"accepted_at needs {K_MAX} positions, got {self.accepted_at}")
        require(all(0 <= a <= 1 for a in self.accepted_at), f"accepted_at must be shares in [0, 1], got "
                                                              f"{self.accepted_at}")
        require(0 <= self.margin < 1, f"margin must be a share in [0, 1), got {self.margin}")

    @classmethod
    def from_steps(cls, forward_ms: dict, spec_step_ms: dict, accepted_at, margin: float = 0.0) -> "BatchCosts":
        """From vLLM's measured steps: ``forward_ms`` (rows -> ms) and ``spec_step_ms`` ({1: {b: ms}, K_MAX: {b: ms}},
        EAGLE-3's step at k = 1 and k = K_MAX): the two equations per batch size give the draft's fixed and per-token
        parts. Every time must be positive: a record whose calibration holds another is refused, naming the point."""
        points = {f"forward_ms[{n}]": v for n, v in forward_ms.items()} | \
            {f"spec_step_ms[k={k}][b={b}]": v for k, by_b in spec_step_ms.items() for b, v in by_b.items()}
        for name, ms in points.items():
            require(ms > 0, f"the calibration's {name} is {ms:.1f} ms: a step takes a positive time; measure "
                            f"again (bench --experiment vllm_throughput --rerun)")
        fixed, step = {}, {}
        for b in spec_step_ms[1]:
            extra = {k: spec_step_ms[k][b] - interpolate(forward_ms, b * (k + 1)) for k in (1, K_MAX)}
            step[b] = (extra[K_MAX] - extra[1]) / (K_MAX - 1)
            fixed[b] = extra[1] - step[b]
        return cls(dict(forward_ms), fixed, step, tuple(accepted_at), margin)

    def step_ms(self, b: int, k: int) -> float:
        if k == 0:
            return interpolate(self.forward_ms, b)
        return (interpolate(self.forward_ms, b * (k + 1)) + interpolate(self.draft_fixed_ms, b)
                + k * interpolate(self.draft_step_ms, b))

    def tokens_per_step(self, k: int) -> float:
        """Tokens one sequence commits per step: its verified token and the accepted drafts."""
        return 1 + sum(self.accepted_at[:k])

    def throughput(self, b: int, k: int) -> float:
        """Predicted aggregate tokens/s at ``b`` concurrent sequences drafting ``k``."""
        return b * self.tokens_per_step(k) / self.step_ms(b, k) * 1000

    def argmax_k(self, b: int, shortest: int = 0) -> int:
        """The draft length of the highest predicted throughput at ``b`` among k >= ``shortest`` (the model's best)."""
        return max(range(shortest, K_MAX + 1), key=lambda k: self.throughput(b, k))

    def best_k(self, b: int) -> int:
        """The model's best draft at ``b`` among k >= 1, taken only where it beats no speculation (k = 0) by more
        than ``margin``; else 0. The margin guards the one choice a wrong call makes costly, drafting at all."""
        top = self.argmax_k(b, shortest=1)
        return top if self.throughput(b, top) > (1 + self.margin) * self.throughput(b, 0) else 0


def calibration_noise(rounds: list[list[float]]) -> float:
    """The median over calibration points of the standard error of the point's mean, relative to that mean
    (stdev / sqrt(n) / mean; half the range at two rounds): how far the mean the model uses may sit from the step's
    true time (0 where no point has two rounds)."""
    from statistics import mean, median, stdev

    errors = [stdev(xs) / len(xs) ** 0.5 / mean(xs) for xs in rounds if len(xs) > 1 and min(xs) > 0]
    return median(errors) if errors else 0.0


def plan_schedule(costs: BatchCosts, max_num_seqs: int = MAX_NUM_SEQS) -> tuple:
    """The best k at every batch size 1..``max_num_seqs``, as vLLM's inclusive ``(first, last, k)`` ranges."""
    out = []
    for b in range(1, max_num_seqs + 1):
        k = costs.best_k(b)
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], b, k)
        else:
            out.append((b, b, k))
    return tuple(out)


def k_by_batch(schedule) -> dict:
    """The k a schedule's ``(first, last, k)`` ranges give each batch size they cover."""
    return {b: k for first, last, k in schedule for b in range(first, last + 1)}


def schedule_config(schedule: tuple, skip_idle_head: bool = True) -> VllmScheduled | None:
    """vLLM's EAGLE-3 mode drafting by ``schedule`` (its longest k as ``num_speculative_tokens``), with our plugin
    that skips the head at k = 0 unless ``skip_idle_head`` is False; None where the schedule never drafts (vLLM's AR
    is then the plan)."""
    top = max(k for _, _, k in schedule)
    return VllmScheduled(k=top, schedule=tuple(tuple(e) for e in schedule), skip_idle_head=skip_idle_head) \
        if top else None


def serve_command(schedule: tuple, model: str, head: str = str(HEAD_DIR), max_num_seqs: int = MAX_NUM_SEQS) -> str:
    """The ``vllm serve`` command line that applies ``schedule`` (no speculative config where it never drafts),
    preceded by our engine settings (``peers.vllm.ENGINE_ENV``) and the variables that load our plugin
    (``schedule_config``)."""
    import json
    import shlex

    cfg = schedule_config(schedule)
    args = [*SERVE_COMMAND, model, "--dtype", "bfloat16", "--max-num-seqs", str(max_num_seqs)]
    env = dict(ENGINE_ENV)
    if cfg is not None:
        args += ["--speculative-config", json.dumps(speculative_config(cfg, head), separators=(",", ":"))]
        env |= plugin_env(cfg.plugins()) if cfg.plugins() else {}
    return shlex.join([f"{k}={v}" for k, v in env.items()] + args)
