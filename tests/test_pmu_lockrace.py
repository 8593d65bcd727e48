"""Issue 12 item 1: two runs that lock the same GPU's clocks at the same moment must not both
get the lock. Pairs of processes (tests/fakenvml/lock_racer.py) are released from a pipe
together against the fake NVML; every time exactly one holds the clocks and the other is
refused with one line naming the holder (pid, command, host, since)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import fake_nvml

RACER = Path(__file__).resolve().parent / "fakenvml" / "lock_racer.py"
PAIRS = 20


def _race(folder: Path, contenders: int = 2) -> list[dict]:
    folder.mkdir()
    results = folder / "results"
    results.mkdir()
    env = os.environ.copy()
    env[fake_nvml.ENV] = str(fake_nvml.write_state(folder / "fake-nvml.json"))
    env["SITSPROF_STATE_DIR"] = str(folder / "state")
    read_fd, write_fd = os.pipe()
    children = [subprocess.Popen([sys.executable, str(RACER), str(read_fd), str(results), f"c{i}", str(contenders)],
                                 pass_fds=(read_fd,), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for i in range(contenders)]
    os.close(read_fd)
    try:
        deadline = time.monotonic() + 60
        while len(list(results.glob("*.ready"))) < contenders:
            assert time.monotonic() < deadline, "contenders never got ready"
            assert all(c.poll() is None for c in children), [c.communicate() for c in children]
            time.sleep(0.01)
        os.write(write_fd, b"x" * contenders)  # the start: every contender wakes at once
        for child in children:
            _, err = child.communicate(timeout=60)
            assert child.returncode == 0, err.decode()
    finally:
        os.close(write_fd)
        for child in children:
            if child.poll() is None:
                child.kill()
    outcomes = [json.loads(p.read_text()) for p in sorted(results.glob("*.result"))]
    assert len(outcomes) == contenders
    assert fake_nvml.read_state(env[fake_nvml.ENV])["devices"][0]["locked_gpu"] is None  # the winner restored
    assert not list((folder / "state").glob("clocks-*.json"))
    return outcomes


def test_exactly_one_of_two_simultaneous_runs_holds_the_clocks(tmp_path):
    both_held = 0
    for pair in range(PAIRS):
        outcomes = _race(tmp_path / f"pair{pair}")
        held = [o for o in outcomes if o["outcome"] == "held"]
        if len(held) != 1:
            both_held += 1
            continue
        (refused,) = [o for o in outcomes if o["outcome"] == "refused"]
        message = refused["message"]
        assert "\n" not in message
        assert f"held by another sitsprof run (pid {held[0]['pid']}" in message
        assert socket.gethostname() in message and "lock_racer.py" in message and "since 20" in message
    assert both_held == 0, f"{both_held} of {PAIRS} pairs did not end with exactly one holder"
