"""The NVML sampler: clocks, power, temperature, utilisation, clock event reasons, memory used.

Counters come in groups, one NVML call each (see `pmu.catalog`, column `group`); choose the
groups to trade detail for rate. Intervals down to 1 ms.
"""
from __future__ import annotations

from sitsprof.collectors.errors import SamplerError
from sitsprof.collectors.sampler import PeriodicSampler
from sitsprof.pmu.catalog import NVML_GROUPS

DEFAULT_GROUPS = ("clocks", "power", "temperature", "utilization", "event_reasons", "memory")
_FI_POWER_INSTANT, _FI_TOTAL_ENERGY = 186, 83  # NVML_FI_DEV_POWER_INSTANT, NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION


def _group_readers(pynvml, h, groups):
    """One function per group returning its columns; built once so the loop does no lookups."""
    clock_sm, clock_mem = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
    get_clock = pynvml.nvmlDeviceGetClockInfo
    reasons_fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def clocks():
        return {"sm_clock_mhz": get_clock(h, clock_sm), "memory_clock_mhz": get_clock(h, clock_mem)}

    def power():
        return {"power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0}

    def temperature():
        return {"temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)}

    def utilization():
        util = pynvml.nvmlDeviceGetUtilizationRates(h)
        return {"gpu_util_pct": util.gpu, "memory_util_pct": util.memory}

    def event_reasons():
        return {"clock_event_reasons": int(reasons_fn(h))}

    def memory():
        return {"memory_used_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).used)}

    def fields():
        values = pynvml.nvmlDeviceGetFieldValues(h, [_FI_POWER_INSTANT, _FI_TOTAL_ENERGY])
        out = {"power_instant_w": None, "energy_mj": None}
        if values[0].nvmlReturn == pynvml.NVML_SUCCESS:
            out["power_instant_w"] = values[0].value.uiVal / 1000.0
        if values[1].nvmlReturn == pynvml.NVML_SUCCESS:
            out["energy_mj"] = int(values[1].value.ullVal)
        return out

    table = {"clocks": clocks, "power": power, "temperature": temperature, "utilization": utilization,
             "event_reasons": event_reasons, "memory": memory, "fields": fields}
    return [table[g] for g in groups]


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
        from sitsprof.pmu.nvml import handle, nvml

        pynvml = nvml()
        h = handle(self.device_index)
        readers = []
        # probe each group once; drop those this GPU/driver does not support
        for group, reader in zip(self.groups, _group_readers(pynvml, h, self.groups)):
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
