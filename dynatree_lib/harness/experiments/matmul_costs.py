"""The target's matmuls alone, on each instruction set our kernels run here and on torch's own bf16 matmul
(oneDNN), timed in one process in interleaved rounds (``matmuls`` report): whether our one-token matmuls read the
weights at least as fast as the library does, and how each path's cost grows with the rows of a verification.

Every round times, for each path and each row count k, one pass over every matmul weight of the target in the
order a forward reads them (30 layers' qkv, o, gate/up and down, then the output layer), from the weights as that
path holds them: packed once for our kernels, plain bf16 for torch. The report keeps each path's median over the
rounds, per k.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ...core.engines import kernels
from ..measure.environment import environment
from ..setup.profiles import Profile
from ..measure.store import needs_run, results_path, write_report
from .catalog import Document, experiment

ROWS = (1, 2, 16, 32, 64)
ROUNDS = 7
TORCH = "torch-onednn"  # torch's F.linear on the plain bf16 weights (oneDNN on a CPU)


def target_weights(profile: Profile) -> list[torch.Tensor]:
    """The target's matmul weights in bf16, in the order a forward reads them (the fused q/k/v and gate/up as the
    engine fuses them), then the output layer."""
    from ..setup.models import load_model

    model, _ = load_model(profile.models.target, "cpu", "bfloat16")
    out = []
    for layer in model.model.layers:
        a, m = layer.self_attn, layer.mlp
        out += [torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), a.o_proj.weight,
                torch.cat([m.gate_proj.weight, m.up_proj.weight]), m.down_proj.weight]
    out.append(model.get_output_embeddings().weight)
    return [w.detach().contiguous() for w in out]


def timed(fn, reps: int = 3) -> float:
    """The best of ``reps`` calls of ``fn`` after a warm one, in ms."""
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def run_matmuls(profile: Profile, rerun: bool = False, root: Path | None = None, render_only: bool = False) -> Path:
    path = results_path("matmuls", profile, root)
    if not needs_run(path, rerun, render_only, profile):
        return path
    if not kernels.available():
        raise ValueError("the matmuls report compares our bf16 kernels with torch's: they do not run here "
                         "(a CPU with AVX512-BF16 and g++/ninja: docs/engine.md)")
    if profile.models.threads:
        torch.set_num_threads(profile.models.threads)
    plain = target_weights(profile)
    packed = [kernels.pack(w) for w in plain]
    inputs = {k: {d: torch.randn(k, d, generator=torch.Generator().manual_seed(k)).to(torch.bfloat16)
                  for d in {w.shape[1] for w in plain}} for k in ROWS}
    paths = {isa: (lambda x, i, isa=isa: kernels.linear(x, packed[i], isa)) for isa in kernels.isas()}
    paths[TORCH] = lambda x, i: F.linear(x, plain[i])
    ms: dict = {p: {k: [] for k in ROWS} for p in paths}
    for _ in range(ROUNDS):
        for k in ROWS:
            for name, mm in paths.items():
                ms[name][k].append(timed(lambda: [mm(inputs[k][w.shape[1]], i) for i, w in enumerate(plain)]))
    medians = {p: {k: statistics.median(v) for k, v in per.items()} for p, per in ms.items()}
    doc = {"rows": list(ROWS), "rounds": ROUNDS, "weight_bytes": sum(w.nbytes for w in plain),
           "median_ms": medians, "ms": ms, "environment": environment("cpu")}
    write_report(path, doc, replace=rerun)
    return path


@experiment
class Matmuls(Document):
    name = "matmuls"
    notebook = "00_setup"  # it renders the record measured on each machine kind
    make = run_matmuls
