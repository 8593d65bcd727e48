"""`sitsprof record`: a workload run as a child process under the samplers.

The child is tied to sitsprof (it gets SIGTERM if sitsprof dies, even by SIGKILL, and is
taken down when sitsprof is interrupted), so locked clocks are never left serving a workload
nobody is recording. It runs in its own process group, and stopping it (on --duration or an
interruption) stops the whole group: a shell script's children, a launcher's workers, not only
the direct child. Every exit path ends the whole group: a workload that exits leaving background
processes behind has them stopped too, and if sitsprof itself is killed (SIGKILL, which no code
of its own survives) a watchdog process (collectors/watchdog.py) stops the group. (A group of
its own is not the terminal's foreground group: Ctrl-C reaches sitsprof, which stops the
workload, and a workload that reads the terminal would be stopped by SIGTTIN, so a recorded
command should not be interactive.) The run directory, clocks and
samplers come from `recording()`.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

from sitsprof.collectors.errors import CollectorError, WorkloadFailed
from sitsprof.collectors.rundir import RunDirectory
from sitsprof.common.procs import die_with_parent
from sitsprof.common.signals import signals_deferred

__all__ = ["check_workload", "record"]


def _start_child() -> None:  # pragma: no cover - runs in the child
    """Its own process group (its pid), so the whole workload can be stopped at once; and on
    Linux SIGTERM if sitsprof dies (even by SIGKILL)."""
    os.setpgid(0, 0)
    die_with_parent(signal.SIGTERM)


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the process group; False when no process is left in it."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member that changed user: still there
        return True
    return True


def _end(child: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the workload's process group, then SIGKILL to whatever of it is left after
    `grace_s` (the direct child first reaped, so its pid stays the group's until then). A group
    already empty (the usual end of a workload) costs one kill(2)."""
    pgid = child.pid
    if child.returncode is not None and not _signal_group(pgid, 0):
        return
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    try:
        child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    while _signal_group(pgid, 0) and time.monotonic() < deadline:
        time.sleep(0.01)  # the rest of the group, still exiting
    _signal_group(pgid, signal.SIGKILL)
    child.wait()


def _run_workload(command, duration_s, grace_s: float = 5.0) -> dict:
    """Run `command` (or just wait) for at most `duration_s`; returns what happened."""
    started = time.monotonic()
    if not command:
        time.sleep(duration_s)
        return {"exit_code": None, "timed_out": False, "seconds": time.monotonic() - started}
    from sitsprof.collectors.watchdog import GroupWatchdog

    child = watchdog = None
    timed_out = False
    try:
        # Signals wait until Popen returns: with preexec_fn, Python runs fork hooks in this
        # process, and an exception a handler raises inside one is printed and swallowed, so a
        # SIGTERM landing there was lost and the run went on. Held, it is delivered on leaving
        # the block, where `child` is known and is stopped with us.
        with signals_deferred():
            try:
                child = subprocess.Popen(command, preexec_fn=_start_child)
            except OSError as exc:
                raise CollectorError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
            watchdog = GroupWatchdog(child.pid, grace_s)
        child.wait(timeout=duration_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # every way out (its end, --duration, Ctrl-C, SIGTERM) takes the whole group down: a
        # shell's background jobs too; then the watchdog may leave
        if child is not None:
            _end(child, grace_s)
        if watchdog is not None:
            watchdog.release()
    return {"exit_code": child.returncode, "timed_out": timed_out, "seconds": time.monotonic() - started,
            "pid": child.pid}


def record(command=None, duration_s: float | None = None, parent="runs", name: str | None = None,
           device_index: int = 0, clocks: str = "none", sm="max", memory=None,
           nvml_interval_s: float = 0.01, nvml_groups=None, gpm: bool = True, gpm_interval_s: float = 0.2,
           cupti: bool = False, cupti_interval_ns: int = 100_000, flush_every_s: float = 1.0, require=(),
           on_start=None) -> tuple[RunDirectory, dict]:
    """`sitsprof record`: returns (run, workload result). GPM and CUPTI are skipped with the
    reason when unavailable, unless named in `require`."""
    from sitsprof.collectors.recording import recording

    command = list(command or [])
    if not command and duration_s is None:
        raise CollectorError("nothing to record: give a command after `--`, or --duration")
    workload = {"command": command, "duration_limit_s": duration_s}
    with recording(parent, name, "record", {"workload": workload}, device_index, clocks=clocks, sm=sm,
                   memory=memory, nvml_interval_s=nvml_interval_s, nvml_groups=nvml_groups, gpm=gpm,
                   gpm_interval_s=gpm_interval_s,
                   cupti=cupti, cupti_interval_ns=cupti_interval_ns, flush_every_s=flush_every_s,
                   optional=tuple(n for n in ("gpm", "cupti_pm") if n not in require)) as rec:
        if on_start is not None:
            on_start(rec.run)
        result = _run_workload(command, duration_s)
        rec.set_outcome(workload={**workload, **result})
    return rec.run, result


def check_workload(command, result: dict) -> None:
    """Raise WorkloadFailed when the workload exited non-zero on its own (not stopped by --duration)."""
    code = result.get("exit_code")
    if code and not result.get("timed_out"):
        raise WorkloadFailed(command, code)
