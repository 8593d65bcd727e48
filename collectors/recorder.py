"""The samplers of one run and the thread that flushes them into its run directory.

Every `flush_every_s` the writer drains each sampler into
`samplers/<name>.parts/part-NNNNN.parquet` and refreshes the sampler stats in meta.json, so a
run killed with SIGKILL keeps all but the last second. A sampler that fails to write is noted
and recording goes on: losing one table must not lose the run.

A write that fails (a full disk, most often) never stops the writer: the rows it could not
write wait for the next flush, up to a bound, and the ones past it are counted as lost, so
meta.json's row counts are always what is on disk. `stop()` says what was lost and
`raise_if_lost()` turns it into the user's one-line error once the run has been marked.
"""
from __future__ import annotations

import threading
from collections import defaultdict, deque

from sitsprof.collectors.errors import CollectorError, RunWriteError
from sitsprof.collectors.rundir import RunDirectory, describe_exception
from sitsprof.pmu.errors import PmuError

__all__ = ["Recorder", "build_samplers"]

_MAX_PENDING_ROWS = 100_000  # per sampler, kept in memory while writes fail (~1.5 min at 1 kHz)
_MAX_ERRORS_KEPT = 20


class Recorder:
    """Runs samplers and flushes them into `run` until `stop()`."""

    def __init__(self, run: RunDirectory, samplers: list, flush_every_s: float = 1.0):
        self.run = run
        self.samplers = list(samplers)
        self.flush_every_s = flush_every_s
        self.skipped: dict[str, str] = {}
        self._stop = threading.Event()
        self._writer = None
        self.write_errors: list[str] = []  # distinct messages, oldest first
        self.write_failures = 0
        self.rows_lost: dict[str, int] = defaultdict(int)
        self._pending: dict[str, deque] = defaultdict(deque)  # chunks (columns) waiting to be written
        self._first_failure: RunWriteError | None = None

    def start(self, optional: tuple[str, ...] = ()) -> Recorder:
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

    def _failed(self, name: str | None, exc: BaseException) -> None:
        self.write_failures += 1
        if isinstance(exc, RunWriteError) and self._first_failure is None:
            self._first_failure = exc
        message = f"{name}: {describe_exception(exc)}" if name else describe_exception(exc)
        if message not in self.write_errors and len(self.write_errors) < _MAX_ERRORS_KEPT:
            self.write_errors.append(message)

    def _write_pending(self, name: str) -> None:
        """Write the chunks waiting for `name`, oldest first, until one fails."""
        pending = self._pending[name]
        while pending:
            columns = pending[0]
            try:
                self.run.append_table(name, columns, kind="sampler", write_meta=False)
            except RunWriteError as exc:  # full disk, read-only: try again next flush
                self._failed(name, exc)
                break
            except Exception as exc:  # noqa: BLE001 - rows that can never be written: lost, not retried
                self._failed(name, exc)
                self.rows_lost[name] += _rows(columns)
            pending.popleft()
        while sum(map(_rows, pending)) > _MAX_PENDING_ROWS:
            self.rows_lost[name] += _rows(pending.popleft())

    def flush(self) -> None:
        """Drain every sampler and write what waits; never raises (failures are counted)."""
        for sampler in self.samplers:
            columns = sampler.drain()
            if columns:
                self._pending[sampler.name].append(columns)
            self._write_pending(sampler.name)
        try:
            self.run.update_meta(samplers=self._stats(), **self._loss())
        except Exception as exc:  # noqa: BLE001 - meta.json is written again at the end
            self._failed(None, exc)

    def _loss(self) -> dict:
        if not self.write_failures:
            return {}
        return {"sampler_write_errors": list(self.write_errors), "sampler_rows_lost": dict(self.rows_lost)}

    def _write_loop(self) -> None:
        while not self._stop.wait(self.flush_every_s):
            try:
                self.flush()
            except Exception as exc:  # noqa: BLE001 - the writer outlives any one flush
                self._failed(None, exc)

    def stop(self) -> dict:
        """Stop the samplers, flush the rest, record final stats; returns them. Rows that still
        cannot be written are counted lost (`sampler_rows_lost` in meta.json)."""
        for sampler in self.samplers:
            sampler.stop()
        self._stop.set()
        if self._writer is not None:
            self._writer.join()
        self.flush()
        for name, pending in self._pending.items():
            self.rows_lost[name] += sum(map(_rows, pending))
            pending.clear()
        stats = self._stats()
        if self.write_failures:
            self.run.meta.update(self._loss())  # written with the run's next meta.json
        return stats

    def raise_if_lost(self) -> None:
        """After `stop()`: a run that lost rows to a failed write ends in that one-line error."""
        lost = sum(self.rows_lost.values())
        if not lost:
            return
        first = self._first_failure
        if first is None:
            raise CollectorError(f"{self.run.path}: {lost} sampler rows could not be written: "
                                 f"{self.write_errors[0] if self.write_errors else 'unknown error'}")
        kept = sum(t.get("rows", 0) for t in self.run.meta.get("tables", {}).get("samplers", {}).values())
        error = type(first)(f"{first.target}: {first.reason}: {lost} sampler rows lost, {kept} kept in the "
                            f"run directory ({first.hint})")
        raise error from first


def build_samplers(device_index: int = 0, nvml_interval_s: float = 0.01, gpm: bool = True,
                   gpm_interval_s: float = 0.2, cupti: bool = False, cupti_interval_ns: int = 100_000,
                   nvml_groups=None) -> list:
    """The samplers a run asks for, not yet started: NVML always (with the driver's own power and
    utilisation series where those groups are sampled), GPM and CUPTI PM sampling when asked."""
    from sitsprof.collectors.nvml_sampler import DEFAULT_GROUPS, SERIES_OF_GROUP, NvmlSampler, NvmlSeriesSampler

    groups = nvml_groups or DEFAULT_GROUPS
    samplers = [NvmlSampler(device_index, nvml_interval_s, groups)]
    series = [column for group in groups for column in SERIES_OF_GROUP.get(group, ())]
    if series:
        samplers.append(NvmlSeriesSampler(device_index, series=series))
    if gpm:
        from sitsprof.collectors.gpm_sampler import GpmSampler

        samplers.append(GpmSampler(device_index, gpm_interval_s))
    if cupti:
        from sitsprof.collectors.cupti_sampler import CuptiPmSampler

        samplers.append(CuptiPmSampler(device_index, cupti_interval_ns))
    return samplers


def _rows(columns: dict) -> int:
    return len(columns.get("t_ns") or next(iter(columns.values()), ()))
