"""The NVML sampler: clocks, power, temperature, utilisation, clock event reasons, memory used.

Counters come in groups, one NVML call each (see `pmu.catalog`, column `group`); choose the
groups to trade detail for rate. Intervals down to 1 ms.
"""
from __future__ import annotations

from sitsprof.collectors.errors import SamplerError
from sitsprof.collectors.sampler import PeriodicSampler
from sitsprof.pmu.catalog import NVML_GROUPS
from sitsprof.pmu.nvml import group_readers, handle, nvml

_group_readers = group_readers  # the name bench/bench_nvml_sampler.py imports

DEFAULT_GROUPS = ("clocks", "power", "temperature", "utilization", "event_reasons", "memory")


class NvmlSampler(PeriodicSampler):
    """Samples NVML device queries of one GPU every `interval_s` (>= 1 ms)."""

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

    def setup(self) -> None:
        pynvml = nvml()
        h = handle(self.device_index)
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
        return row

    def describe(self) -> dict:
        return {"device_index": self.device_index, "groups": list(self.groups), "unsupported_groups": self.unsupported}
