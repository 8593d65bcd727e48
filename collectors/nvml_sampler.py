"""The NVML samplers: device queries on a fixed grid, and the driver's own timestamped series.

`NvmlSampler` polls device queries (clocks, power, temperature, utilisation, clock event
reasons, memory used). Counters come in groups, one NVML call each (see `pmu.catalog`, column
`group`); choose the groups to trade detail for rate. Intervals down to 1 ms. Polling faster
than the driver refreshes a value only repeats it, so the stats say, for each column, how
often its value really changed (`field_update_hz`, changes per second over the recording: a
lower bound on the driver's refresh rate, as an update to the same value is invisible).

`NvmlSeriesSampler` reads what the driver itself sampled for power and utilisation
(`nvmlDeviceGetSamples`, `pmu.nvml.DriverSeries`): every driver sample once, at the driver's
timestamp, whatever the polling rate. Its table has one row per driver sample: `t_ns` and the
one series column that sample belongs to (`power_w`, `gpu_util_pct`, `memory_util_pct`; the
others null). `t_ns` is on the monotonic clock of the other samplers: the driver stamps CPU
wall time in microseconds, and `wall_to_monotonic_ns` in its stats is the offset added (taken
when the sampler starts), so the driver's stamp is `(t_ns - wall_to_monotonic_ns) / 1000`.
"""
from __future__ import annotations

import threading
import time

from sitsprof.collectors.errors import SamplerError
from sitsprof.collectors.sampler import PeriodicSampler
from sitsprof.pmu.catalog import NVML_GROUPS
from sitsprof.pmu.nvml import DRIVER_SERIES, driver_series, group_readers, nvml

__all__ = ["DEFAULT_GROUPS", "SERIES_OF_GROUP", "NvmlSampler", "NvmlSeriesSampler"]

_group_readers = group_readers  # the name bench/bench_nvml_sampler.py imports

DEFAULT_GROUPS = ("clocks", "power", "temperature", "utilization", "event_reasons", "memory")
# the driver series behind each polled group (`nvmlDeviceGetSamples` types)
SERIES_OF_GROUP = {"power": ("power_w",), "utilization": ("gpu_util_pct", "memory_util_pct")}
_BOOKKEEPING = ("t_ns", "tick", "read_ns")


def _nvml_handle(device_index: int):
    """(NVML handle, DeviceChoice) of CUDA device `device_index`."""
    from sitsprof.pmu.device import choose_device
    from sitsprof.pmu.nvml import handle

    choice = choose_device(device_index)
    return handle(choice.nvml_index), choice


class NvmlSampler(PeriodicSampler):
    """Samples NVML device queries of one GPU every `interval_s` (>= 1 ms); `device_index` is
    the CUDA index (`pmu.device.choose_device` finds it in NVML)."""

    name = "nvml"
    min_interval_s = 0.001

    def __init__(self, device_index: int = 0, interval_s: float = 0.01, groups=DEFAULT_GROUPS):
        super().__init__(interval_s)
        unknown = sorted(set(groups) - set(NVML_GROUPS))
        if unknown:
            raise SamplerError(f"nvml: unknown counter groups {unknown}; choose from {NVML_GROUPS}")
        self.device_index = device_index
        self.groups = tuple(groups)
        self._readers = []
        self.unsupported: list[str] = []
        self.choice = None
        self._last: dict = {}
        self._changes: dict[str, int] = {}

    def setup(self) -> None:
        pynvml = nvml()
        h, self.choice = _nvml_handle(self.device_index)
        readers = []
        # probe each group once; drop those this GPU/driver does not support
        for group, reader in zip(self.groups, group_readers(pynvml, h, self.groups)):
            try:
                reader()
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
                self.unsupported.append(group)
                continue
            readers.append(reader)
        self._readers = readers

    def read(self) -> dict:
        row = {}
        for reader in self._readers:
            row.update(reader())
        last, changes = self._last, self._changes
        for key, value in row.items():
            if key not in last:
                changes[key] = 0
            elif value != last[key]:
                changes[key] += 1
            last[key] = value
        return row

    def describe(self) -> dict:
        out = {"device_index": self.device_index, "groups": list(self.groups), "unsupported_groups": self.unsupported}
        if self.choice is not None:
            out.update(self.choice.describe())
        return out

    def stats(self) -> dict:
        out = super().stats()
        elapsed = out["elapsed_s"]
        changes = dict(self._changes)
        out["field_changes"] = changes
        out["field_update_hz"] = {k: (n / elapsed if elapsed > 0 else 0.0) for k, n in changes.items()}
        return out


class NvmlSeriesSampler(PeriodicSampler):
    """Collects the driver's timestamped power and utilisation samples of one GPU, polling its
    buffer every `interval_s` (the driver keeps the recent ones; nothing is read twice)."""

    name = "nvml_series"
    min_interval_s = 0.01

    def __init__(self, device_index: int = 0, interval_s: float = 0.1, series=tuple(DRIVER_SERIES)):
        super().__init__(interval_s)
        unknown = sorted(set(series) - set(DRIVER_SERIES))
        if unknown:
            raise SamplerError(f"nvml_series: unknown series {unknown}; choose from {sorted(DRIVER_SERIES)}")
        self.device_index = device_index
        self.series = tuple(series)
        self.choice = None
        self.unsupported: dict[str, str] = {}
        self._readers = []
        self._offset_ns = 0  # monotonic ns - wall ns
        self._rows_lock = threading.Lock()
        self._rows = self._empty()
        self._per_series: dict[str, dict] = {}

    def _empty(self) -> dict[str, list]:
        return {"t_ns": [], **{column: [] for column in self.series}}

    def setup(self) -> None:
        pynvml = nvml()
        h, self.choice = _nvml_handle(self.device_index)
        self._offset_ns = time.monotonic_ns() - time.time_ns()
        since_us = time.time_ns() // 1000
        self._readers, self.unsupported = driver_series(pynvml, h, self.series, since_us)
        for reader in self._readers:
            self._per_series[reader.column] = {"samples": 0, "changes": 0, "first_us": None, "last_us": None,
                                               "last_value": None}

    def read(self) -> dict:
        new = 0
        for reader in self._readers:
            samples = reader.read()
            if not samples:
                continue
            column, info = reader.column, self._per_series[reader.column]
            with self._rows_lock:
                rows = self._rows
                others = [rows[c] for c in self.series if c != column]
                for stamp, value in samples:
                    rows["t_ns"].append(stamp * 1000 + self._offset_ns)
                    rows[column].append(value)
                    for other in others:
                        other.append(None)
                    if info["last_value"] is not None and value != info["last_value"]:
                        info["changes"] += 1
                    info["last_value"] = value
            info["samples"] += len(samples)
            if info["first_us"] is None:
                info["first_us"] = samples[0][0]
            info["last_us"] = samples[-1][0]
            new += len(samples)
        return {"new_samples": new}

    def drain(self) -> dict[str, list]:
        """The driver samples gathered since the last drain (the polls themselves are not kept)."""
        super().drain()
        with self._rows_lock:
            rows, self._rows = self._rows, self._empty()
        return rows if rows["t_ns"] else {}

    def describe(self) -> dict:
        out = {"device_index": self.device_index, "series": list(self.series), "unsupported_series": self.unsupported}
        if self.choice is not None:
            out.update(self.choice.describe())
        return out

    def stats(self) -> dict:
        """The poll stats plus, per series, the driver's own sample rate (`driver_hz`, from its
        timestamps) and how often the value changed (`update_hz`)."""
        out = super().stats()
        series = {}
        for column, info in self._per_series.items():
            span = (info["last_us"] - info["first_us"]) / 1e6 if info["samples"] > 1 else 0.0
            series[column] = {"samples": info["samples"],
                              "driver_hz": (info["samples"] - 1) / span if span > 0 else 0.0,
                              "update_hz": info["changes"] / span if span > 0 else 0.0}
        out["series"] = series
        out["wall_to_monotonic_ns"] = self._offset_ns
        return out
