"""The peak bf16 multiply throughput of this CPU's cores by the instructions the kernels multiply with
(``csrc/peak_bf16.c``: register-resident loops of VDPBF16PS and TDPBF16PS on n threads): the compute roof of the
engine's roofline (``harness.experiments.roofline``), beside the read bandwidth, the memory roof.

The loop is plain C with no torch headers, built once with the system's C compiler beside the kernels' builds (a
name that hashes the source and the flags) and loaded with ctypes; AMX where the compiler and the CPU have it and Linux
grants the tile state. ``unavailable()`` says why it cannot run here (no AVX512-BF16, no compiler)."""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from . import kernels

SOURCE = Path(__file__).with_name("csrc") / "peak_bf16.c"
FLAGS = ["-O2", "-mavx512f", "-mavx512bf16", "-pthread", "-shared", "-fPIC"]
AMX_FLAGS = ["-mamx-tile", "-mamx-bf16"]
ISA_CODES = {kernels.AVX512: 0, kernels.AMX: 1}


def cache_dir() -> Path:
    """Beside the kernels' builds (torch's extensions root)."""
    return kernels.build_folder().parent / "peak_bf16"


@functools.cache
def library() -> ctypes.CDLL | None:
    """The built loop (None where it cannot build or run here: ``unavailable``)."""
    if unavailable_here() is not None:
        return None
    for flags in (FLAGS + AMX_FLAGS, FLAGS):
        tag = hashlib.sha256(SOURCE.read_bytes() + " ".join(flags).encode()).hexdigest()[:10]
        so = cache_dir() / f"peak_bf16_{tag}.so"
        if not so.exists():
            so.parent.mkdir(parents=True, exist_ok=True)
            tmp = so.with_suffix(f".{os.getpid()}.tmp")
            if subprocess.run([compiler(), *flags, str(SOURCE), "-o", str(tmp)], capture_output=True).returncode:
                continue  # a compiler without the AMX intrinsics: build the AVX512 loop alone
            os.replace(tmp, so)
        lib = ctypes.CDLL(str(so))
        lib.peak_seconds.restype = lib.peak_flops_per_iter.restype = ctypes.c_double
        lib.peak_seconds.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long]
        lib.peak_flops_per_iter.argtypes = [ctypes.c_int]
        return lib
    return None


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def unavailable_here() -> str | None:
    if not kernels.cpu_has_avx512_bf16():
        return "the CPU has no AVX512-BF16 (VDPBF16PS)"
    if compiler() is None:
        return "no C compiler (cc) to build the loop"
    return None


def unavailable() -> str | None:
    """Why the peak cannot be measured here (None: it can)."""
    return unavailable_here() or (None if library() is not None else f"{SOURCE.name} did not build")


def isas() -> tuple[str, ...]:
    """The instruction sets whose peak can be measured here: AVX512-BF16, and AMX where the CPU, the build and
    Linux allow it."""
    lib = library()
    if lib is None:
        return ()
    amx = kernels.cpu_has_amx() and lib.peak_has_amx() and lib.peak_amx_grant() == 0
    return (kernels.AVX512,) + ((kernels.AMX,) if amx else ())


def peak_gflops(isa: str, threads: int, *, seconds: float = 0.3, repeats: int = 3) -> float:
    """GFLOP/s of ``threads`` threads each running ``isa``'s loop for about ``seconds`` (the best of ``repeats``:
    a shared machine can only slow a loop down)."""
    if isa not in isas():
        raise ValueError(f"isa {isa!r} cannot be measured here (this machine measures {isas()}; "
                         f"{unavailable() or ''})")
    lib, code = library(), ISA_CODES[isa]
    iters = 1000
    while (t := lib.peak_seconds(code, threads, iters)) < seconds / 10:  # size the loop to the time asked
        iters *= 4
    iters = max(1, int(iters * seconds / t))
    best = min(lib.peak_seconds(code, threads, iters) for _ in range(repeats))
    return lib.peak_flops_per_iter(code) * iters * threads / best / 1e9
