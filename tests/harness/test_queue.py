"""A queue of experiments runs detached with a log, shows its progress, and, killed in the middle of its first
experiment, resumes with the same command measuring only the missing cells of both."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dynatree_lib.harness.experiments import queue

REPO = Path(__file__).resolve().parents[2]
# two small smoke experiments, untuned (no tuning experiment first), three prompts a cell so a kill lands mid-cell
QUEUE = ["bench", "--queue", "length_scaling,ablation", "--profile", "smoke", "--set", "tuning.candidates=None",
         "--set", "sweeps.n_prompts=3", "--set", "sweeps.T_list=(8, 16)"]


def rows_of(path: Path) -> dict:
    """{(record or partial key, prompt id): wall seconds} of every generation measured into ``path``."""
    if not path.exists():
        return {}
    doc = json.loads(path.read_text())
    out = {(r["key"], row["prompt_id"]): row["wall_s"] for r in doc["records"] for row in r["rows"]}
    out |= {(k, row["prompt_id"]): row["wall_s"] for k, rows in doc.get("partial", {}).items() for row in rows}
    return out


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """Results and the queue's folder in a scratch place; records from this (maybe dirty) tree allowed there."""
    env = {**os.environ, "DYNATREE_RESULTS": str(tmp_path / "results"), "DYNATREE_ALLOW_DIRTY": "1",
           "PYTHONPATH": str(REPO)}
    return tmp_path, env


def bench(env, *extra, **kw):
    return subprocess.run([sys.executable, "-m", "dynatree_lib", *QUEUE, *extra], env=env, cwd=REPO,
                          capture_output=True, text=True, **kw)


def test_a_killed_queue_resumes_and_measures_only_what_is_missing(scratch):
    tmp, env = scratch
    first = tmp / "results" / "smoke" / "length_scaling.json"
    started = bench(env)
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.split("queue started as pid ")[1].split(":")[0])
    deadline = time.time() + 300
    while len(rows_of(first)) < 2:  # in the middle of the first experiment: some of its rows measured
        assert time.time() < deadline and queue.alive(pid), (tmp / ".queue" / "queue.log").read_text()[-3000:]
        time.sleep(0.05)
    os.killpg(pid, signal.SIGKILL)  # as a machine that ends does: no cleanup
    before = rows_of(first)
    status = subprocess.run([sys.executable, "-m", "dynatree_lib", "bench", "--status"], env=env, cwd=REPO,
                            capture_output=True, text=True)
    assert status.returncode == 0, status.stderr
    assert "stopped" in status.stdout and "length_scaling" in status.stdout and "ablation" in status.stdout
    assert "left" in status.stdout and "time left" in status.stdout

    resumed = bench(env, "--foreground", timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    after = rows_of(first)
    assert all(after[k] == wall for k, wall in before.items())  # what was measured before the kill is kept as is
    doc = json.loads(first.read_text())
    assert not doc.get("partial") and len(after) == 3 * len(doc["records"]) > len(before)
    ablation = json.loads((tmp / "results" / "smoke" / "ablation.json").read_text())
    assert len(ablation["records"]) == 5 and not ablation.get("partial")
    state = json.loads((tmp / ".queue" / "queue.json").read_text())
    assert state["done"] == ["length_scaling", "ablation"] and state["finished"]

    again = bench(env, "--foreground", timeout=600)  # nothing is missing: nothing is measured
    assert again.returncode == 0 and rows_of(first) == after


def test_a_second_queue_is_refused_while_one_runs(scratch):
    tmp, env = scratch
    lock = queue.FileLock(tmp / ".queue" / "queue.lock")
    assert lock.acquire()
    try:
        out = bench(env)
        assert out.returncode == 2 and f"a queue is already running in this checkout (pid {os.getpid()})" in out.stderr
    finally:
        lock.release()


def test_unknown_experiments_in_a_queue_are_named(scratch):
    _, env = scratch
    out = subprocess.run([sys.executable, "-m", "dynatree_lib", "bench", "--queue", "main,nope"], env=env, cwd=REPO,
                         capture_output=True, text=True)
    assert out.returncode == 2 and "'nope' is none of" in out.stderr


def test_status_without_a_queue_says_so(scratch):
    _, env = scratch
    out = subprocess.run([sys.executable, "-m", "dynatree_lib", "bench", "--status"], env=env, cwd=REPO,
                         capture_output=True, text=True)
    assert out.returncode == 0 and "no queue has run in this checkout" in out.stdout


def test_progress_counts_memory_rows_that_hold_no_time(tmp_path):
    """A memory record's rows hold bytes, no wall time: the progress still counts its cells."""
    from dynatree_lib.harness.experiments import catalog
    from dynatree_lib.harness.measure.store import ResultStore, results_path
    from dynatree_lib.harness.setup.profiles import get_profile

    p = get_profile("smoke", candidates=None)
    (cell, key), *_ = catalog.missing("memory", p, tmp_path)
    store = ResultStore(results_path("memory", p, tmp_path))
    store.save_partial(key, [{"prompt_id": "x", "peak_mem_mb": 1.0}])
    got = queue.progress("memory", p, tmp_path)
    assert got["in_progress"] == 1 and got["s_per_generation"] is None
