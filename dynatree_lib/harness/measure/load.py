"""What else the machine did while we timed: the one-minute load average and the CPU seconds of processes outside
the run, read from ``/proc``.

A 2-core VM gives no honest timing while another process computes, and nothing in a record said so. The run is
the process tree under ``$DYNATREE_RUN_ROOT`` (set by the first process of a bench run or queue, inherited by its
replicate processes), else under this process: its own llama.cpp server or vLLM worker is not "outside". Before a
timed experiment, ``check_idle`` refuses a busy machine, naming the process; each timed cell's record then carries
``Watch.summary``: the load average at its first and last generation and the outside CPU seconds during its own
generations. ``--allow-busy`` (``ALLOW_BUSY``) overrides the refusal, and the records say so.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

RUN_ROOT = "DYNATREE_RUN_ROOT"    # pid of the run's first process; its descendants are the run
ALLOW_BUSY = "DYNATREE_ALLOW_BUSY"  # "1": measure on a busy machine (--allow-busy), the records marked so
BUSY_AT_START = "DYNATREE_BUSY_AT_START"  # what check_idle saw when --allow-busy let a busy run start
IDLE_CHECKED = "DYNATREE_IDLE_CHECKED"  # "1": this run's machine was checked (a replicate process inherits it)
BUSY_CORES = 0.5                  # more than this, averaged over the window, outside the run: busy
WINDOW_S = 10.0
PROC = Path("/proc")
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    name: str
    ticks: int  # user + system CPU time, in clock ticks
    started: int  # clock ticks after boot: a pid reused by a new process has another


def processes() -> dict[int, Process]:
    """Every process ``/proc`` shows now (empty where there is no ``/proc``)."""
    out = {}
    for d in PROC.glob("[0-9]*"):
        try:
            text = (d / "stat").read_text()
        except OSError:
            continue  # ended while we read
        name = text[text.index("(") + 1:text.rindex(")")]
        rest = text[text.rindex(")") + 2:].split()  # from field 3 (state) on
        out[int(d.name)] = Process(int(d.name), int(rest[1]), name, int(rest[11]) + int(rest[12]), int(rest[19]))
    return out


def run_root() -> int:
    return int(os.environ.get(RUN_ROOT) or os.getpid())


def the_run(procs: dict[int, Process], root: int | None = None) -> set[int]:
    """The pids of the run: ``root`` (default ``run_root``), this process, and every descendant of either."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    mine, todo = set(), [root or run_root(), os.getpid()]
    while todo:
        pid = todo.pop()
        if pid not in mine:
            mine.add(pid)
            todo += children.get(pid, [])
    return mine


def load1() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Snapshot:
    at: float
    procs: dict[int, Process]

    @classmethod
    def now(cls) -> "Snapshot":
        return cls(time.perf_counter(), processes())


def outside(before: Snapshot, after: Snapshot) -> dict[int, float]:
    """{pid: CPU seconds between the snapshots} of the processes outside the run (a process that started in between
    counts whole; one that ended in between is not seen)."""
    run = the_run(after.procs) | the_run(before.procs)
    used = {}
    for pid, p in after.procs.items():
        if pid in run:
            continue
        was = before.procs.get(pid)
        ticks = p.ticks - (was.ticks if was is not None and was.started == p.started else 0)
        if ticks > 0:
            used[pid] = ticks / TICK
    return used


def busy_report(before: Snapshot, after: Snapshot) -> dict:
    """Cores used outside the run between the snapshots, in all and by the busiest processes."""
    seconds = max(after.at - before.at, 1e-9)
    used = outside(before, after)
    top = sorted(used.items(), key=lambda kv: -kv[1])[:3]
    return {"window_s": round(seconds, 1), "outside_cores": round(sum(used.values()) / seconds, 3),
            "busiest": [{"pid": pid, "name": after.procs[pid].name, "command": command(pid),
                         "cores": round(s / seconds, 3)} for pid, s in top]}


def command(pid: int, width: int = 100) -> str:
    """A process's command line, cut to ``width`` characters ("" where it has none or ended)."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ")
        return " ".join(raw.decode(errors="replace").split())[:width]
    except OSError:
        return ""


def describe_busy(report: dict) -> str:
    who = ", ".join(f"pid {b['pid']} ({b.get('command') or b['name']}) {b['cores']:.2f} cores"
                    for b in report["busiest"]) or "no process"
    return f"{report['outside_cores']:.2f} cores busy outside this run over {report['window_s']:.0f} s: {who}"


_RUN_START: list[Snapshot] = []  # when this process began to measure (``check_idle``, else its first report)
RECHECK_S = 120.0  # a run's nested experiments (main runs its tuning first) share a check this recent
_LAST_CHECK: list[float] = []


def check_idle(what: str, window_s: float | None = None) -> dict | None:
    """Refuse to time ``what`` while processes outside the run use more than ``BUSY_CORES`` cores, averaged over
    ``window_s`` seconds (``$DYNATREE_BUSY_WINDOW`` or ``WINDOW_S``): a ``ValueError`` naming them. A process started
    for a checked run (``IDLE_CHECKED``: a replicate's) and an experiment nested in one checked moments ago
    (``RECHECK_S``) are not checked again. ``--allow-busy`` lets it go on: returns what was seen, which the run's
    records carry; None where the machine was idle or not checked."""
    if os.environ.get(IDLE_CHECKED) == "1" or (_LAST_CHECK and time.monotonic() - _LAST_CHECK[0] < RECHECK_S):
        return None
    window_s = float(os.environ.get("DYNATREE_BUSY_WINDOW", WINDOW_S)) if window_s is None else window_s
    print(f"{what}: checking for {window_s:.0f} s that nothing else computes on this machine ...", flush=True)
    before = Snapshot.now()
    time.sleep(window_s)
    report = busy_report(before, after := Snapshot.now())
    if report["outside_cores"] > BUSY_CORES:
        if os.environ.get(ALLOW_BUSY) != "1":
            raise ValueError(f"refusing to time {what} on a busy machine ({describe_busy(report)}); wait for it to "
                             f"end, or pass --allow-busy ({ALLOW_BUSY}=1) to measure anyway, the records marked busy")
        print(f"{what}: measuring on a busy machine (--allow-busy): {describe_busy(report)}", flush=True)
        os.environ[BUSY_AT_START] = json.dumps(report)  # the records of this run, its replicates' too, carry it
    _LAST_CHECK[:] = [time.monotonic()]
    _RUN_START[:] = [after]
    return report if report["outside_cores"] > BUSY_CORES else None


def busy_at_start() -> dict | None:
    text = os.environ.get(BUSY_AT_START)
    return json.loads(text) if text else None


@dataclass
class Watch:
    """The load around one timed cell's generations: ``around`` each of them accumulates the outside CPU seconds
    and the wall seconds, and keeps the load average at the first and the last."""
    load1_start: float | None = None
    load1_end: float | None = None
    outside_cpu_s: float = 0.0
    wall_s: float = 0.0
    busiest: dict = field(default_factory=dict)  # name -> CPU seconds

    def start(self) -> Snapshot:
        if self.load1_start is None:
            self.load1_start = load1()
        return Snapshot.now()

    def stop(self, before: Snapshot) -> float:
        """Adds the span since ``before``; returns its outside CPU seconds (a row's ``outside_cpu_s``)."""
        after = Snapshot.now()
        used = outside(before, after)
        for pid, s in used.items():
            name = after.procs[pid].name
            self.busiest[name] = self.busiest.get(name, 0.0) + s
        self.load1_end, self.wall_s = load1(), self.wall_s + after.at - before.at
        self.outside_cpu_s += sum(used.values())
        return round(sum(used.values()), 3)

    def summary(self, rows: list[dict] | None = None) -> dict:
        """What a record stores: load averages, outside CPU seconds and cores, the busiest outside processes,
        whether ``--allow-busy`` was given and what the run's start saw if it was busy. Given the cell's ``rows``,
        the seconds are theirs (``outside_cpu_s`` and ``wall_s`` of each; a resumed cell's earlier rows too)."""
        outside_s, wall_s = self.outside_cpu_s, self.wall_s
        if rows:
            outside_s = sum(r.get("outside_cpu_s", 0.0) for r in rows)
            wall_s = sum(r.get("wall_s", 0.0) for r in rows)
        top = sorted(self.busiest.items(), key=lambda kv: -kv[1])[:3]
        out = {"load1_start": self.load1_start, "load1_end": self.load1_end, "outside_cpu_s": round(outside_s, 3),
               "outside_cores": round(outside_s / wall_s, 3) if wall_s else 0.0,
               "busiest": {name: round(s, 3) for name, s in top}, "allow_busy": os.environ.get(ALLOW_BUSY) == "1"}
        if (seen := busy_at_start()) is not None:
            out["busy_at_start"] = seen
        return out


def is_busy(record: dict) -> bool:
    """Whether a record was measured on a busy machine: busy when its run started (``--allow-busy``), or more than
    ``BUSY_CORES`` cores used outside the run during its generations. Records from before this check say nothing
    (False)."""
    load = record.get("load") or {}
    return bool(load.get("busy_at_start")) or load.get("outside_cores", 0.0) > BUSY_CORES


def since_start() -> dict:
    """A one-document experiment's load (costs, pair), as its ``environment`` carries it: a ``Watch`` over
    everything since this process began to measure."""
    if not _RUN_START:
        _RUN_START.append(Snapshot.now())
    w = Watch()
    w.stop(_RUN_START[0])
    return {**w.summary(), "load1_start": None}  # the average when it began was not read


class FileLock:
    """An advisory lock on a file (``flock``): held while this process lives, released by the kernel when it
    ends however it ends; the file holds the holder's pid, so a refusal can name it."""

    def __init__(self, path: Path):
        self.path, self.fd = Path(path), None

    def acquire(self) -> bool:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def holder(self) -> int | None:
        """The pid holding the lock; None where nobody (or this object) does."""
        if self.fd is not None or not self.path.exists():
            return None
        if self.acquire():
            self.release()
            return None
        try:
            return int(self.path.read_text().strip() or 0) or None
        except (OSError, ValueError):
            return None


_TIMED: list[FileLock] = []  # this process's hold on the machine's timed-run lock


def timed_lock_path() -> Path:
    from ..setup.paths import cache_dir

    return cache_dir() / "timed-run.lock"


def hold_timed_lock(what: str) -> None:
    """Take the machine's timed-run lock for the rest of this process (its replicate processes run under it), or
    refuse, naming the run that holds it: two timed runs on one machine time each other."""
    if _TIMED or os.environ.get(IDLE_CHECKED) == "1":  # held already, or by the run that started this process
        return
    lock = FileLock(timed_lock_path())
    if not lock.acquire():
        raise ValueError(f"refusing to time {what}: another timed run holds {lock.path} (pid {lock.holder()}); "
                         "wait for it (`bench --status` shows a queue's progress)")
    _TIMED.append(lock)


def guard(profile, what: str) -> None:
    """Before a timed measurement of ``profile`` (one whose ``protocol.idle_machine`` is set): the machine's lock,
    then ``check_idle``."""
    if not profile.protocol.idle_machine:
        return
    hold_timed_lock(what)
    check_idle(what)


def child_env() -> dict:
    """The environment of a process this run starts to measure a part of it (a replicate): it belongs to the run,
    whose machine was checked and whose lock is held."""
    return {**os.environ, RUN_ROOT: str(run_root()), IDLE_CHECKED: "1"}
