"""Recording: samplers running beside a workload, flushed into a run directory as they go.

`Recorder` starts the samplers and a writer thread that every `flush_every_s` drains each
sampler into `samplers/<name>.parts/part-NNNNN.parquet` and refreshes the sampler stats in
meta.json, so a run killed with SIGKILL keeps all but the last second. `record()` is
`sitsprof record`: device facts, optional clock lock, clock sync, samplers, the command.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

from sitsprof.collectors.errors import CollectorError
from sitsprof.collectors.rundir import RunDirectory
from sitsprof.pmu.errors import PmuError


class Recorder:
    """Runs samplers and flushes them into `run` until `stop()`."""

    def __init__(self, run: RunDirectory, samplers: list, flush_every_s: float = 1.0):
        self.run = run
        self.samplers = list(samplers)
        self.flush_every_s = flush_every_s
        self.skipped: dict[str, str] = {}
        self._stop = threading.Event()
        self._writer = None
        self.write_errors: list[str] = []

    def start(self, optional: tuple[str, ...] = ()) -> "Recorder":
        """Start each sampler; one named in `optional` that cannot start is skipped with the reason."""
        import pyarrow.parquet  # noqa: F401 - imported now, not in the first flush

        started = []
        for sampler in self.samplers:
            try:
                sampler.start()
            except (PmuError, CollectorError, ImportError) as exc:
                if sampler.name not in optional:
                    for other in started:
                        other.stop()
                    raise
                self.skipped[sampler.name] = str(exc)
                continue
            started.append(sampler)
        self.samplers = started
        self.run.update_meta(samplers_skipped=self.skipped, samplers=self._stats())
        self._writer = threading.Thread(target=self._write_loop, name="sitsprof-writer", daemon=True)
        self._writer.start()
        return self

    def _stats(self) -> dict:
        return {s.name: {**s.describe(), **s.stats()} for s in self.samplers}

    def flush(self) -> None:
        for sampler in self.samplers:
            try:
                columns = sampler.drain()
                if columns:
                    self.run.append_table(sampler.name, columns, kind="sampler")
            except Exception as exc:  # noqa: BLE001 - keep recording; report at the end
                self.write_errors.append(f"{sampler.name}: {type(exc).__name__}: {exc}")
        self.run.update_meta(samplers=self._stats())

    def _write_loop(self) -> None:
        while not self._stop.wait(self.flush_every_s):
            self.flush()

    def stop(self) -> dict:
        """Stop the samplers, flush the rest, record final stats; returns them."""
        for sampler in self.samplers:
            sampler.stop()
        self._stop.set()
        if self._writer is not None:
            self._writer.join()
        self.flush()
        stats = self._stats()
        if self.write_errors:
            self.run.update_meta(sampler_write_errors=self.write_errors)
        return stats


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: the workload gets SIGTERM if sitsprof dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001
        pass


def _end(child: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM, then SIGKILL if the workload has not exited within `grace_s`."""
    child.terminate()
    try:
        child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _run_workload(command, duration_s, grace_s: float = 5.0) -> dict:
    """Run `command` (or just wait) for at most `duration_s`; returns what happened."""
    started = time.monotonic()
    if not command:
        time.sleep(duration_s)
        return {"exit_code": None, "timed_out": False, "seconds": time.monotonic() - started}
    try:
        child = subprocess.Popen(command, preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    except OSError as exc:
        raise CollectorError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
    timed_out = False
    try:
        child.wait(timeout=duration_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _end(child, grace_s)
    except BaseException:
        # interrupted (Ctrl-C, SIGTERM): take the workload down with us
        if child.poll() is None:
            _end(child, grace_s)
        raise
    return {"exit_code": child.returncode, "timed_out": timed_out, "seconds": time.monotonic() - started, "pid": child.pid}


def build_samplers(device_index: int = 0, nvml_interval_s: float = 0.01, gpm: bool = True,
                   gpm_interval_s: float = 0.1, cupti: bool = False, cupti_interval_ns: int = 10_000,
                   nvml_groups=None) -> list:
    from sitsprof.collectors.nvml_sampler import DEFAULT_GROUPS, NvmlSampler

    samplers = [NvmlSampler(device_index, nvml_interval_s, nvml_groups or DEFAULT_GROUPS)]
    if gpm:
        from sitsprof.collectors.gpm_sampler import GpmSampler

        samplers.append(GpmSampler(device_index, gpm_interval_s))
    if cupti:
        from sitsprof.collectors.cupti_sampler import CuptiPmSampler

        samplers.append(CuptiPmSampler(device_index, cupti_interval_ns))
    return samplers


def record(command=None, duration_s: float | None = None, parent="runs", name: str | None = None,
           device_index: int = 0, clocks: str = "none", sm="max", memory=None,
           nvml_interval_s: float = 0.01, nvml_groups=None, gpm: bool = True, cupti: bool = False,
           cupti_interval_ns: int = 10_000, flush_every_s: float = 1.0, require=(),
           on_start=None) -> tuple[RunDirectory, dict]:
    """`sitsprof record`: returns (run, workload result). GPM and CUPTI are skipped with the
    reason when unavailable, unless named in `require`."""
    from sitsprof.collectors.clocksync import clock_sync
    from sitsprof.pmu.clocks import locked_clocks, terminate_raises
    from sitsprof.pmu.device import device_facts

    command = list(command or [])
    if not command and duration_s is None:
        raise CollectorError("nothing to record: give a command after `--`, or --duration")
    facts = device_facts(device_index)
    run = RunDirectory.create(parent, name, meta={
        "kind": "record", "device": facts,
        "workload": {"command": command, "duration_limit_s": duration_s},
    })
    result: dict = {}
    session = None
    with terminate_raises(), run:
        try:
            with locked_clocks(device_index, sm=sm, memory=memory, mode=clocks) as session:
                run.update_meta(clocks=session.to_dict(), clock_sync=clock_sync(device_index if cupti else None))
                samplers = build_samplers(device_index, nvml_interval_s, gpm, cupti=cupti,
                                          cupti_interval_ns=cupti_interval_ns, nvml_groups=nvml_groups)
                recorder = Recorder(run, samplers, flush_every_s)
                optional = tuple(n for n in ("gpm", "cupti_pm") if n not in require)
                recorder.start(optional=optional)
                if on_start is not None:
                    on_start(run)
                try:
                    result = _run_workload(command, duration_s)
                finally:
                    stats = recorder.stop()
                    run.update_meta(samplers=stats)
        finally:
            # after the lock is released, even on an exception and before the run is marked:
            # what was restored, clocks after
            if session is not None:
                run.update_meta(clocks=session.to_dict())
        run.update_meta(workload={**run.meta["workload"], **result})
    return run, result
