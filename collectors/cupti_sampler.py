"""The CUPTI PM-sampling sampler: L2 hit/miss sectors, L2 hit rate, DRAM bytes, at ns intervals.

The GPU samples on its own timer into a hardware buffer; this thread only decodes that buffer
every `decode_every_s` and keeps the decoded images. Metric values are evaluated on the host
when the recorder drains the sampler (outside the decode loop). Timestamps are the GPU's
(ns, %globaltimer domain); `meta.json`'s clock_sync maps them to the run's monotonic clock.
Overflow of the hardware buffer is counted and reported, gaps in the sample timeline too.
"""
from __future__ import annotations

import threading
import time

from sitsprof.pmu.cupti_pm import DEFAULT_BUFFER_BYTES, DEFAULT_INTERVAL_NS


class CuptiPmSampler:
    name = "cupti_pm"

    def __init__(self, device_index: int = 0, interval_ns: int = DEFAULT_INTERVAL_NS, metrics=None,
                 decode_every_s: float = 0.05, hardware_buffer_size: int = DEFAULT_BUFFER_BYTES):
        from sitsprof.pmu.cupti_pm import PmSamplingSession

        self.session = PmSamplingSession(device_index, metrics, interval_ns, hardware_buffer_size)
        self.interval_ns = int(interval_ns)
        self.decode_every_s = decode_every_s
        self.max_samples = max(1000, int(4 * decode_every_s * 1e9 / self.interval_ns))
        self._pending: list = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self.error: str | None = None
        self.samples = 0
        self.dropped = 0
        self._first_ns = self._last_ns = self._last_start = None
        self.cpu_s = 0.0

    def start(self) -> "CuptiPmSampler":
        self.session.start()  # raises here, in the caller, when PM sampling is unavailable
        self._thread = threading.Thread(target=self._run, name="sitsprof-cupti_pm", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        cpu0 = time.thread_time()
        try:
            while not self._stop.wait(self.decode_every_s):
                self._decode_all()
            self.session.stop()
            self._decode_all()
        except Exception as exc:  # noqa: BLE001 - reported in stats
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            try:
                self.session.close()
            except Exception as exc:  # noqa: BLE001
                self.error = self.error or f"disable: {exc}"
            self.cpu_s = time.thread_time() - cpu0

    def _decode_all(self) -> None:
        while True:
            data = self.session.decode(self.max_samples)
            if data is None or data.num_completed_samples == 0:
                return
            with self._lock:
                self._pending.append(data)
            if data.num_completed_samples < self.max_samples:
                return

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def drain(self) -> dict[str, list]:
        """Evaluate the decoded samples into columns: start_ns, end_ns, one column per metric."""
        with self._lock:
            pending, self._pending = self._pending, []
        columns: dict[str, list] = {"gpu_start_ns": [], "gpu_end_ns": []}
        for data in pending:
            names = list(data.metrics)
            for name in names:
                columns.setdefault(name, [])
            for sample in data:
                if self._last_start is not None:
                    gap = sample.start_timestamp - self._last_start
                    if gap > 1.5 * self.interval_ns:  # windows missing from the timeline
                        self.dropped += int(round(gap / self.interval_ns)) - 1
                if self._first_ns is None:
                    self._first_ns = sample.start_timestamp
                self._last_start = sample.start_timestamp
                self._last_ns = sample.end_timestamp
                columns["gpu_start_ns"].append(int(sample.start_timestamp))
                columns["gpu_end_ns"].append(int(sample.end_timestamp))
                for name, value in zip(names, sample.metric_values):
                    columns[name].append(float(value))
                self.samples += 1
        return columns if columns["gpu_start_ns"] else {}

    def stats(self) -> dict:
        span = (self._last_ns - self._first_ns) / 1e9 if self._first_ns is not None else 0.0
        return {
            "interval_ns": self.interval_ns,
            "requested_hz": 1e9 / self.interval_ns,
            "samples": self.samples,
            "dropped": self.dropped,
            "overflow": self.session.overflow_events > 0,
            "overflow_events": self.session.overflow_events,
            "achieved_hz": self.samples / span if span > 0 else 0.0,
            "elapsed_s": span,
            "errors": 1 if self.error else 0,
            "last_error": self.error,
            "cpu_s": self.cpu_s,
        }

    def describe(self) -> dict:
        return {"device_index": self.session.device_index, "metrics": self.session.metrics,
                "interval_ns": self.interval_ns, "hardware_buffer_size": self.session.hardware_buffer_size}
