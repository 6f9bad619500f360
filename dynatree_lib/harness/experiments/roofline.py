"""The engine's roofline on this machine (issue 91): how long a k-row forward of the target could take at best,
beside how long it takes.

Two roofs, measured here: the read bandwidth (every forward reads each weight and the context's keys and values once;
the fastest of ``BandwidthProbe``'s sums, here, around the curve and around the phase profiles below, and our matmul
kernel streaming a weight far beyond the caches: a roof is the best the machine gave) and the peak bf16 multiply
throughput of the cores in use (``core.engines.peak``: the instruction the kernels multiply with, on 1 and on the
profile's threads). The floor of a k-row forward is max(bytes / bandwidth, FLOPs(k) / peak); FLOPs(k) counts the matmuls
(2 per weight per row) and attention over the context (4 x hidden per cached token per layer per row), at the bandwidth
the curve ran in (``curve_bandwidth``: the VM's flips between phases). The floor of c(k), the k-row forward over the
one-row forward, is floor(k) / floor(1). The measured forwards are timed as the forward-cost curves time the target's
(``costs.forward_costs``, argmax and host sync included), in the same process, right after the roofs, between two
probes, and c(k) is the median over its rounds of the k-row forward over the one-row forward of the same round (a phase
of the VM then hits both alike); then a profile of the fused forward says where each k-row forward's time goes, step by
step (``step_profile``), and one-row profiles, each between two probes, say where it goes in each of the VM's bandwidth
phases (``phase_profile``; how many: ``RooflineSettings``, ``--set roofline.phase_rounds=...``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from statistics import median
from pathlib import Path
from typing import ClassVar

import torch

from ...core.engines import kernels, pages, peak
from ...core.engines.hf import as_runner
from ...core.engines.static import StaticRunner
from ..measure.environment import BandwidthProbe, environment, weight_bytes
from ..measure.store import needs_run, results_path, write_report
from ..setup.profiles import Profile
from .catalog import Document, Settings, experiment
from .costs import KS, forward_costs

PROBES = 3  # bandwidth probes (each the best of five sums): the roof is the best of them
PROFILE_KS, PROFILE_REPS = (1, 16, 64), 20  # the k-row forwards profiled step by step, and how many of each
STREAM_MB, STREAM_REPS = 256, 5  # the weight the kernel streams for its own read roof (beyond any cache), best of


@dataclass(frozen=True)
class RooflineSettings(Settings):
    """``phase_rounds``: one-row profiles, each between two probes (``phase_profile``: where a token's time goes in
    each bandwidth phase; 0: none)."""

    part: ClassVar[str] = "roofline"
    phase_rounds: int = 240


def kv_width(cfg) -> int:
    """Key (or value) features per token per layer (a config without grouped-query heads has one per head)."""
    heads = cfg.num_attention_heads
    return (getattr(cfg, "num_key_value_heads", None) or heads) * (cfg.hidden_size // heads)


def target_matmul_params(cfg) -> int:
    """The weights a one-token forward multiplies by: every layer's matmuls and the output head (Llama: q, k, v, o
    and the gated MLP's three; GPT-NeoX: the fused qkv, dense and its two MLP matmuls)."""
    h, i, n, v = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.vocab_size
    if cfg.model_type == "gpt_neox":
        return n * (4 * h * h + 2 * h * i) + v * h
    if cfg.model_type != "llama":
        raise ValueError(f"the roofline counts the matmuls of Llama and GPT-NeoX targets, not {cfg.model_type!r}")
    return n * (h * h * 2 + 2 * h * kv_width(cfg) + 3 * h * i) + v * h


def shape(cfg, context: int, element_bytes: int) -> dict:
    """FLOPs per row (matmuls, attention over ``context`` cached tokens) and the context's key and value bytes."""
    h, n = cfg.hidden_size, cfg.num_hidden_layers
    return {"matmul_flops_per_row": 2 * target_matmul_params(cfg), "attention_flops_per_row": 4 * n * context * h,
            "kv_bytes": 2 * n * context * kv_width(cfg) * element_bytes}


def curve_bandwidth(doc: dict) -> float:
    """The read bandwidth the floors use: the mean of the probes right before and after the measured curve (the VM's
    bandwidth flips between phases within seconds, and a curve measured in the slow one is set against that phase's
    floor, not the fast one's); a record without them, its roof."""
    probes = doc.get("curve_probes_gbs")
    return sum(probes) / len(probes) if probes else doc["bandwidth_gbs"]


def floors(doc: dict) -> list[dict]:
    """Per k of the measured curve: the floor in ms at the curve's own bandwidth (``curve_bandwidth``), which roof
    sets it, the floor of c(k), and measured / floor."""
    bw, gflops = curve_bandwidth(doc), doc["peak_gflops_used"]
    nbytes = doc["weight_bytes"] + doc["kv_bytes"]
    per_row = doc["matmul_flops_per_row"] + doc["attention_flops_per_row"]
    memory_ms = nbytes / bw / 1e6

    def floor(k: int) -> tuple[float, str]:
        compute_ms = k * per_row / gflops / 1e6 if gflops else 0.0
        return (memory_ms, "bandwidth") if memory_ms >= compute_ms else (compute_ms, "compute")

    one, measured_one = floor(1)[0], doc["measured_ms"]["1"]
    rows = []
    paired = doc.get("c_paired") or {}
    for k, ms in doc["measured_ms"].items():
        f, roof = floor(int(k))
        c = paired.get(k, ms / measured_one)
        rows.append({"k": int(k), "measured_ms": ms, "floor_ms": f, "roof": roof, "measured_over_floor": ms / f,
                     "c": c, "c_floor": f / one, "c_over_floor": c / (f / one)})
    return rows


def measure(profile: Profile, rounds: int) -> dict:
    """The roofs, the target's shape and its measured k-row forwards (module docstring); ``rounds`` one-row
    profiles between probes (``phase_profile``)."""
    if profile.models.threads:
        torch.set_num_threads(profile.models.threads)
    target, _, _ = profile.load_pair(profile.models.dtype, with_draft=False)
    runner = as_runner(target)
    context = max(profile.protocol.L_max.values())
    probe = BandwidthProbe(profile.models.device)
    probes = [probe.read_gbs() for _ in range(PROBES)]
    isa = kernels.default_isa() or kernels.AVX512
    stream = kernel_stream_gbs(isa)
    threads = profile.models.threads or torch.get_num_threads()
    peaks = {isa: {str(n): peak.peak_gflops(isa, n) for n in dict.fromkeys((1, threads))} for isa in peak.isas()}
    element = next(runner.model.parameters()).element_size()
    before = probe.read_gbs()
    per_round = forward_costs(runner, context, ks=KS, argmax=True, per_round=True)
    curve_probes = [before, probe.read_gbs()]
    phases = phase_profile(runner, probe, context, rounds)
    phase_probes = [g for r in phases or [] for g in (r["before_gbs"], r["after_gbs"])]
    return {"profile": profile.name, "engine": str(profile.models.engine), "isa": isa, "threads": threads,
            "context": context, "bandwidth_probes_gbs": probes, "kernel_stream_gbs": stream,
            "bandwidth_gbs": max(probes + phase_probes + curve_probes + ([stream] if stream else [])),
            "curve_probes_gbs": curve_probes,
            "peak_gflops": peaks, "peak_gflops_used": peaks.get(isa, {}).get(str(threads)),
            "peak_unavailable": peak.unavailable(), "weight_bytes": weight_bytes(runner.model),
            **shape(runner.model.config, context, element),
            "measured_ms": {str(k): median(ms) for k, ms in per_round.items()},
            "c_paired": {str(k): median(a / b for a, b in zip(ms, per_round[1])) for k, ms in per_round.items()},
            "step_profile": step_profile(runner, context), "phase_profile": phases,
            "environment": environment(profile.models.device)}


def kernel_stream_gbs(isa: str, megabytes: int = STREAM_MB, reps: int = STREAM_REPS) -> float | None:
    """The read bandwidth our matmul kernel reaches: one row against a packed bf16 weight of ``megabytes``, far
    beyond any cache, best of ``reps`` (None where the kernels are not built). A probe that sums with torch can read
    slower than the kernel streams; the roof is the faster of the two."""
    if not kernels.available():
        return None
    d = 2048
    w = kernels.pack(torch.randn(megabytes * 2**20 // (2 * d) // 16 * 16, d, dtype=torch.bfloat16))
    pages.back_with_huge_pages([w])  # the pages the engine's weights get
    x = torch.randn(1, d, dtype=torch.bfloat16)
    best = float("inf")
    for _ in range(reps + 1):  # the first warms the code, not the weight (it never fits a cache)
        t0 = time.perf_counter()
        kernels.linear(x, w, isa)
        best = min(best, time.perf_counter() - t0)
    return w.numel() * w.element_size() / best / 1e9


def step_profile(runner, context: int, ks=PROFILE_KS, reps: int = PROFILE_REPS) -> dict | None:
    """Where a k-row forward's time goes, per step of the fused forward (``kernels.PROFILE_STEPS``): ms per
    forward, the threads' mean, and the wall time of the same forwards (argmax and host sync included); None where
    the forward is not the fused one."""
    if not profiled(runner):
        return None
    ids = torch.randint(min(1000, runner.model.config.vocab_size), (context + max(ks),),
                        generator=torch.Generator().manual_seed(0))
    runner.reset()
    runner.forward(ids[:context], torch.arange(context), last_only=True)
    out = {}
    for k in ks:
        new, pos = ids[context:context + k], torch.arange(context, context + k)
        for clock in (False, True):  # two warm-up forwards, then the timed ones
            kernels.forward_profile(clock)
            t0 = time.perf_counter()
            for _ in range(reps if clock else 2):
                runner.argmax(new, pos).tolist()
                runner.truncate(context)
            wall = (time.perf_counter() - t0) / reps
        steps = kernels.forward_profile(False).mean(0) / reps * 1e3
        out[str(k)] = {"wall_ms": wall * 1e3, "steps_ms": dict(zip(kernels.PROFILE_STEPS, steps.tolist()))}
    return out


def profiled(runner) -> bool:
    """Whether the runner's forward is the fused one, whose steps ``kernels.forward_profile`` times."""
    return isinstance(runner, StaticRunner) and runner.net.fused


def phase_profile(runner, probe: BandwidthProbe, context: int, rounds: int) -> list[dict] | None:
    """``rounds`` one-row step profiles (``step_profile``), each between two bandwidth probes (``before_gbs``,
    ``after_gbs``): a VM's read bandwidth flips between phases within seconds, so one profile describes one phase;
    these say where a token's time goes against the bound of each (``reporting.roofline.phase_table``). Releases
    the probe's buffer. None where the forward is not the fused one, or no rounds."""
    out = []
    for _ in range(rounds if profiled(runner) else 0):
        before = probe.read_gbs()
        one = step_profile(runner, context, ks=(1,))["1"]
        out.append({"before_gbs": before, "after_gbs": probe.read_gbs(), **one})
    probe.release()
    return out or None


def run_roofline(profile: Profile, rerun: bool = False, root: Path | None = None, render_only: bool = False) -> Path:
    """``results/<profile>/roofline.json`` (module docstring); a GPU profile has none (its roofs are not these)."""
    path = results_path(Roofline.name, profile, root)
    if profile.models.device != "cpu" or not needs_run(path, rerun, render_only, profile):
        return path
    write_report(path, measure(profile, Roofline().settings_of(profile).phase_rounds), replace=rerun)
    return path


@experiment
class Roofline(Document):
    """The engine's roofline on the machine at hand, rendered by notebook 00 per machine kind."""
    name = "roofline"
    notebook = "00_setup"
    make = run_roofline
    settings = RooflineSettings

    def applies(self, p: Profile, root: Path | None = None) -> bool:
        return p.models.device == "cpu"
