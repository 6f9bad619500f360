"""Benchmark harness: run methods over prompts, log every record to JSON, resume interrupted sweeps.

A record is one (dataset, method, configuration, T, L_max) cell: its configuration, model ids, prompt ids,
per-prompt rows (metrics of ``metrics.prompt_metrics`` plus ``equals_ar`` and a hash of the tokens),
aggregates (mean, std) and the environment. Records live in ``results/<profile>/<experiment>.json`` and
are keyed by a hash of everything that defines them: a rerun of a finished cell is skipped, a new cell is
appended, measured rows of unfinished cells are checkpointed under ``partial`` (so an interrupted run
resumes at the next prompt), the file is replaced atomically after every row, and no finished record is
ever overwritten (``--rerun`` moves the file aside first).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .data import Prompt
from .decoders import generate
from .metrics import aggregate, prompt_metrics

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
SCHEMA = 1


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
    dev_name = torch.cuda.get_device_name() if device.startswith("cuda") else (platform.processor() or platform.machine())
    return {"device": device, "device_name": dev_name, "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": sys.version.split()[0],
            "platform": platform.platform(), "git_commit": commit, "git_dirty": dirty,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


def config_dict(method) -> dict:
    return {} if method is None else {"type": type(method).__name__, **dataclasses.asdict(method)}


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
                raise ValueError(f"{self.path} has schema {self.data.get('schema')}, expected {SCHEMA}")

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
    """Peak memory during a block: CUDA max allocated, or process RSS sampled every 2 ms on CPU."""

    def __init__(self, device: str):
        self.device, self.peak_mb = device, 0.0

    def __enter__(self):
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            import psutil

            self._proc, self._stop = psutil.Process(), threading.Event()
            self._peak = self._proc.memory_info().rss

            def sample():
                while not self._stop.wait(0.002):
                    self._peak = max(self._peak, self._proc.memory_info().rss)

            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            self.peak_mb = torch.cuda.max_memory_allocated() / 2**20
        else:
            self._stop.set()
            self._thread.join()
            self.peak_mb = max(self._peak, self._proc.memory_info().rss) / 2**20


@dataclass
class Cell:
    """One benchmark cell: a method on a dataset at one (T, L_max)."""

    dataset: str
    method: str          # label shown in tables, e.g. "dynatree" or "fixed D=5 B=2"
    config: object       # LinearConfig | FixedTreeConfig | DynaTreeConfig | None (AR)
    T: int
    L_max: int
    tags: dict = dataclasses.field(default_factory=dict)  # free-form sweep coordinates


def _generate(cell: Cell, target, draft, prompt: Prompt, kv_mode: str, device: str,
              eos_token_id: int | None = None):
    return generate(target, prompt.ids.to(device), cell.T, draft=draft, method=cell.config, kv_mode=kv_mode,
                    eos_token_id=eos_token_id)


def warm_up(cell: Cell, target, draft, prompts: list[Prompt], warmup: int, kv_mode: str, device: str) -> None:
    """``warmup`` discarded runs of the cell (on the first prompts)."""
    for i in range(warmup):
        _generate(cell, target, draft, prompts[i % len(prompts)], kv_mode, device)


def measure(cell: Cell, target, draft, prompt: Prompt, kv_mode: str, ar_tokens: list[int] | None,
            device: str, eos_token_id: int | None = None) -> dict:
    """One measured generation -> one row: metrics, peak memory, and agreement with AR's tokens
    (``equals_ar``, ``ar_agreement``; only StreamingLLM + spec may go below 1). AR rows keep their tokens
    (``output_ids``) so later or resumed cells can be compared with them."""
    with PeakMemory(device) as mem:
        res = _generate(cell, target, draft, prompt, kv_mode, device, eos_token_id)
    ref = res.tokens if cell.config is None else ar_tokens
    row = {"prompt_id": prompt.id, "prompt_len": int(prompt.ids.numel()), **prompt_metrics(res),
           "peak_mem_mb": mem.peak_mb, "tokens_sha": tokens_hash(res.tokens), "equals_ar": ref == res.tokens,
           "ar_agreement": None if ref is None else sum(a == b for a, b in zip(ref, res.tokens)) / len(ref)}
    if cell.config is None:
        row["output_ids"] = res.tokens
    return row


def make_record(cell: Cell, key: str, profile, prompts, rows: list[dict], device: str, kv_mode: str) -> dict:
    return {"key": key, "dataset": cell.dataset, "method": cell.method, "config": config_dict(cell.config),
            "T": cell.T, "L_max": cell.L_max, "tags": cell.tags, "kv_mode": kv_mode,
            "profile": profile.name, "target": profile.target, "draft": profile.draft, "dtype": profile.dtype,
            "context_override": profile.context_override,
            "warmup": profile.warmup, "prompt_ids": [p.id for p in prompts], "rows": rows,
            "aggregate": aggregate(rows), "environment": environment(device),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
