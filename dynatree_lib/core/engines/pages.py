"""Weights and caches on 2 MiB pages where Linux allows.

A one-token forward streams every weight once. On 4 KiB pages every 64 cache lines of a stream cost a TLB miss (in a
VM, a nested page walk), and the streams of a forward are short, so those misses stall them; on 2 MiB pages they are
512 times rarer. ``back_with_huge_pages`` leaves the bytes where they are: ``madvise(MADV_HUGEPAGE)`` marks a tensor's
whole 2 MiB stretches and ``MADV_COLLAPSE`` (Linux 6.1 on) moves their pages into huge pages now. Where Linux refuses
(another OS, transparent huge pages off, an older kernel) nothing changes, and the values never do.
``DYNATREE_HUGE_PAGES=0`` turns it off (to compare the two).
"""
from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Iterable

from torch import Tensor

HUGE_PAGE = 2 << 20
MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25


@functools.cache
def _madvise():
    """libc's madvise (None where there is none to call: not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        f = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    f.argtypes, f.restype = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int), ctypes.c_int
    return f


def enabled() -> bool:
    return os.environ.get("DYNATREE_HUGE_PAGES", "1") != "0" and _madvise() is not None


def back_with_huge_pages(tensors: Iterable[Tensor]) -> int:
    """Ask for huge pages under each CPU tensor's whole 2 MiB stretches; returns the bytes Linux collapsed now (0
    where it declined or there is nothing to do: a tensor under 4 MiB may hold no whole stretch)."""
    if not enabled():
        return 0
    madvise, done, seen = _madvise(), 0, set()
    for t in tensors:
        if t.device.type != "cpu" or t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        start = -(-t.data_ptr() // HUGE_PAGE) * HUGE_PAGE
        end = (t.data_ptr() + t.nbytes) // HUGE_PAGE * HUGE_PAGE
        if end > start:
            madvise(start, end - start, MADV_HUGEPAGE)
            done += (end - start) if madvise(start, end - start, MADV_COLLAPSE) == 0 else 0
    return done


def rollup_kib(pid: int | str = "self", names: tuple = ("AnonHugePages",)) -> dict | None:
    """The process's ``/proc/<pid>/smaps_rollup`` lines ``names``, KiB each (None where Linux does not say: not Linux,
    or the process is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            found = {name: int(value.split()[0]) for name, _, value in (line.partition(":") for line in f)
                     if name in names}
    except OSError:
        return None
    return found if len(found) == len(names) else None


def huge_page_kib() -> int | None:
    """This process's anonymous memory on huge pages, KiB (``AnonHugePages``; None where Linux does not say)."""
    return (rollup_kib() or {}).get("AnonHugePages")
