"""Peak memory of one generation."""
from __future__ import annotations

import os
from pathlib import Path

import torch


class PeakMemory:
    """Peak memory during a block: CUDA max allocated, or on CPU the process's peak RSS within the block (its
    high-water mark reset at entry and read from /proc at the end: the memory experiment's runs are never the
    timed ones). Weights and caches held before the block count too."""

    def __init__(self, device: str):
        self.device, self.peak_mb = device, 0.0

    def __enter__(self):
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            import psutil

            self._proc = psutil.Process()
            self._reset_hwm()
        return self

    def _reset_hwm(self) -> None:
        try:  # Linux: writing 5 to clear_refs resets VmHWM (peak RSS) to the current RSS
            Path(f"/proc/{os.getpid()}/clear_refs").write_text("5")
        except OSError:
            pass

    def __exit__(self, *exc):
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            self.peak_mb = torch.cuda.max_memory_allocated() / 2**20
        else:
            hwm = None
            try:
                for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        hwm = int(line.split()[1]) * 1024
            except OSError:
                pass
            self.peak_mb = (hwm or self._proc.memory_info().rss) / 2**20
