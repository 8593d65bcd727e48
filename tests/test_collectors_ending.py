"""How a recording ends, wherever a signal lands and however the workload is set up.

Issue 12 item 4: a SIGINT/SIGTERM during the end-of-run merge (or anywhere in the teardown)
never leaves meta.json `running`. Item 5: the workload runs in its own process group and
stopping it stops its children too. Item 10: a closed stdout keeps the workload's exit
status, and meta.json's `error` is readable ("terminated by signal 15 (SIGTERM)").
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sitsprof.collectors import record as record_module
from sitsprof.collectors.recorder import Recorder
from sitsprof.collectors.rundir import RunDirectory, open_run
from sitsprof.common.signals import Terminated, signals_deferred

RUNNER = Path(__file__).resolve().parent / "fakenvml" / "run_sitsprof.py"


@pytest.fixture(autouse=True)
def _sigint_raises():
    """Python turns SIGINT into KeyboardInterrupt only if SIGINT was not ignored when it started;
    a test run started in the background of a non-interactive shell inherits it ignored, so these
    tests install Python's own handler while they run (and restore what was there)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


# -- item 4: signals in the teardown ----------------------------------------------------------------

@pytest.mark.parametrize("signum, raised", [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_signal_during_the_merge_still_marks_the_run(fake_gpu, tmp_path, monkeypatch, signum, raised):
    """12.4: the signal arrives while finish() merges the parts: the run is marked (complete:
    the work had ended), then the signal acts (exit 143/130), never meta.json `running`."""
    merge = RunDirectory._merge_parts

    def merge_hit_by_signal(self):
        os.kill(os.getpid(), signum)
        time.sleep(0.01)  # the handler runs here, in the middle of the merge
        merge(self)

    monkeypatch.setattr(RunDirectory, "_merge_parts", merge_hit_by_signal)
    with pytest.raises(raised):
        record_module.record(duration_s=0.2, parent=tmp_path, name="r", gpm=False, flush_every_s=0.05)
    meta = open_run(tmp_path / "r").meta
    assert meta["status"] == "complete" and meta["ended_at"]
    assert (tmp_path / "r" / "samplers" / "nvml.parquet").exists()


def test_signal_while_the_samplers_stop_still_marks_the_run(fake_gpu, tmp_path, monkeypatch):
    """12.4: SIGTERM while the samplers are being stopped: the teardown goes on to the end
    (samplers stopped, clocks restored, run marked) and then the signal acts."""
    stop = Recorder.stop

    def stop_hit_by_signal(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        return stop(self)

    monkeypatch.setattr(Recorder, "stop", stop_hit_by_signal)
    with pytest.raises(Terminated):
        record_module.record(duration_s=0.2, parent=tmp_path, name="r", gpm=False, clocks="lock",
                             flush_every_s=0.05)
    meta = open_run(tmp_path / "r").meta
    assert meta["status"] == "complete" and meta["samplers"]["nvml"]["samples"] > 0
    assert meta["clocks"]["restored"] and fake_gpu.state["devices"][0]["locked_gpu"] is None


def test_signals_deferred_delivers_after_the_block():
    """The deferral holds a signal until the block ends, then raises it through the handler
    the block started with; `released()` lets it through at once."""
    done = []
    with pytest.raises(KeyboardInterrupt):
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
            done.append("rest of the block")
    assert done == ["rest of the block"]
    with pytest.raises(KeyboardInterrupt):
        with signals_deferred() as deferred:
            with deferred.released():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.5)
                done.append("never")
    assert done == ["rest of the block"]


def _sweep_trial(tmp_path: Path, index: int, delay_s: float, signum: int, after: str) -> tuple[int, dict]:
    """One `sitsprof record` child signalled `delay_s` after `after` happened: "workload" (its
    command ended) or "merge" (the merged sampler table appeared: finish() is under way)."""
    done = tmp_path / f"done-{index}"
    out = tmp_path / "runs"
    merged = out / f"r{index}" / "samplers" / "nvml.parquet"
    mark = done if after == "workload" else merged
    child = subprocess.Popen(
        [sys.executable, str(RUNNER), "record", "--out", str(out), "--name", f"r{index}", "--no-gpm",
         "--interval", "1ms", "--", "sh", "-c", f"sleep 0.3; touch {done}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 20
        while not mark.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.0005)
        time.sleep(delay_s)
        if child.poll() is None:
            child.send_signal(signum)
        child.wait(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
    return child.returncode, open_run(out / f"r{index}").meta


def test_signal_sweep_around_the_end_never_leaves_running(fake_gpu, tmp_path):
    """12.4: `sitsprof record` in a child, signalled at many moments of its end: 0-3 ms after
    the merge has begun (before the fix: 8 of 8 runs said `running`) and 0-150 ms after the
    workload ended (the samplers stopping, the clocks, the merge, the last meta.json): every
    run ends complete or interrupted, with `ended_at`."""
    trials = [("merge", ms) for ms in (0, 0, 0, 1, 1, 2, 2, 3)] + [("workload", ms) for ms in (0, 50, 100, 150)]
    outcomes = []
    for index, (after, delay_ms) in enumerate(trials):
        signum = (signal.SIGINT, signal.SIGTERM)[index % 2]
        code, meta = _sweep_trial(tmp_path, index, delay_ms / 1e3, signum, after)
        outcomes.append((after, delay_ms, signum.name, code, meta["status"], meta["ended_at"] is not None))
    bad = [o for o in outcomes if o[4] not in ("complete", "interrupted") or not o[5]]
    assert not bad, outcomes
    # 130/143: the signal acted once the run was marked; -2/-15: it came after sitsprof's own handlers
    assert all(o[3] in (0, 130, 143, -2, -15) for o in outcomes), outcomes


# -- item 5: the workload's process group -------------------------------------------------------

def _processes_with(marker: str, program: str | None = None) -> list[int]:
    """Live processes whose command line holds `marker` (and whose argv[0] is `program`, if given)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z" and (program is None or cmdline.split(" ")[0] == program):
            found.append(int(entry.name))
    return found


@pytest.fixture
def marker():
    """A unique `sleep` argument to find the workload's grandchildren by; kills survivors."""
    mark = f"37.{random.randrange(10**6):06d}"
    yield mark
    for pid in _processes_with(mark):
        os.kill(pid, signal.SIGKILL)


def _recording(tmp_path, shell: str, script: str) -> subprocess.Popen:
    """`sitsprof record -- SHELL -c SCRIPT` (fake NVML) in a child process, once it records."""
    child = subprocess.Popen(
        [sys.executable, str(RUNNER), "record", "--out", str(tmp_path), "--name", "r", "--no-gpm",
         "--", shell, "-c", script],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    assert "recording into" in child.stderr.readline()
    return child


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc to find the processes")
def test_duration_stops_the_workloads_children(fake_gpu, tmp_path, marker):
    """12.5: --duration stops the whole process group: the shell's `sleep` child too."""
    run, result = record_module.record(["sh", "-c", f"sleep {marker}; true"], duration_s=0.3, parent=tmp_path,
                                       name="r", gpm=False)
    assert result["timed_out"]
    time.sleep(0.1)
    assert _processes_with(f"sleep {marker}") == []


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc to find the processes")
def test_children_ignoring_sigterm_get_sigkill_after_the_grace(marker):
    """12.5: a child that ignores SIGTERM is killed once the grace period is over."""
    started = time.monotonic()
    result = record_module._run_workload(["sh", "-c", f"trap '' TERM; sleep {marker}; true"], 0.2, grace_s=0.3)
    assert result["timed_out"] and time.monotonic() - started < 5
    time.sleep(0.1)
    assert _processes_with(f"sleep {marker}") == []


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc to find the processes")
def test_interrupting_sitsprof_stops_the_workloads_children(fake_gpu, tmp_path, marker):
    """12.5: Ctrl-C on `sitsprof record` takes the whole workload down, grandchildren included."""
    child = _recording(tmp_path, "sh", f"sleep {marker}; true")
    try:
        deadline = time.monotonic() + 10
        while not _processes_with(f"sleep {marker}") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _processes_with(f"sleep {marker}")
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=20) == 130
    finally:
        if child.poll() is None:
            child.kill()
    time.sleep(0.1)
    assert _processes_with(f"sleep {marker}") == []
    assert open_run(tmp_path / "r").meta["status"] == "interrupted"


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc to find the processes")
def test_sigkill_of_record_leaves_no_grandchild(fake_gpu, tmp_path, marker):
    """22.2: `record -- bash -c 'sleep A & sleep B & wait'` SIGKILLed: the parent-death signal
    reaches bash only; the watchdog takes both sleeps down within 5 s."""
    child = _recording(tmp_path, "bash", f"sleep {marker} & sleep 1{marker} & wait")
    try:
        deadline = time.monotonic() + 10
        while len(_processes_with(marker, "sleep")) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(_processes_with(marker, "sleep")) == 2
        child.kill()
        child.wait(timeout=10)
        deadline = time.monotonic() + 5
        while _processes_with(marker, "sleep") and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if child.poll() is None:
            child.kill()
    assert _processes_with(marker, "sleep") == [], "the workload's grandchildren outlived a SIGKILLed record"


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc to find the processes")
def test_workload_exit_stops_its_background_jobs(fake_gpu, tmp_path, marker):
    """22.2: `sh -c 'sleep N & exit 0'` ends at once; the sleep it left is the run's and stops with it."""
    run, result = record_module.record(["sh", "-c", f"sleep {marker} & exit 0"], parent=tmp_path, name="r",
                                       gpm=False)
    assert result["exit_code"] == 0 and not result["timed_out"]
    assert _processes_with(f"sleep {marker}") == []


# -- item 10 ------------------------------------------------------------------------------------

def test_closed_stdout_keeps_the_workloads_exit_status(fake_gpu, tmp_path):
    """12.10: `sitsprof record -- cmd | head -0`: sitsprof's summary hits a closed pipe, and
    still exits with the workload's status (3), not 1."""
    child = subprocess.Popen(
        [sys.executable, str(RUNNER), "record", "--out", str(tmp_path), "--name", "r", "--no-gpm",
         "--", "sh", "-c", "exit 3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    child.stdout.close()
    err = child.stderr.read()
    assert child.wait(timeout=30) == 3, err
    assert "exited with status 3" in err and "Traceback" not in err and "Exception ignored" not in err
    assert open_run(tmp_path / "r").meta["workload"]["exit_code"] == 3


@pytest.mark.parametrize("exc, text", [
    (Terminated(signal.SIGTERM), "terminated by signal 15 (SIGTERM)"),
    (Terminated(signal.SIGHUP), "terminated by signal 1 (SIGHUP)"),
    (KeyboardInterrupt(), "interrupted by signal 2 (SIGINT)"),
])
def test_error_in_meta_json_is_readable(fake_gpu, tmp_path, exc, text):
    """12.10: meta.json's `error` for a signal is plain words, not a private class (`_Terminated: 143`)."""
    with pytest.raises(type(exc)):
        record_module.record(["sleep", "5"], parent=tmp_path, name="r", gpm=False,
                             on_start=lambda run: (_ for _ in ()).throw(exc))
    meta = open_run(tmp_path / "r").meta
    assert meta["status"] == "interrupted" and meta["error"] == text
    assert Terminated(signal.SIGTERM).code == 143  # the exit status stays 128 + N


_SIGNAL_IN_FORK_HOOK = {"armed": False}


def _sigterm_in_fork_hook():
    """Runs in the parent right after every fork: sends SIGTERM to this process once, when armed."""
    if _SIGNAL_IN_FORK_HOOK["armed"]:
        _SIGNAL_IN_FORK_HOOK["armed"] = False
        os.kill(os.getpid(), signal.SIGTERM)


os.register_at_fork(after_in_parent=_sigterm_in_fork_hook)


def test_sigterm_while_the_workload_is_forked_is_not_lost():
    """12.4 (found by tests/fault_injection.py): a SIGTERM landing while Popen forks the
    workload was raised inside Python's fork hooks, printed as 'Exception ignored' and
    swallowed, so the run went on and exited 0. Now it is held over the fork and delivered
    once Popen returns: the workload is stopped and Terminated reaches the caller."""
    from sitsprof.common.signals import terminate_raises

    started = time.monotonic()
    with terminate_raises():
        _SIGNAL_IN_FORK_HOOK["armed"] = True
        try:
            with pytest.raises(Terminated):
                record_module._run_workload(["sleep", "30"], duration_s=30, grace_s=2)
        finally:
            _SIGNAL_IN_FORK_HOOK["armed"] = False
    assert time.monotonic() - started < 10  # the 30 s workload was stopped, not waited for
