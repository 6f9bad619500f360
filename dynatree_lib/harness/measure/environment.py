"""The machine a record was measured on: device, library versions, git commit; and its memory bandwidth."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from ...core.engines import kernels, pages
from ...core.engines.ownership import ReleasedWeight
from ..setup import machine
from ..setup.paths import REPO


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# What can change a result, as git pathspecs: the library, the tools, the notebooks' sources, the data and the
# weights (not their cards, which are rendered from records), and what installs and runs them.
RESULT_INPUTS = ("dynatree_lib", "tools", "notebooks/*.py", "data", "weights", "setup.sh", "run_all.sh",
                 "requirements.txt", "pyproject.toml", ":(exclude,glob)weights/*/README.md")


def git_state() -> tuple[str | None, list[str] | None]:
    """(short commit, the changed or untracked files among ``RESULT_INPUTS``); (None, None) outside a checkout."""
    try:
        run = lambda *a: subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, timeout=10)
        head = run("rev-parse", "--short", "HEAD")
        if head.returncode != 0:
            return None, None
        status = run("status", "--porcelain", "--", *RESULT_INPUTS).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return None, None
    return head.stdout.strip() or None, [line[3:] for line in status]


def environment(device: str) -> dict:
    """Device (on a CPU: its ``machine.describe``, the bf16 kernels' instruction set, ``kernels.default_isa``, and
    the process's memory on huge pages, ``pages.huge_page_kib``),
    library versions, git commit (and whether a file that can change a result differed from it: which, up to 20),
    date: attached to every record."""
    import transformers

    commit, changed = git_state()
    dev_name = torch.cuda.get_device_name() if device.startswith("cuda") else cpu_name()
    cpu = {"machine": machine.describe(), "kernels": kernels.default_isa(),
           "huge_pages_kib": pages.huge_page_kib()} if not device.startswith("cuda") else {}
    return {"device": device, "device_name": dev_name, **cpu, "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": sys.version.split()[0],
            "platform": platform.platform(), "git_commit": commit,
            "git_dirty": None if changed is None else bool(changed),
            **({"git_dirty_files": changed[:20]} if changed else {}),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


class BandwidthProbe:
    """Memory read bandwidth: best of 5 sums over a ``mib`` MiB tensor of random values (larger than any
    cache; random, so that no page can be shared or compressed behind our back). The bandwidth of a shared
    VM drifts within minutes, so the harness probes after every AR generation and the bandwidth bound uses the
    probes of the same run. The tensor is allocated once and kept (a fresh one per probe would fault its pages
    in right before the next generation); ``release`` frees it."""

    def __init__(self, device: str = "cpu", mib: int = 512):
        self.device, self.mib, self.x = device, mib, None

    def read_gbs(self) -> float:
        if self.x is None:  # on the pages the weights get (core.engines.pages): the same TLB cost per byte
            self.x = torch.rand(self.mib * 2**18, device=self.device)
            pages.back_with_huge_pages([self.x])
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            self.x.sum().item()
            best = min(best, time.perf_counter() - t0)
        return self.x.numel() * 4 / best / 1e9

    def release(self) -> None:
        self.x = None


def weight_bytes(model) -> int:
    """Bytes of a model's parameters as stored (tied weights counted once; a weight its runner took over, as the
    model held it: ``core.engines.ownership``)."""
    seen, total = set(), 0
    for p in model.parameters():
        key = id(p) if isinstance(p, ReleasedWeight) else p.data_ptr()
        if key not in seen:
            seen.add(key)
            total += p.numel() * p.element_size()
    return total


def bound(model, probe: BandwidthProbe) -> dict:
    """The bandwidth bound of one-token decoding: every weight read once per token."""
    bw, nbytes = probe.read_gbs(), weight_bytes(model)
    return {"read_bandwidth_gbs": round(bw, 2), "weight_bytes": nbytes, "ms_per_token": round(nbytes / bw / 1e6, 3)}
