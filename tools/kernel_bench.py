"""Read speed of the bf16 linear kernel (``dynatree_lib.core.engines.kernels.linear``) on the cpu profile's weight
shapes.

    python tools/kernel_bench.py            # GB/s per row count, weights in cache and streamed from memory

"In cache": one layer's weight, called again and again (it stays in L2/L3): the kernel's own speed.
"Streamed": the same shape over 128 MB of distinct weights, in turn (out of cache, as decoding reads them).
torch's fp32 ``sum`` over 512 MiB is printed beside it: the machine's read bandwidth now.
Medians of 200 (in cache) or 10 (streamed) passes; nothing else should run meanwhile.
"""
from __future__ import annotations

import math
import statistics
import time

import torch

from dynatree_lib.harness.measure.environment import BandwidthProbe
from dynatree_lib.core.engines import kernels

SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate+up": (3072, 576), "down": (576, 1536)}  # SmolLM2-135M
ROWS = (1, 2, 4, 8, 16)


def median_s(f, n: int) -> float:
    for _ in range(3):
        f()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    if not kernels.available():
        raise SystemExit("the bf16 kernel does not run here (it needs AVX512-BF16 and a C++ compiler)")
    torch.manual_seed(0)
    print(f"read bandwidth (fp32 sum over 512 MiB, best of 5): {BandwidthProbe('cpu').read_gbs():.1f} GB/s")
    print(f"{'weight':>8} {'MB':>5} | " + " | ".join(f"{k:>2} rows: cache / stream" for k in ROWS))
    for name, (n, d) in SHAPES.items():
        mb = n * d * 2 / 1e6
        ws = [kernels.pack(torch.randn(n, d, dtype=torch.bfloat16)) for _ in range(math.ceil(128 / mb))]
        cells = []
        for k in ROWS:
            x = torch.randn(k, d, dtype=torch.bfloat16)
            hot = median_s(lambda: kernels.linear(x, ws[0]), 200)
            cold = median_s(lambda: [kernels.linear(x, w) for w in ws], 10) / len(ws)
            cells.append(f"{mb / hot / 1e3:6.1f} / {mb / cold / 1e3:5.1f} GB/s")
        print(f"{name:>8} {mb:5.2f} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
