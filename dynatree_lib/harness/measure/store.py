"""The result store: one experiment's JSON file, an append-only list of keyed records written atomically.

A record is one (dataset, method, configuration, T, L_max, dtype) cell: its configuration, model ids and
weights, prompt ids, per-prompt rows, aggregates and the environment (``measure.make_record``). Records
live in ``results/<profile>/<experiment>.json`` and are keyed by a hash of everything that defines them: a
rerun of a finished cell is skipped, a new cell is appended, measured rows of unfinished cells are
checkpointed under ``partial`` (so an interrupted run resumes at the next prompt), the file is replaced
atomically after every row, and no finished record is ever overwritten (a rerun moves the file aside).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
from pathlib import Path

from . import load
from ..setup.paths import RESULTS, written_whole

SCHEMA = 2
ALLOW_DIRTY = "DYNATREE_ALLOW_DIRTY"  # "1": keep records measured on a dirty tree (--allow-dirty sets it)


def check_clean(path: Path, doc: dict) -> None:
    """Refuse to write ``doc`` (a record, or a report with an ``environment``) into ``results/`` when it was
    measured on a tree whose result inputs differ from its commit (``environment.RESULT_INPUTS``), unless
    ``--allow-dirty`` said so: a committed number must name the code that made it."""
    env = doc.get("environment") or {}
    inside = Path(os.path.abspath(path)).is_relative_to(os.path.abspath(RESULTS))
    if not env.get("git_dirty") or not inside or os.environ.get(ALLOW_DIRTY) == "1":
        return
    files = ", ".join(env.get("git_dirty_files", [])) or "unknown files"
    raise ValueError(f"{path}: refusing to write a record measured on a dirty tree (changed since "
                     f"{env.get('git_commit')}: {files}); commit first, or pass --allow-dirty (./run_all.sh "
                     f"--allow-dirty, dynatree bench --allow-dirty, or {ALLOW_DIRTY}=1) to keep it marked git_dirty")


def check_one_machine(path: Path, doc: dict, others: list[dict]) -> None:
    """Refuse to write a record measured on one machine kind into a file holding another kind's (``harness.setup.machine``):
    a file's ratios then belong to one machine. Another kind's records go to their own folder (``Models.machine``)."""
    from ..setup.machine import kind_of_record

    mine = kind_of_record(doc.get("environment") or {})
    theirs = {kind_of_record(o.get("environment") or {}) for o in others} - {None, mine}
    if mine is not None and theirs:
        profile = Path(path).parent.name.split("@")[0]
        raise ValueError(f"{path} holds records measured on {', '.join(sorted(theirs))}; this one was measured on "
                         f"{mine}: measure into its own folder with --set machine={mine} "
                         f"(results/{profile}@{mine}/), or --rerun to replace the file")


def write_report(path: Path, doc: dict, *, replace: bool = False) -> None:
    """A one-document experiment's JSON (costs, pair): checked as ``check_clean`` and ``check_one_machine`` do (against
    the file it replaces), with the machine's load while it ran (``load.since_start``), written whole. ``replace`` (a
    rerun): the old file is moved aside first (``*.bak.json``), once the new document exists, so a failed run moves
    nothing; a results folder not made yet is made."""
    check_clean(path, doc)
    doc = {**doc, "load": doc.get("load") or load.since_start()}
    if replace and Path(path).exists():
        os.replace(path, Path(path).with_suffix(".bak.json"))
    check_one_machine(path, doc, [json.loads(Path(path).read_text())] if Path(path).exists() else [])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with written_whole(Path(path)) as tmp:
        tmp.write_text(json.dumps(doc, indent=1))


def config_dict(method) -> dict:
    """A method's configuration as logged (JSON types: tuples become lists, so it equals a record's)."""
    return {} if method is None else json.loads(json.dumps({"type": type(method).__name__, **dataclasses.asdict(method)}))


def record_key(**parts) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


class ResultStore:
    """One experiment's JSON file (see module docstring)."""

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
        check_clean(self.path, record)
        check_one_machine(self.path, record, self.records)
        self.records.append(record)
        self.data.get("partial", {}).pop(record["key"], None)
        self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with written_whole(self.path) as tmp:
            tmp.write_text(json.dumps(self.data, indent=1, default=float))

    def archive(self) -> Path | None:
        """Move the file aside (for an explicit rerun) so no finished record is lost."""
        if not self.path.exists():
            return None
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        dest = self.path.with_name(f"{self.path.stem}.{stamp}.bak.json")
        os.replace(self.path, dest)
        self.data = {"schema": SCHEMA, "records": []}
        return dest



def archive_for_rerun(path: Path, rerun: bool, render_only: bool) -> None:
    """An explicit rerun moves the previous file aside (``ResultStore.archive``) and says where it went."""
    if rerun and not render_only and (old := ResultStore(path).archive()):
        print(f"rerun: previous results kept at {old}")

def needs_run(path: Path, rerun: bool, render_only: bool, profile=None) -> bool:
    """Whether a cached-JSON measurement must run: not when ``path`` exists (unless ``rerun``); a missing
    file under ``render_only`` is an error. Where it must, on a ``profile`` whose timings back claims, the
    machine must be idle first (``load.guard``)."""
    if path.exists() and not rerun:
        return False
    if render_only:
        raise FileNotFoundError(f"render-only: {path} is missing; run without --render first")
    if profile is not None:
        load.guard(profile, f"{profile.name}/{Path(path).stem}")
    return True


def results_path(name: str, profile, root: Path | None = None) -> Path:
    """``results/<profile>/<name>.json``, or ``results/<profile>@<machine>/`` for another machine kind's records
    (``Profile.results_folder``), under ``root`` instead of the repository's results/ if given."""
    return (root or RESULTS) / profile.results_folder / f"{name}.json"
