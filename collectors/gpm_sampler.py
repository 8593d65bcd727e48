"""The GPM sampler: DRAM bandwidth utilisation, SM utilisation/occupancy, PCIe and NVLink rates.

Each row holds the metrics over the interval that ends at its `t_ns`. NVML wants more than
100 ms between two GPM samples (`pmu.gpm`): intervals below that are refused, the default is
200 ms so that a tick read late still leaves the next one far enough from it, and the first
tick comes one interval after the sample `open()` takes (not at once after it). The reader
itself waits where a tick would still come too soon (counted in `gpm_waits`).
"""
from __future__ import annotations

from sitsprof.collectors.errors import SamplerError
from sitsprof.collectors.sampler import PeriodicSampler
from sitsprof.pmu.gpm import DEFAULT_INTERVAL_S, MIN_INTERVAL_S

__all__ = ["GpmSampler", "check_interval"]


def check_interval(interval_s: float) -> float:
    """`interval_s` if GPM can sample at it; else the one-line SamplerError (exit status 2)."""
    if not interval_s >= MIN_INTERVAL_S:
        raise SamplerError(
            f"gpm: interval {interval_s * 1e3:g} ms is below its minimum of {MIN_INTERVAL_S * 1e3:g} ms "
            f"(NVML needs more than 100 ms between GPM samples); use 100ms or more (default "
            f"{DEFAULT_INTERVAL_S * 1e3:g}ms)")
    return interval_s


class GpmSampler(PeriodicSampler):
    """GPM metrics of one GPU; `device_index` is the CUDA index (`pmu.device.choose_device`)."""

    name = "gpm"
    min_interval_s = MIN_INTERVAL_S

    def __init__(self, device_index: int = 0, interval_s: float = DEFAULT_INTERVAL_S,
                 metrics: dict[str, int] | None = None):
        if interval_s > 0:
            check_interval(interval_s)
        super().__init__(interval_s)
        self.device_index = device_index
        self.metrics = metrics
        self.choice = None
        self._reader = None

    def setup(self) -> None:
        from sitsprof.pmu.device import choose_device
        from sitsprof.pmu.gpm import GpmReader

        self.choice = choose_device(self.device_index)
        self._reader = GpmReader(self.choice.nvml_index, self.metrics).open()
        # the grid starts when setup returns: tick 0 must not follow open()'s sample at once
        self._stop.wait(self.interval_s)

    def read(self) -> dict:
        return self._reader.read()

    def teardown(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def describe(self) -> dict:
        reader = self._reader
        out = {"device_index": self.device_index, "metrics": reader.metrics if reader else self.metrics,
               "min_interval_s": MIN_INTERVAL_S}
        if self.choice is not None:
            out.update(self.choice.describe())
        if reader is not None:
            out.update({"gpm_min_sample_gap_ms": None if reader.min_gap_s is None else reader.min_gap_s * 1e3,
                        "gpm_waits": reader.waits})
        return out
