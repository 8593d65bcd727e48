"""NVML GPM (GPU Performance Monitoring, Hopper and newer): support check and metric reads.

GPM metrics are computed from two samples taken with `nvmlGpmSampleGet`. nvml.h: "The
interval between these two nvmlGpmSampleGet() calls should be greater than 100ms due to the
internal sample refresh rate". NVML does not refuse a shorter one, it returns wrong metrics,
so `GpmReader` keeps the rule itself: every sample, the one `open()` takes included, waits
until more than `MIN_INTERVAL_S` has passed since the previous one. GPM has no L2 and no TLB
metric (see the counter catalog).
"""
from __future__ import annotations

import time

from sitsprof.pmu.catalog import GPM_METRIC_IDS
from sitsprof.pmu.errors import UnsupportedError
from sitsprof.pmu.nvml import handle, nvml

__all__ = ["DEFAULT_INTERVAL_S", "MIN_INTERVAL_S", "GpmReader", "gpm_support"]

MIN_INTERVAL_S = 0.1
DEFAULT_INTERVAL_S = 0.2  # twice the minimum: a late tick still leaves the next one over 100 ms
_MARGIN_S = 0.001  # "greater than" 100 ms, with room for the clock's resolution


def gpm_support(index: int = 0) -> tuple[bool, str]:
    """(supported, reason) for GPU `index`."""
    pynvml = nvml()
    h = handle(index)
    try:
        support = pynvml.nvmlGpmQueryDeviceSupport(h)
    except pynvml.NVMLError_FunctionNotFound:
        return False, ("this NVIDIA driver has no GPM (nvmlGpmQueryDeviceSupport is missing; "
                       "GPM needs driver 520 or newer)")
    except pynvml.NVMLError_NotSupported:
        return False, "GPM is not supported on this GPU (it needs Hopper or newer)"
    except pynvml.NVMLError as exc:
        return False, f"GPM support query failed: {exc}"
    if not support.isSupportedDevice:
        return False, "GPM is not supported on this GPU (it needs Hopper or newer)"
    return True, "supported"


class GpmReader:
    """Keeps the previous GPM sample; each `read()` returns the metrics since the last one."""

    def __init__(self, index: int = 0, metrics: dict[str, int] | None = None):
        supported, reason = gpm_support(index)
        if not supported:
            raise UnsupportedError(reason)
        self.pynvml = nvml()
        self.handle = handle(index)
        self.metrics = dict(metrics or GPM_METRIC_IDS)
        self._previous = self._current = None
        self._last_sample: float | None = None  # time.monotonic() of the last nvmlGpmSampleGet
        self.last_gap_s: float | None = None  # between the two samples of the last read()
        self.min_gap_s: float | None = None
        self.waits = 0  # samples that had to wait for the 100 ms rule (a read came too soon)

    def _sample(self, buffer) -> None:
        """nvmlGpmSampleGet into `buffer`, never sooner than NVML's minimum after the previous one."""
        if self._last_sample is not None:
            wait = self._last_sample + MIN_INTERVAL_S + _MARGIN_S - time.monotonic()
            if wait > 0:
                self.waits += 1
                time.sleep(wait)
        self.pynvml.nvmlGpmSampleGet(self.handle, buffer)
        now = time.monotonic()
        if self._last_sample is not None:
            self.last_gap_s = gap = now - self._last_sample
            self.min_gap_s = gap if self.min_gap_s is None else min(self.min_gap_s, gap)
        self._last_sample = now

    def open(self) -> GpmReader:
        p = self.pynvml
        self._previous = p.nvmlGpmSampleAlloc()
        self._current = p.nvmlGpmSampleAlloc()
        self._sample(self._previous)
        return self

    def read(self) -> dict[str, float | None]:
        """The metrics since the previous sample (waiting first if that one is under 100 ms old)."""
        p = self.pynvml
        self._sample(self._current)
        request = p.c_nvmlGpmMetricsGet_t()
        request.version = p.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self.metrics)
        request.sample1 = self._previous
        request.sample2 = self._current
        for i, metric_id in enumerate(self.metrics.values()):
            request.metrics[i].metricId = metric_id
        p.nvmlGpmMetricsGet(request)
        out = {}
        for i, name in enumerate(self.metrics):
            metric = request.metrics[i]
            out[name] = float(metric.value) if metric.nvmlReturn == p.NVML_SUCCESS else None
        self._previous, self._current = self._current, self._previous
        return out

    def close(self) -> None:
        for sample in (self._previous, self._current):
            if sample is not None:
                try:
                    self.pynvml.nvmlGpmSampleFree(sample)
                except self.pynvml.NVMLError:
                    pass
        self._previous = self._current = None
