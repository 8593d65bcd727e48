"""The GPM sampler: DRAM bandwidth utilisation, SM utilisation/occupancy, PCIe and NVLink rates.

Each row holds the metrics over the interval that ends at its `t_ns` (>= 100 ms, as NVML
requires for GPM samples)."""
from __future__ import annotations

from sitsprof.collectors.sampler import PeriodicSampler
from sitsprof.pmu.gpm import MIN_INTERVAL_S


class GpmSampler(PeriodicSampler):
    name = "gpm"
    min_interval_s = MIN_INTERVAL_S

    def __init__(self, device_index: int = 0, interval_s: float = 0.1, metrics: dict[str, int] | None = None):
        super().__init__(interval_s)
        self.device_index = device_index
        self.metrics = metrics
        self._reader = None

    def setup(self) -> None:
        from sitsprof.pmu.gpm import GpmReader

        self._reader = GpmReader(self.device_index, self.metrics).open()

    def read(self) -> dict:
        return self._reader.read()

    def teardown(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def describe(self) -> dict:
        metrics = self._reader.metrics if self._reader else self.metrics
        return {"device_index": self.device_index, "metrics": metrics}
