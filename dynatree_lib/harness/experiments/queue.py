"""A queue of experiments: ``bench --queue main,sampling,heads`` runs them one after another as one detached job
with a log, and ``bench --status`` shows each one's cells done, in progress and left, with the time left.

The store already resumes an experiment at its next missing prompt (``ResultStore.partial``), so a queue stopped
anywhere (killed, or ended with its machine) resumes with the same command and measures only what is missing,
across its experiments. A lock per checkout keeps two queues from running at once; timed runs also take the
machine's lock (``load.hold_timed_lock``), so no two of them time each other. What a queue is doing lives in
``.queue/`` at the checkout's root (``queue.json``, ``queue.log``), never in ``results/``.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..measure.load import RUN_ROOT, FileLock
from ..setup.paths import REPO, RESULTS

QUEUE_DIR = RESULTS.parent / ".queue"  # the checkout's .queue/, or beside $DYNATREE_RESULTS


@dataclass(frozen=True)
class Queue:
    """What a queue runs: experiment names in order, on a profile with ``--set`` overrides (as typed)."""
    experiments: tuple[str, ...]
    profile: str = "cpu"
    overrides: tuple[str, ...] = ()
    allow_dirty: bool = False
    allow_busy: bool = False

    def argv(self) -> list[str]:
        """The command line that runs this queue in the foreground (what ``start`` detaches)."""
        sets = [a for s in self.overrides for a in ("--set", s)]
        flags = ["--allow-dirty"] * self.allow_dirty + ["--allow-busy"] * self.allow_busy
        return [sys.executable, "-m", "dynatree_lib", "bench", "--queue", ",".join(self.experiments),
                "--profile", self.profile, *sets, *flags, "--foreground"]


def state_path(folder: Path = QUEUE_DIR) -> Path:
    return Path(folder) / "queue.json"


def log_path(folder: Path = QUEUE_DIR) -> Path:
    return Path(folder) / "queue.log"


def read_state(folder: Path = QUEUE_DIR) -> dict | None:
    path = state_path(folder)
    return json.loads(path.read_text()) if path.exists() else None


def write_state(folder: Path, **fields) -> None:
    state = {**(read_state(folder) or {}), **fields}
    Path(folder).mkdir(parents=True, exist_ok=True)
    tmp = state_path(folder).with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, state_path(folder))


def now() -> str:
    return _dt.datetime.now().isoformat(timespec="seconds")


def start(queue: Queue, folder: Path = QUEUE_DIR) -> int:
    """Start ``queue`` as a detached job (its own session: it outlives the shell that started it), its output
    appended to ``queue.log``; returns its pid. Refuses while another queue of this checkout runs."""
    lock = FileLock(Path(folder) / "queue.lock")
    if (holder := lock.holder()) is not None:
        raise ValueError(f"a queue is already running in this checkout (pid {holder}); see `bench --status`, "
                         f"its log {log_path(folder)}")
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(log_path(folder), "a") as log:
        log.write(f"\n[queue] {now()} started: {' '.join(queue.argv()[1:])}\n")
        log.flush()
        proc = subprocess.Popen(queue.argv(), cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return proc.pid


def run(queue: Queue, run_one, profile, folder: Path = QUEUE_DIR) -> None:
    """Run ``queue`` here: ``run_one(name, profile)`` for each experiment in turn, each measuring only what its
    JSON lacks; ``queue.json`` says which one is running and which are done. Holds the checkout's queue lock."""
    lock = FileLock(Path(folder) / "queue.lock")
    if not lock.acquire():
        raise ValueError(f"a queue is already running in this checkout (pid {lock.holder()}); see `bench --status`")
    os.environ.setdefault(RUN_ROOT, str(os.getpid()))  # the replicate processes belong to this run
    try:
        write_state(folder, queue=dataclasses.asdict(queue), pid=os.getpid(), started=now(), done=[],
                    running=None, finished=None, failed=None)
        for name in queue.experiments:
            write_state(folder, running=name)
            print(f"[queue] {now()} {name} (profile {profile.name})", flush=True)
            run_one(name, profile)
            write_state(folder, done=[*read_state(folder)["done"], name], running=None)
        write_state(folder, finished=now())
        print(f"[queue] {now()} finished", flush=True)
    except BaseException as e:
        write_state(folder, failed=f"{type(e).__name__}: {e}"[:500])
        raise
    finally:
        lock.release()


def progress(name: str, profile, root: Path | None = None) -> dict:
    """An experiment's cells done, in progress and left, its generations left and the mean seconds of the
    generations measured so far; a one-document experiment is one cell (done once its file exists)."""
    from .catalog import Document, get, missing
    from ..measure.bench import Prompts
    from ..measure.store import ResultStore, results_path
    from .tuning import NotTuned

    exp = get(name)
    measuring = exp.profile(profile)
    path = results_path(name, measuring, root)
    if isinstance(exp, Document):
        return {"cells": 1, "done": int(path.exists()), "in_progress": 0, "left": int(not path.exists()),
                "generations_left": None, "s_per_generation": None}
    try:
        todo = missing(name, profile, root)
        total = len(exp.cells(measuring, root))
    except NotTuned as e:
        return {"waits": str(e)}
    store = ResultStore(path)
    per_cell = Prompts(measuring, None).per_cell
    rows = {k: store.partial(k) for _, k in todo}
    left_gens = sum(exp.prompts(measuring, c) * per_cell(c) - len(rows[k]) for c, k in todo)
    measured = [r for rec in store.records for r in rec["rows"]] + [r for v in rows.values() for r in v]
    walls = [r["wall_s"] for r in measured if "wall_s" in r]  # a memory row holds bytes, no time
    return {"cells": total, "done": total - len(todo), "in_progress": sum(bool(r) for r in rows.values()),
            "left": sum(not r for r in rows.values()), "generations_left": left_gens,
            "s_per_generation": sum(walls) / len(walls) if walls else None}


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def status(profile_of, folder: Path = QUEUE_DIR, root: Path | None = None) -> str:
    """What ``bench --status`` prints: the queue's state, then per experiment its cells and the time left (at the
    mean seconds per generation measured so far in it, else in the queue's other experiments)."""
    state = read_state(folder)
    if state is None:
        return f"no queue has run in this checkout ({state_path(folder)} is missing); start one with bench --queue"
    q = Queue(**{**state["queue"], "experiments": tuple(state["queue"]["experiments"]),
                 "overrides": tuple(state["queue"]["overrides"])})
    profile = profile_of(q)
    running = alive(state.get("pid")) and FileLock(Path(folder) / "queue.lock").holder() is not None
    how = (f"running (pid {state['pid']}) since {state['started']}" if running else
           f"finished at {state['finished']}" if state.get("finished") else
           f"stopped (failed: {state['failed']})" if state.get("failed") else "stopped")
    lines = [f"queue {','.join(q.experiments)} on profile {q.profile}: {how}; log {log_path(folder)}"]
    stats = {name: progress(name, profile, root) for name in q.experiments}
    known = [s["s_per_generation"] for s in stats.values() if s.get("s_per_generation")]
    fallback = sum(known) / len(known) if known else None
    total_s = 0.0
    for name, s in stats.items():
        if "waits" in s:
            lines.append(f"  {name:16s} waits for what runs before it ({s['waits'][:80]})")
            continue
        rate = s["s_per_generation"] or fallback
        gens = s["generations_left"]
        eta = "" if gens is None else f", {gens} generations left" + (
            f", about {gens * rate / 60:.0f} min" if rate else ", time unknown until its first generation")
        total_s += (gens or 0) * (rate or 0)
        mark = " <- running" if running and state.get("running") == name else ""
        lines.append(f"  {name:16s} cells: {s['done']} done, {s['in_progress']} in progress, {s['left']} left"
                     f"{eta}{mark}")
    lines.append(f"time left: about {total_s / 3600:.1f} h (loading and compiling not counted; "
                 "`python -m dynatree_lib plan` predicts a whole run)")
    return "\n".join(lines)
