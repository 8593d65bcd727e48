"""`sitsprof record` in a child process with the fake NVML: SIGINT/SIGTERM restore the clocks
and mark the run interrupted; SIGKILL leaves a readable, incomplete run and a lock record that
the next command warns about and `sitsprof clocks reset` clears."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fake_nvml
import pytest

from sitsprof.collectors.rundir import open_run

RUNNER = Path(__file__).resolve().parent / "fakenvml" / "run_sitsprof.py"


def _sitsprof(*args, timeout=30):
    return subprocess.run([sys.executable, str(RUNNER), *args], capture_output=True, text=True,
                          timeout=timeout, env=os.environ.copy())


def _start_record(tmp_path, *extra):
    """Start `sitsprof record --clocks lock --sm 1500 -- sleep 60`; return once it is recording."""
    child = subprocess.Popen(
        [sys.executable, str(RUNNER), "record", "--out", str(tmp_path / "runs"), "--name", "r",
         "--clocks", "lock", "--sm", "1500", "--no-gpm", "--interval", "5ms", *extra, "--", "sleep", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    line = child.stderr.readline()  # "sitsprof: recording into ..."
    assert "recording into" in line, line + child.stderr.read()
    return child


def _locked(fake_state_path):
    return fake_nvml.read_state(fake_state_path)["devices"][0]["locked_gpu"]


def _lock_files(tmp_path):
    return list((tmp_path / "state").glob("clocks-*.json"))


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_restores_clocks_and_marks_run(fake_gpu, tmp_path, signum, code):
    state = os.environ[fake_nvml.ENV]
    child = _start_record(tmp_path)
    try:
        assert _locked(state) == [1500, 1500]
        assert len(_lock_files(tmp_path)) == 1
        time.sleep(0.3)
        child.send_signal(signum)
        child.wait(timeout=15)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == code, child.stderr.read()
    assert _locked(state) is None
    assert _lock_files(tmp_path) == []
    run = open_run(tmp_path / "runs" / "r")
    assert run.meta["status"] == "interrupted" and not run.complete
    assert run.meta["clocks"]["restored"] is True
    assert len(run.read_table("nvml", "sampler")) > 0


def test_sigkill_leaves_incomplete_run_and_stale_lock(fake_gpu, tmp_path):
    state = os.environ[fake_nvml.ENV]
    child = _start_record(tmp_path)
    try:
        parts = tmp_path / "runs" / "r" / "samplers" / "nvml.parts"
        deadline = time.monotonic() + 10
        while not list(parts.glob("part-*.parquet")) and time.monotonic() < deadline:
            time.sleep(0.1)  # until the first one-second flush
        child.kill()
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
    assert _locked(state) == [1500, 1500]  # nobody restored them
    run = open_run(tmp_path / "runs" / "r")
    assert not run.complete and run.meta["status"] == "running"
    assert len(run.read_table("nvml", "sampler")) > 10

    shown = _sitsprof("inspect", str(tmp_path / "runs" / "r"))
    assert shown.returncode == 0
    assert "INCOMPLETE" in shown.stdout and "samplers/nvml" in shown.stdout
    assert "sitsprof clocks reset" in shown.stderr  # the root command warns about the stale lock

    reset = _sitsprof("clocks", "reset")
    assert reset.returncode == 0, reset.stderr
    assert "left locked by sitsprof" in reset.stdout
    assert _locked(state) is None and _lock_files(tmp_path) == []
    from sitsprof.pmu.lockstate import stale_lock_warning

    assert stale_lock_warning() is None  # the next command no longer warns
