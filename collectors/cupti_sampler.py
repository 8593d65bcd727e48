"""The CUPTI PM-sampling sampler: L2 hit/miss sectors, L2 hit rate, DRAM bytes, at us intervals.

The GPU samples on its own timer into a hardware buffer; this thread decodes that buffer every
`decode_every_s` into the session's one counter-data image and evaluates it there and then
(pmu.cupti_pm), so what it keeps is numpy blocks, never CUPTI images. Host memory is bounded:
pending samples are capped (`max_pending_bytes`); the recorder drains them every second into
numpy columns. Nothing is lost silently: CUPTI's overflow flag and stop reason are read on every
decode, the samples missing from the GPU timeline are counted (`dropped`, and `overflow_samples`
for those around an overflow), samples refused by the pending cap are counted (`host_dropped`),
and a decode CUPTI cannot continue from (ERROR_OUT_OF_MEMORY) restarts sampling and is counted.
Timestamps are the GPU's (ns, %globaltimer domain); `meta.json`'s clock_sync maps them to the
run's monotonic clock.
"""
from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np

from sitsprof.collectors.errors import SamplerError
from sitsprof.pmu.cupti_pm import (
    COUNTER_DATA_FULL,
    DEFAULT_BUFFER_BYTES,
    DEFAULT_DECODE_EVERY_S,
    DEFAULT_INTERVAL_NS,
    END_OF_RECORDS,
    OUT_OF_MEMORY,
    image_samples,
)

__all__ = ["DEFAULT_PENDING_BYTES", "CuptiPmSampler"]

DEFAULT_PENDING_BYTES = 64 * 1024 * 1024
_NO_LOSS, _LOSS_PENDING, _BUFFER_EMPTIED = range(3)
_MAX_ROUNDS = 64  # decodes per period when the image fills (COUNTER_DATA_FULL) before giving the period up


class CuptiPmSampler:
    name = "cupti_pm"

    def __init__(self, device_index: int = 0, interval_ns: int = DEFAULT_INTERVAL_NS, metrics=None,
                 decode_every_s: float = DEFAULT_DECODE_EVERY_S, hardware_buffer_size: int = DEFAULT_BUFFER_BYTES,
                 max_pending_bytes: int = DEFAULT_PENDING_BYTES):
        from sitsprof.pmu.cupti_pm import PmSamplingSession

        if int(interval_ns) <= 0:
            raise SamplerError(f"{self.name}: interval must be positive, not {interval_ns} ns")
        self.interval_ns = int(interval_ns)
        self.decode_every_s = float(decode_every_s)
        self.session = PmSamplingSession(device_index, metrics, self.interval_ns, hardware_buffer_size,
                                         image_samples(self.interval_ns, self.decode_every_s))
        self.max_pending_samples = max(1, int(max_pending_bytes) // (16 + 8 * len(self.session.metrics)))
        self._pending: list[tuple] = []
        self._pending_samples = 0
        self.pending_peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self.error: str | None = None
        self.samples = self.drained = self.dropped = self.host_dropped = 0
        self.overflow_events = self.overflow_samples = self.restarts = self.decodes = 0
        self.stop_reasons: Counter = Counter()
        self.last_stop_reason: str | None = None
        self._overflow_state = _NO_LOSS
        self._first_ns = self._last_ns = self._last_start = None
        self.cpu_s = 0.0

    def start(self) -> CuptiPmSampler:
        self.session.start()  # raises here, in the caller, when PM sampling is unavailable
        self._thread = threading.Thread(target=self._run, name="sitsprof-cupti_pm", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        cpu0 = time.thread_time()
        try:
            while not self._stop.wait(self.decode_every_s):
                self._decode_period()
                self.cpu_s = time.thread_time() - cpu0
            self.session.stop()
            self._decode_period(final=True)
        except Exception as exc:  # noqa: BLE001 - reported in stats
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            try:
                self.session.close()
            except Exception as exc:  # noqa: BLE001
                self.error = self.error or f"disable: {exc}"
            self.cpu_s = time.thread_time() - cpu0

    def _decode_period(self, final: bool = False) -> None:
        """Decode until CUPTI says the records ended (the image holds two periods: usually once)."""
        for _ in range(_MAX_ROUNDS * (100 if final else 1)):
            decoded = self.session.decode()
            self._account(decoded)
            if decoded.stop_reason == OUT_OF_MEMORY:
                if not final:
                    self.session.restart()
                    self.restarts += 1
                return
            if decoded.stop_reason != COUNTER_DATA_FULL:
                return

    def _account(self, decoded) -> None:
        self.decodes += 1
        self.stop_reasons[decoded.stop_reason] += 1
        self.last_stop_reason = decoded.stop_reason
        if decoded.overflow:
            self.overflow_events += 1
        n = len(decoded)
        # Where an overflow's gap shows: KEEP_OLDEST keeps what the buffer held when it filled, so
        # the missing windows come after all of those records, in this decode or a later one; once
        # a decode has emptied the buffer (END_OF_RECORDS), the next samples carry the last of it.
        if decoded.overflow:
            self._overflow_state = _LOSS_PENDING
        overflowed = self._overflow_state != _NO_LOSS
        if self._overflow_state == _BUFFER_EMPTIED and n > 0:
            self._overflow_state = _NO_LOSS
        elif self._overflow_state == _LOSS_PENDING and decoded.stop_reason == END_OF_RECORDS:
            self._overflow_state = _BUFFER_EMPTIED
        if n == 0:
            return
        starts = decoded.start_ns
        edges = starts if self._last_start is None else np.concatenate(([self._last_start], starts))
        gaps = np.diff(edges)
        wide = gaps > 1.5 * self.interval_ns  # windows missing from the timeline
        lost = int((np.rint(gaps[wide] / self.interval_ns).astype(np.int64) - 1).sum()) if wide.any() else 0
        self.dropped += lost
        if overflowed:
            self.overflow_samples += lost
        if self._first_ns is None:
            self._first_ns = int(starts[0])
        self._last_start = int(starts[-1])
        self._last_ns = int(decoded.end_ns[-1])
        with self._lock:
            keep = min(n, self.max_pending_samples - self._pending_samples)
            if keep < n:
                self.host_dropped += n - keep
            if keep > 0:
                self._pending.append((starts[:keep], decoded.end_ns[:keep], decoded.values[:keep]))
                self._pending_samples += keep
                self.samples += keep
            self.pending_peak = max(self.pending_peak, self._pending_samples)

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def drain(self) -> dict[str, np.ndarray]:
        """The samples decoded since the last drain as numpy columns: gpu_start_ns, gpu_end_ns, one per metric."""
        with self._lock:
            pending, self._pending = self._pending, []
            self._pending_samples = 0
        if not pending:
            return {}
        values = np.concatenate([p[2] for p in pending])
        columns = {"gpu_start_ns": np.concatenate([p[0] for p in pending]),
                   "gpu_end_ns": np.concatenate([p[1] for p in pending])}
        for j, name in enumerate(self.session.metrics):
            columns[name] = np.ascontiguousarray(values[:, j])
        self.drained += len(values)
        return columns

    def stats(self) -> dict:
        span = (self._last_ns - self._first_ns) / 1e9 if self._first_ns is not None else 0.0
        decoded = self.samples + self.host_dropped
        return {
            "interval_ns": self.interval_ns,
            "requested_hz": 1e9 / self.interval_ns,
            "samples": self.samples,
            "drained": self.drained,
            "expected_samples": int(round(span * 1e9 / self.interval_ns)),
            "dropped": self.dropped,
            "overflow": self.overflow_events > 0 or self.overflow_samples > 0,
            "overflow_events": self.overflow_events,
            "overflow_samples": self.overflow_samples,
            "last_stop_reason": self.last_stop_reason,
            "stop_reasons": dict(self.stop_reasons),
            "decodes": self.decodes,
            "restarts": self.restarts,
            "host_dropped": self.host_dropped,
            "pending_peak_samples": self.pending_peak,
            "achieved_hz": self.samples / span if span > 0 else 0.0,
            "elapsed_s": span,
            "errors": 1 if self.error else 0,
            "last_error": self.error,
            "cpu_s": self.cpu_s,
            "host_us_per_sample": 1e6 * self.cpu_s / decoded if decoded else None,
        }

    def describe(self) -> dict:
        return {"device_index": self.session.device_index, "metrics": self.session.metrics,
                "interval_ns": self.interval_ns, "hardware_buffer_size": self.session.hardware_buffer_size,
                "decode_every_s": self.decode_every_s, "image_samples": self.session.max_samples,
                "max_pending_samples": self.max_pending_samples}
