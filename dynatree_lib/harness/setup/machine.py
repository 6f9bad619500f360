"""The machine a record is measured on, and where its records live.

A ratio belongs to its machine: the same code gains more on one CPU kind than on another because verification costs
differ (``costs.json``). So every record names its CPU (``describe``: vendor, model, the ISA flags our kernels choose
by, cores, L3, and the CPU family and model numbers, which tell generations apart where a VM's model name does not: "AMD
EPYC" is family 25 or 26), and a profile's records of one machine kind live in one folder: ``results/<profile>/`` holds
the profile's reference machine's (the committed cpu records: an AMD EPYC VM), ``results/<profile>@<kind>/`` another
kind's (``Models.machine``). A clean clone renders both on any machine; an experiment measures into a folder only on the
machine kind it holds (``check_here``).
"""
from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

# The CPU flags that decide which of our kernels run (AVX512-BF16 lines, AMX tiles) and how fast.
ISA_FLAGS = ("avx512f", "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")
VENDORS = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}


@functools.cache
def cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty off Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.split("\n\n")[0].splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip()] = v.strip()
    return fields


def l3_kib() -> int | None:
    """The L3 cache's size in KiB as Linux reports it for cpu0 (None where it does not)."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if (index / "level").read_text().strip() == "3":
                size = (index / "size").read_text().strip()
                return int(size[:-1]) * (1024 if size.endswith("M") else 1) if size[-1] in "KM" else int(size)
        except (OSError, ValueError):
            continue
    return None


def kind_of(vendor: str, flags) -> str:
    """A machine kind's short name: vendor and the widest bf16 path our kernels have on it (``amd-avx512bf16``,
    ``intel-amx``, ``intel-avx512bf16``, ...)."""
    flags = set(flags)
    isa = "amx" if {"amx_tile", "amx_bf16"} <= flags else "avx512bf16" if "avx512_bf16" in flags else "nobf16"
    return f"{vendor}-{isa}"


def cpuinfo_number(info: dict, field: str) -> int | None:
    """A numeric field of ``cpuinfo()``'s ``info`` ("cpu family", "model"), None where absent or not a number."""
    value = info.get(field, "")
    return int(value) if value.isdigit() else None


def describe() -> dict:
    """What a record says of its CPU: vendor, model name, kind (``kind_of``), the ``ISA_FLAGS`` it has, cores, L3,
    family and model numbers."""
    info = cpuinfo()
    vendor = VENDORS.get(info.get("vendor_id", ""), info.get("vendor_id", platform.machine()).lower() or "unknown")
    flags = [f for f in ISA_FLAGS if f in info.get("flags", "").split()]
    return {"vendor": vendor, "model": info.get("model name", platform.processor() or platform.machine()),
            "kind": kind_of(vendor, flags), "isa_flags": flags, "cores": os.cpu_count(), "l3_kib": l3_kib(),
            "cpu_family": cpuinfo_number(info, "cpu family"), "cpu_model": cpuinfo_number(info, "model")}


def here() -> str:
    """This machine's kind."""
    return describe()["kind"]


def kind_of_record(env: dict) -> str | None:
    """The machine kind a record's ``environment`` names: its ``machine`` (records from issue 77 on), else read off
    its ``device_name`` (the earlier cpu records, all measured on AMD EPYC VMs with AVX512-BF16 and no AMX)."""
    if env.get("machine"):
        return env["machine"]["kind"]
    name = env.get("device_name") or ""
    return "amd-avx512bf16" if name.startswith("AMD EPYC") else None
