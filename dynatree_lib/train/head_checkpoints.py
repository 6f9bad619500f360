"""A head's checkpoints (``train.eagle3.train_head``): ``ckpt-<steps>.pt`` under its ``models/`` folder (weights,
optimizer, log, spec) and a committed copy under ``checkpoints/`` (weights and log alone, small enough for git), each
refused where its spec is not the run's."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch

from ..harness.setup.paths import REPO
from .train import save_atomically

COMMITTED = REPO / "checkpoints"  # committed: the newest weights and log of each head's training (no optimizer)


def committed_checkpoint(spec: HeadRecipe) -> Path:
    """The committed copy of the default folder's training: ``checkpoints/<kind>/<folder>.pt``."""
    return COMMITTED / spec.kind / f"{spec.folder().name}.pt"


def check_folder(out: Path, spec: HeadRecipe, committed: Path | None = None) -> None:
    """Refuse a folder, or a committed copy, holding a head trained with another spec (before the target loads; the
    files are mapped, not read whole)."""
    out.mkdir(parents=True, exist_ok=True)
    ckpts = sorted(out.glob("ckpt-*.pt"))
    for path in ckpts[-1:] + ([committed] if committed is not None and committed.exists() else []):
        if (was := torch.load(path, mmap=True)["spec"]) != spec_record(spec):
            raise ValueError(f"{path} holds a head trained with {was}, not {asdict(spec)}: train in another folder "
                             "or remove it")


def spec_record(spec: HeadRecipe) -> dict:
    """``spec`` as a checkpoint stores it (JSON types: tuples as lists)."""
    return json.loads(json.dumps(asdict(spec)))


def resume(out: Path, head: torch.nn.Module, opt, committed: Path | None = None) -> tuple[list[dict], int]:
    """Load the newest checkpoint in ``out`` into ``head`` and ``opt`` or, where it is further on (or ``out`` holds
    none), the ``committed`` copy into ``head`` alone; the log (empty if neither) and the step the optimizer
    started. ``check_folder`` has checked both files' specs."""
    ckpts = sorted(out.glob("ckpt-*.pt"))
    st = torch.load(ckpts[-1]) if ckpts else {"log": []}
    if committed is not None and committed.exists():
        kept = torch.load(committed)
        if len(kept["log"]) > len(st["log"]):
            head.load_state_dict(kept["head"])
            return kept["log"], len(kept["log"])
    if not ckpts:
        return [], 0
    head.load_state_dict(st["head"])
    opt.load_state_dict(st["opt"])
    return st["log"], st.get("optimizer_since", 0)


def checkpoint(out: Path, head: torch.nn.Module, opt, log: list[dict], spec: HeadRecipe, *, since: int = 0,
               committed: Path | None = None) -> None:
    """``ckpt-<steps>.pt`` written atomically, the two newest kept; the weights and log alone to ``committed``."""
    state = {"head": head.state_dict(), "log": log, "spec": spec_record(spec), "optimizer_since": since}
    save_atomically({**state, "opt": opt.state_dict()}, out / f"ckpt-{len(log):06d}.pt")
    for old in sorted(out.glob("ckpt-*.pt"))[:-2]:
        old.unlink()
    if committed is not None:
        committed.parent.mkdir(parents=True, exist_ok=True)
        save_atomically(state, committed)
