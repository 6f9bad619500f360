"""Timed runs know when the machine is busy: another process's CPU is seen and named, the run's own children are
not outside it, a busy machine is refused unless --allow-busy (then the records say so), and two timed runs cannot
overlap."""
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from dynatree_lib.harness.measure import load

SPIN = [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 60: pass"]


class Outside:
    def __init__(self, pid: int):
        self.pid = pid


@pytest.fixture
def spinner():
    """A process outside the run that uses a whole core: started by a shell that exits at once, so that it is not
    a descendant of this process (another user's job)."""
    cmd = " ".join(f"'{a}'" for a in SPIN)
    pid = int(subprocess.run(["sh", "-c", f"{cmd} >/dev/null 2>&1 & echo $!"], capture_output=True,
                             text=True, check=True).stdout)
    time.sleep(0.3)
    yield Outside(pid)
    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def fresh(monkeypatch):
    """No earlier check of this process counts, and no --allow-busy from the environment."""
    for var in (load.ALLOW_BUSY, load.BUSY_AT_START, load.IDLE_CHECKED, load.RUN_ROOT):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(load, "_LAST_CHECK", [])


def test_a_busy_process_is_refused_by_name(spinner, fresh):
    with pytest.raises(ValueError, match=rf"refusing to time smoke/x on a busy machine .*pid {spinner.pid} "
                                         r"\(.*python.*\) [01]\.\d\d cores.*--allow-busy"):
        load.check_idle("smoke/x", window_s=1.0)


def test_allow_busy_measures_and_the_records_say_so(spinner, fresh, monkeypatch):
    monkeypatch.setenv(load.ALLOW_BUSY, "1")
    seen = load.check_idle("smoke/x", window_s=1.0)
    assert seen["outside_cores"] > load.BUSY_CORES and spinner.pid in [b["pid"] for b in seen["busiest"]]
    w = load.Watch()
    before = w.start()
    time.sleep(0.5)
    w.stop(before)
    summary = w.summary()
    assert summary["allow_busy"] and spinner.pid in [b["pid"] for b in summary["busy_at_start"]["busiest"]]
    assert summary["outside_cores"] > 0.5 and summary["load1_start"] is not None
    assert load.is_busy({"load": summary}) and not load.is_busy({"load": {"outside_cores": 0.1}})
    assert not load.is_busy({})  # a record from before the check says nothing
    assert json.loads(json.dumps(summary)) == summary


def test_the_runs_own_children_are_not_outside(fresh):
    child = subprocess.Popen(SPIN)  # our child: a llama.cpp server or a vLLM worker is one
    try:
        before = load.Snapshot.now()
        time.sleep(1.0)
        after = load.Snapshot.now()
        assert child.pid in load.the_run(after.procs) and after.procs[child.pid].ticks > before.procs[child.pid].ticks
        assert child.pid not in load.outside(before, after)
    finally:
        child.kill()
        child.wait()


def test_a_replicate_process_inherits_the_check(fresh, monkeypatch):
    monkeypatch.setattr(load.time, "sleep", lambda s: pytest.fail("checked again"))
    env = load.child_env()
    assert env[load.IDLE_CHECKED] == "1" and env[load.RUN_ROOT] == str(os.getpid())
    monkeypatch.setenv(load.IDLE_CHECKED, "1")
    assert load.check_idle("smoke/x") is None


def test_an_untimed_profile_is_not_checked(fresh, monkeypatch):
    from dynatree_lib.harness.setup.profiles import get_profile

    monkeypatch.setattr(load, "check_idle", lambda what: pytest.fail("checked"))
    load.guard(get_profile("smoke"), "smoke/x")


@contextmanager
def held_elsewhere(path):
    """A lock on ``path`` held by another process for the block (yields its pid), which then ends."""
    repo = str(Path(__file__).resolve().parents[2])
    holder = subprocess.Popen([sys.executable, "-c", f"import sys, time; sys.path.insert(0, {repo!r})\n"
                               "from dynatree_lib.harness.measure.load import FileLock\n"
                               f"assert FileLock({str(path)!r}).acquire()\nprint('held', flush=True)\n"
                               "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_two_timed_runs_cannot_overlap(tmp_path):
    lock = load.FileLock(tmp_path / "timed-run.lock")
    with held_elsewhere(lock.path) as pid:
        assert not lock.acquire() and lock.holder() == pid
    assert lock.acquire() and lock.holder() is None  # released with its holder, however it ended
    lock.release()


def test_the_timed_lock_refusal_names_the_holder(tmp_path, monkeypatch, fresh):
    monkeypatch.setenv("DYNATREE_CACHE", str(tmp_path))
    monkeypatch.setattr(load, "_TIMED", [])
    with held_elsewhere(load.timed_lock_path()) as pid:
        with pytest.raises(ValueError, match=rf"another timed run holds .*timed-run.lock \(pid {pid}\)"):
            load.hold_timed_lock("cpu/main")


def test_bench_refuses_a_busy_machine_by_name_and_allow_busy_records_the_load(spinner, tmp_path):
    """End to end, as a user types it: a timed experiment (the smoke profile made timed) beside a busy process is
    refused, naming it, before anything is measured; with --allow-busy its records carry the load and read busy."""
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in (load.IDLE_CHECKED, load.ALLOW_BUSY, load.RUN_ROOT)}
    env |= {"DYNATREE_RESULTS": str(tmp_path / "results"), "DYNATREE_CACHE": str(tmp_path / "cache"),
            "DYNATREE_ALLOW_DIRTY": "1", "DYNATREE_BUSY_WINDOW": "2", "PYTHONPATH": str(repo)}
    cmd = [sys.executable, "-m", "dynatree_lib", "bench", "--experiment", "ablation", "--profile", "smoke",
           "--set", "idle_machine=True", "--set", "tuning.candidates=None", "--set", "sweeps.n_prompts=1"]
    refused = subprocess.run(cmd, env=env, cwd=repo, capture_output=True, text=True)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "refusing to time smoke/ablation on a busy machine" in refused.stderr
    assert f"pid {spinner.pid} (" in refused.stderr and "--allow-busy" in refused.stderr
    assert not (tmp_path / "results" / "smoke" / "ablation.json").exists()

    allowed = subprocess.run(cmd + ["--allow-busy"], env=env, cwd=repo, capture_output=True, text=True)
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    records = json.loads((tmp_path / "results" / "smoke" / "ablation.json").read_text())["records"]
    assert records and all(load.is_busy(r) and r["load"]["allow_busy"] for r in records)
    assert all(spinner.pid in [b["pid"] for b in r["load"]["busy_at_start"]["busiest"]] for r in records)
    assert all(r["load"]["outside_cpu_s"] > 0 and "outside_cpu_s" in r["rows"][0] for r in records)


def test_tables_mark_a_record_from_a_busy_machine_or_a_dirty_tree():
    """A ratio is marked where either of its records (the method's, or its AR's) was measured busy or dirty."""
    import pandas as pd

    from dynatree_lib.reporting.main_tables import speedup_ci
    from dynatree_lib.reporting.records import add_speedup, provenance_mark

    busy, dirty = {"load": {"outside_cores": 0.9}}, {"environment": {"git_dirty": True}}
    assert (provenance_mark(busy), provenance_mark(dirty), provenance_mark({"load": {"outside_cores": 0.1}})) == \
        ("‡", "†", "")
    at = dict(dataset="wikitext2", T=8, L_max=8, dtype="bfloat16", temperature=0.0, replicate=0, impl="ours")
    tps = {f"p{i}": 10.0 + i for i in range(4)}
    df = add_speedup(pd.DataFrame([
        {**at, "method": "ar", "tps_by_prompt": tps, "mark": provenance_mark(busy)},
        {**at, "method": "dynatree", "tps_by_prompt": {k: 2 * v for k, v in tps.items()}, "mark": ""},
        {**at, "replicate": 1, "method": "ar", "tps_by_prompt": tps, "mark": ""},
        {**at, "replicate": 1, "method": "dynatree", "tps_by_prompt": tps, "mark": provenance_mark(dirty)}]))
    marked = [speedup_ci(r) for _, r in df.iterrows()]
    assert marked[0] == marked[2] == "–" and marked[1].startswith("2.00× [") and marked[1].endswith("]‡")
    assert marked[3].endswith("]†")
