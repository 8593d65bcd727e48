"""Issue 22 item 2: nothing left behind. The watchdog of collectors/watchdog.py (what ends a
SIGKILLed `record`'s workload; tests/test_collectors_ending.py runs `record` itself) signals
only when its parent dies; a SIGTERMed or SIGKILLed `policy simulate -j 2` leaves no worker,
and no `sitsprof-sweep-*` folder once the next sweep has run.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parent / "fakenvml" / "run_sitsprof.py"


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_watchdog_leaves_quietly_when_released():
    """Released (the normal end), the watchdog signals nothing: a group it was given survives."""
    from sitsprof.collectors.watchdog import GroupWatchdog

    sleeper = subprocess.Popen(["sleep", "30"], process_group=0)
    try:
        dog = GroupWatchdog(sleeper.pid, grace_s=0.5)
        assert dog.pid is not None
        dog.release()
        time.sleep(0.2)
        assert sleeper.poll() is None
        dog = GroupWatchdog(sleeper.pid, grace_s=0.5)
        dog._process.stdin.close()  # what the death of its parent looks like to it
        assert sleeper.wait(timeout=5) == -signal.SIGTERM
        dog._process.wait(timeout=5)
    finally:
        sleeper.kill()
        sleeper.wait()


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc's parent links)."""
    parent_of = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parent_of[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parent_of.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pids) -> list[int]:
    left = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.append(pid)
    return left


@pytest.fixture(scope="module")
def sweep_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("sweep") / "g.jsonl"
    made = subprocess.run([sys.executable, "-m", "sitsprof.cli.main", "policy", "generate", "--duration", "20m",
                           str(path)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    return path


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_signalled_parallel_sweep_leaves_no_worker_nor_folder(sweep_trace, tmp_path, signum):
    """`policy simulate -j 2` signalled mid-sweep: workers gone within 5 s; after SIGTERM its
    temporary folder is gone, after SIGKILL (which runs no cleanup) the next sweep reclaims it."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    capacities = ",".join(f"{c}%" for c in range(1, 60, 2))  # ~10 s of runs: the signal lands mid-sweep
    env = {**os.environ, "TMPDIR": str(tmp)}
    child = subprocess.Popen([sys.executable, "-m", "sitsprof.cli.main", "policy", "simulate", str(sweep_trace),
                              "-p", "all", "-c", capacities, "-j", "2", "--json"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        workers: set[int] = set()
        while len(workers) < 2 and time.monotonic() < deadline and child.poll() is None:
            workers = _descendants(child.pid)
            time.sleep(0.05)
        assert len(workers) >= 2, "the sweep never started its workers"
        assert list(tmp.glob("sitsprof-sweep-*"))
        time.sleep(0.5)
        child.send_signal(signum)
        child.wait(timeout=30)
        deadline = time.monotonic() + 5
        while _alive(workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = _alive(workers)
    finally:
        if child.poll() is None:
            child.kill()
    _kill(left)
    assert child.returncode == (143 if signum == signal.SIGTERM else -signal.SIGKILL), child.stderr.read()
    assert left == []
    if signum == signal.SIGKILL:
        from sitsprof.common.procs import remove_orphaned_tempdirs
        from sitsprof.policies.parallel import TEMP_PREFIX

        assert len(remove_orphaned_tempdirs(TEMP_PREFIX, str(tmp))) == 1
    assert list(tmp.glob("sitsprof-sweep-*")) == []


def test_orphaned_tempdirs_of_live_processes_are_kept(tmp_path):
    from sitsprof.common.procs import remove_orphaned_tempdirs

    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = tmp_path / f"sitsprof-sweep-{os.getpid()}-abc"
    live = tmp_path / "sitsprof-sweep-1-abc"  # pid 1 is always alive
    gone = tmp_path / f"sitsprof-sweep-{dead.pid}-abc"
    other = tmp_path / f"other-{dead.pid}-abc"
    for folder in (mine, live, gone, other):
        folder.mkdir()
    assert remove_orphaned_tempdirs("sitsprof-sweep-", str(tmp_path)) == [str(gone)]
    assert mine.exists() and live.exists() and other.exists() and not gone.exists()
