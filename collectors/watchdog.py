"""A watchdog that outlives sitsprof and takes a recorded workload's process group down with it.

The workload runs in a process group of its own, and its direct child gets SIGTERM when
sitsprof dies (PR_SET_PDEATHSIG). That signal reaches the direct child only: a SIGKILLed
`sitsprof record -- bash -c 'sleep 777 & sleep 778 & wait'` left both `sleep`s running,
reparented to pid 1, on a GPU whose clocks may still be locked. No code in a SIGKILLed process
runs, so the cleanup has to live elsewhere: a tiny separate process (a few lines of Python, no
sitsprof import, started in ~20 ms) that holds the read end of a pipe whose only write end is
sitsprof's. When the pipe reaches end-of-file without the word "done" (sitsprof died, however),
it sends SIGTERM to the group, and SIGKILL to whatever is left of it after the grace period.

The group's id stays reserved while any member lives (the kernel does not reuse a pid that is
still a process group's id), so the watchdog can only ever signal the workload's own processes
until the last of them has exited. A process that leaves the group on purpose (setsid, a
daemon) is out of reach, as it is for `_end` in collectors/record.py.
"""
from __future__ import annotations

import subprocess
import sys

__all__ = ["GroupWatchdog"]

#: The watchdog itself: standard library only, signals of the terminal ignored (sitsprof stops
#: the workload itself on Ctrl-C and then says "done").
_CODE = r"""
import os, signal, sys, time
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(sig, signal.SIG_IGN)
pgid, grace = int(sys.argv[1]), float(sys.argv[2])
said = b""
while True:
    try:
        chunk = os.read(0, 64)
    except InterruptedError:
        continue
    if not chunk:
        break
    said += chunk
if b"done" in said:
    sys.exit(0)
def alive():
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
try:
    os.killpg(pgid, signal.SIGTERM)
except OSError:
    sys.exit(0)
deadline = time.monotonic() + grace
while alive() and time.monotonic() < deadline:
    time.sleep(0.05)
try:
    os.killpg(pgid, signal.SIGKILL)
except OSError:
    pass
"""


class GroupWatchdog:
    """Kills process group `pgid` (SIGTERM, then SIGKILL after `grace_s`) if this process dies
    before `release()`. Starting it is best effort: where no watchdog can be started, `record`
    still has the parent-death signal of the direct child."""

    def __init__(self, pgid: int, grace_s: float = 5.0):
        self.pgid = pgid
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _CODE, str(pgid), str(grace_s)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
        except OSError:
            self._process = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def release(self) -> None:
        """The workload is ended (its group stopped by sitsprof): the watchdog leaves without a signal."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.write(b"done")
            process.stdin.close()
        except OSError:  # it died already: nothing to tell
            pass
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> GroupWatchdog:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

