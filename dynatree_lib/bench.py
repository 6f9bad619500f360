"""Benchmark harness primitives: cells, one measured generation per row, the JSON store, environment.

A record is one (dataset, method, configuration, T, L_max, dtype) cell: its configuration, model ids and
weights, prompt ids, per-prompt rows (metrics of ``metrics.prompt_metrics`` plus agreement with AR and a
hash of the tokens), aggregates (mean, std) and the environment. Records live in
``results/<profile>/<experiment>.json`` and are keyed by a hash of everything that defines them: a rerun
of a finished cell is skipped, a new cell is appended, measured rows of unfinished cells are
checkpointed under ``partial`` (so an interrupted run resumes at the next prompt), the file is replaced
atomically after every row, and no finished record is ever overwritten (a rerun moves the file aside).
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .data import Prompt
from .methods import generate
from .metrics import aggregate, prompt_metrics
from .models import REPO

RESULTS = REPO / "results"
SCHEMA = 2


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: str) -> dict:
    """Device, library versions, git commit, date: attached to every record."""
    import transformers

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, timeout=5).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "dynatree_lib"], cwd=REPO,
                                    capture_output=True, text=True, timeout=5).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    dev_name = torch.cuda.get_device_name() if device.startswith("cuda") else cpu_name()
    return {"device": device, "device_name": dev_name, "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": sys.version.split()[0],
            "platform": platform.platform(), "git_commit": commit, "git_dirty": dirty,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


_PROBE: dict = {}  # device -> the bandwidth probe's tensor, kept for the process (see read_bandwidth_gbs)


def read_bandwidth_gbs(device: str = "cpu", mib: int = 512) -> float:
    """Memory read bandwidth: best of 5 sums over a ``mib`` MiB tensor of random values (larger than any
    cache; random, so that no page can be shared or compressed behind our back). On the cpu profile's VMs
    it drifts with the host's load (31 to 66 GB/s within minutes, same probe), so the harness probes it
    after every AR generation (``measure``) and the bound uses the probes of the same run. The tensor is
    allocated once per device and kept: a fresh 512 MiB per probe (page faults, then reclaim) appeared to
    slow the generation that followed it (8 alternating rounds, noisy: +1.1 vs +0.2 ms per token)."""
    x = _PROBE.get(device)
    if x is None or x.numel() != mib * 2**18:
        _PROBE.pop(device, None)
        x = _PROBE[device] = torch.rand(mib * 2**18, device=device)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        x.sum().item()
        best = min(best, time.perf_counter() - t0)
    return x.numel() * 4 / best / 1e9


def release_probe() -> None:
    """Free the bandwidth probe's tensors (a memory measurement must not count them)."""
    _PROBE.clear()


def weight_bytes(model) -> int:
    """Bytes of a model's parameters as stored (tied weights counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def bound(model, device: str) -> dict:
    """The bandwidth bound of one-token decoding: every weight read once per token."""
    bw, nbytes = read_bandwidth_gbs(device), weight_bytes(model)
    return {"read_bandwidth_gbs": round(bw, 2), "weight_bytes": nbytes, "ms_per_token": round(nbytes / bw / 1e6, 3)}


def config_dict(method) -> dict:
    """A method's configuration as logged (JSON types: tuples become lists, so it equals a record's)."""
    return {} if method is None else json.loads(json.dumps({"type": type(method).__name__, **dataclasses.asdict(method)}))


def record_key(**parts) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def tokens_hash(tokens: list[int]) -> str:
    return hashlib.sha1(json.dumps(tokens).encode()).hexdigest()[:16]


class ResultStore:
    """One experiment's JSON file: an append-only list of keyed records, written atomically."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.data = {"schema": SCHEMA, "records": []}
        if self.path.exists():
            self.data = json.loads(self.path.read_text())
            if self.data.get("schema") != SCHEMA:
                raise ValueError(f"{self.path} has schema {self.data.get('schema')}, expected {SCHEMA}; "
                                 "rerun the experiment (rerun=True moves the old file aside)")

    @property
    def records(self) -> list[dict]:
        return self.data["records"]

    def get(self, key: str) -> dict | None:
        return next((r for r in self.records if r["key"] == key), None)

    def partial(self, key: str) -> list[dict]:
        """Rows already measured for an unfinished record (interleaved runs checkpoint every row)."""
        return list(self.data.get("partial", {}).get(key, []))

    def save_partial(self, key: str, rows: list[dict]) -> None:
        self.data.setdefault("partial", {})[key] = rows
        self._write()

    def add(self, record: dict) -> None:
        if self.get(record["key"]) is not None:
            raise ValueError(f"record {record['key']} already in {self.path}; refusing to overwrite it")
        self.records.append(record)
        self.data.get("partial", {}).pop(record["key"], None)
        self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=float))
        os.replace(tmp, self.path)

    def archive(self) -> Path | None:
        """Move the file aside (for an explicit rerun) so no finished record is lost."""
        if not self.path.exists():
            return None
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        dest = self.path.with_name(f"{self.path.stem}.{stamp}.bak.json")
        os.replace(self.path, dest)
        self.data = {"schema": SCHEMA, "records": []}
        return dest


class PeakMemory:
    """Peak memory during a block: CUDA max allocated, or on CPU the process's peak RSS within the block (its
    high-water mark reset at entry and read from /proc at the end, no sampling thread: the memory
    experiment's runs are never the timed ones). Weights and caches held before the block count too; the
    harness's bandwidth probe does not (released on entry)."""

    def __init__(self, device: str):
        self.device, self.peak_mb = device, 0.0

    def __enter__(self):
        release_probe()  # 512 MiB of the harness's own, not the generation's (CUDA's peak counts it too)
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


@dataclass
class Cell:
    """One benchmark cell: a method on a dataset at one (T, L_max) and precision."""

    dataset: str
    method: str          # family: "ar", "linear", "fixed_tree", "dynatree", "talon", "hf_assisted", "streaming_spec"
    label: str           # what tables show, e.g. "DynaTree (paper settings)" or "fixed D=5 B=2 tau=0.1"
    config: object       # the method's configuration dataclass, None for AR
    T: int
    L_max: int
    dtype: str
    tags: dict = dataclasses.field(default_factory=dict)  # sweep coordinates, role ("timed", "exact", ...)


def run_cell(cell: Cell, target, draft, prompt: Prompt, kv_mode: str, record_trees: int = 0):
    return generate(target, prompt.ids, cell.T, draft=draft, method=cell.config, kv_mode=kv_mode,
                    record_trees=record_trees)


def warm_up(cell: Cell, target, draft, prompts: list[Prompt], warmup: int, kv_mode: str) -> None:
    """``warmup`` discarded runs of the cell (on the first prompts)."""
    for i in range(warmup):
        run_cell(cell, target, draft, prompts[i % len(prompts)], kv_mode)


def agreement(ref: list[int] | None, tokens: list[int]) -> dict:
    """How a generation compares with AR's tokens for the same prompt and precision."""
    if ref is None:
        return {"equals_ar": None, "ar_agreement": None, "first_divergence": None}
    first = next((i for i, (a, b) in enumerate(zip(ref, tokens)) if a != b), min(len(ref), len(tokens)))
    return {"equals_ar": ref == tokens, "ar_agreement": sum(a == b for a, b in zip(ref, tokens)) / len(ref),
            "first_divergence": first}


def needs_run(path: Path, rerun: bool, render_only: bool, threads: int = 0) -> bool:
    """Whether a cached-JSON measurement must run: not when ``path`` exists (unless ``rerun``); a missing
    file under ``render_only`` is an error. Sets torch's thread count when it will run."""
    if path.exists() and not rerun:
        return False
    if render_only:
        raise FileNotFoundError(f"render-only: {path} is missing; run without --render first")
    if threads:
        torch.set_num_threads(threads)
    return True


@torch.no_grad()
def divergence_gap(target, prompt_ids: torch.Tensor, ref: list[int], at: int) -> float:
    """The target's top-1 minus top-2 logit where a generation first left AR's path, recomputed in one
    uncached forward over the prompt and AR's tokens before it. A gap of ~1e-5 in fp32 is a numerical
    near-tie (reduction order differs between a k-token verification and a 1-token step); a decoder bug
    shows up as a divergence with a wide gap."""
    model = getattr(target, "model", target)
    ids = torch.cat([prompt_ids.cpu(), torch.tensor(ref[:at], dtype=torch.long)])[None]
    top2 = model(input_ids=ids.to(model.device)).logits[0, -1].float().topk(2).values
    return float(top2[0] - top2[1])


def measure(cell: Cell, target, draft, prompt: Prompt, kv_mode: str, ar_tokens: list[int] | None,
            record_trees: int = 0, memory: bool = False) -> dict:
    """One measured generation -> one row: metrics and agreement with AR's tokens. AR rows keep their
    tokens (``output_ids``) so later or resumed cells can be compared with them. ``memory``: the row also
    gets the generation's peak memory (``peak_mem_mb``), measured around the generation alone: AR's
    bandwidth probe (a 512 MiB tensor) and the divergence check (an uncached forward) come after it."""
    dev = next(getattr(target, "model", target).parameters()).device
    mem = PeakMemory(str(dev)) if memory else contextlib.nullcontext()
    with mem:
        res = run_cell(cell, target, draft, prompt, kv_mode, record_trees)
    ref = res.tokens if cell.config is None else ar_tokens
    row = {"prompt_id": prompt.id, "prompt_len": int(prompt.ids.numel()), **prompt_metrics(res),
           "tokens_sha": tokens_hash(res.tokens), **agreement(ref, res.tokens)}
    if memory:
        row["peak_mem_mb"] = mem.peak_mb
    if cell.config is None:
        row["output_ids"] = res.tokens
        row["read_bandwidth_gbs"] = round(read_bandwidth_gbs(str(dev)), 2)  # AR's bound, probed next to it
    elif row["equals_ar"] is False:
        row["divergence_gap"] = divergence_gap(target, prompt.ids, ref, row["first_divergence"])
    if res.trees:
        row["trees"] = res.trees
    return row


def make_record(cell: Cell, key: str, profile, prompts, rows: list[dict], device: str, kv_mode: str,
                extra: dict) -> dict:
    return {"key": key, "dataset": cell.dataset, "method": cell.method, "label": cell.label,
            "config": config_dict(cell.config), "T": cell.T, "L_max": cell.L_max, "dtype": cell.dtype,
            "tags": cell.tags, "kv_mode": kv_mode, "profile": profile.name, "engine": profile.engine,
            "target": profile.target, "draft": profile.draft, "draft_vocab": profile.draft_vocab,
            "draft_lookup": profile.draft_lookup,
            "context_override": profile.context_override,
            "warmup": profile.warmup, "prompt_ids": [p.id for p in prompts], "rows": rows,
            "aggregate": aggregate(rows), "environment": environment(device), **extra,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
