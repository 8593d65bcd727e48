"""Background samplers: one thread each, one monotonic clock, honest rate and drop accounting.

A `PeriodicSampler` calls `read()` on a fixed grid of ticks (`interval_s` apart, on
`time.monotonic_ns`). A tick that comes while the previous read is still running, or that the
thread wakes up too late for, is counted in `dropped` and skipped, never squeezed in late, so
the rows stay on the grid and `achieved_hz` is what really happened. Rows accumulate in
columns; `drain()` hands them to the writer (the recorder flushes them to the run directory).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from sitsprof.collectors.errors import SamplerError

__all__ = ["PeriodicSampler"]

_MAX_CONSECUTIVE_ERRORS = 50
_TIMING_WINDOW = 200_000


class PeriodicSampler:
    """Base class: subclasses set `name` and implement `read()` (and optionally setup/teardown)."""

    name = "sampler"
    min_interval_s = 0.0

    def __init__(self, interval_s: float):
        if interval_s <= 0:
            raise SamplerError(f"{self.name}: interval must be positive, not {interval_s}")
        if interval_s < self.min_interval_s:
            raise SamplerError(
                f"{self.name}: interval {interval_s * 1e3:g} ms is below its minimum of "
                f"{self.min_interval_s * 1e3:g} ms")
        self.interval_s = float(interval_s)
        self._interval_ns = int(round(interval_s * 1e9))
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._columns: dict[str, list] = {}
        self._thread: threading.Thread | None = None
        self.samples = 0
        self.dropped = 0
        self.errors = 0
        self.last_error: str | None = None
        self.setup_error: BaseException | None = None
        self.started_ns: int | None = None
        self.stopped_ns: int | None = None
        self.cpu_s = 0.0
        # timing of the most recent samples, for the jitter figures (bounded memory)
        self._lateness: deque[int] = deque(maxlen=_TIMING_WINDOW)
        self._times: deque[int] = deque(maxlen=_TIMING_WINDOW)

    # -- subclass hooks -------------------------------------------------------------------
    def setup(self) -> None:
        """Runs in the sampler thread before the first tick; raise to refuse to start."""

    def read(self) -> dict[str, Any]:
        raise NotImplementedError

    def teardown(self) -> None:
        """Runs in the sampler thread after the last tick."""

    def describe(self) -> dict:
        """Extra facts for meta.json (what was sampled)."""
        return {}

    # -- control ------------------------------------------------------------------------------
    def start(self, timeout: float = 10.0) -> PeriodicSampler:
        """Start the thread and wait until setup is done; re-raise a setup failure here."""
        self._thread = threading.Thread(target=self._run, name=f"sitsprof-{self.name}", daemon=True)
        self._thread.start()
        self._ready.wait(timeout)
        if self.setup_error is not None:
            self._thread.join(timeout)
            raise self.setup_error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    # -- the loop ----------------------------------------------------------------------------
    def _run(self) -> None:
        cpu0 = time.thread_time()
        try:
            self.setup()
        except BaseException as exc:  # noqa: BLE001 - handed to start()'s caller
            self.setup_error = exc
            self._ready.set()
            return
        self._ready.set()
        interval = self._interval_ns
        self.started_ns = start = time.monotonic_ns()
        tick = 0
        consecutive = 0
        try:
            while not self._stop.is_set():
                due = start + tick * interval
                now = time.monotonic_ns()
                if now < due:
                    wait = (due - now) / 1e9
                    if wait < 0.005:
                        time.sleep(wait)  # clock_nanosleep: finer than Event.wait
                    else:
                        self._stop.wait(wait)
                    continue
                late = (now - due) // interval
                if late:
                    self.dropped += late
                    tick += late
                    due += late * interval
                t0 = time.monotonic_ns()
                try:
                    row = self.read()
                except Exception as exc:  # noqa: BLE001 - counted, and the loop goes on
                    self.errors += 1
                    consecutive += 1
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    if consecutive >= _MAX_CONSECUTIVE_ERRORS:
                        break
                    tick += 1
                    continue
                consecutive = 0
                t1 = time.monotonic_ns()
                self._append(tick, t0, t1 - t0, row)
                self._lateness.append(t0 - due)
                self._times.append(t0)
                tick += 1
        finally:
            self.stopped_ns = time.monotonic_ns()
            try:
                self.teardown()
            except Exception as exc:  # noqa: BLE001
                self.last_error = f"teardown: {type(exc).__name__}: {exc}"
            self.cpu_s = time.thread_time() - cpu0

    def _append(self, tick: int, t_ns: int, read_ns: int, row: dict) -> None:
        with self._lock:
            columns = self._columns
            count = len(columns.get("t_ns", ()))
            for key, value in {"t_ns": t_ns, "tick": tick, "read_ns": read_ns, **row}.items():
                column = columns.get(key)
                if column is None:  # a column that appears late is padded with nulls
                    column = columns[key] = [None] * count
                column.append(value)
            for column in columns.values():
                if len(column) == count:
                    column.append(None)
            self.samples += 1

    def drain(self) -> dict[str, list]:
        """The rows gathered since the last drain, as columns (empty dict when none)."""
        with self._lock:
            columns, self._columns = self._columns, {}
        return columns

    # -- accounting ----------------------------------------------------------------------------
    def stats(self) -> dict:
        """Requested and achieved rate, dropped ticks, read errors, timing jitter and CPU use."""
        import numpy as np

        end = self.stopped_ns or time.monotonic_ns()
        elapsed = (end - self.started_ns) / 1e9 if self.started_ns else 0.0
        out = {
            "interval_s": self.interval_s,
            "requested_hz": 1.0 / self.interval_s,
            "samples": self.samples,
            "dropped": self.dropped,
            "errors": self.errors,
            "last_error": self.last_error,
            "elapsed_s": elapsed,
            "achieved_hz": self.samples / elapsed if elapsed > 0 else 0.0,
            "cpu_s": self.cpu_s,
            "cpu_pct_of_core": 100.0 * self.cpu_s / elapsed if elapsed > 0 else 0.0,
        }
        if len(self._times) > 2:
            gaps = np.diff(np.array(list(self._times), dtype=np.int64)) / 1e3
            late = np.array(list(self._lateness), dtype=np.int64) / 1e3
            out.update({
                "interval_mean_us": float(gaps.mean()),
                "interval_std_us": float(gaps.std()),
                "lateness_p50_us": float(np.percentile(late, 50)),
                "lateness_p99_us": float(np.percentile(late, 99)),
                "lateness_max_us": float(late.max()),
            })
        return out
