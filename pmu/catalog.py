"""The counter catalog: every counter sitsprof can read, and what people ask for that no API has.

Each entry names its backend (an NVML query, an NVML field id, a GPM metric id or a CUPTI
PM-sampling metric), its unit, what it means and the shortest interval that makes sense.
Entries with backend "none" are the requests no public API answers, with the reason and
what sitsprof does instead (TLB misses: measured by the probes).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = [
    "BY_NAME",
    "COUNTERS",
    "DEFAULT_CUPTI_METRICS",
    "GPM_METRIC_IDS",
    "NVML_GROUPS",
    "Counter",
    "counters",
    "lookup",
]


@dataclass(frozen=True)
class Counter:
    name: str
    backend: str  # "nvml" | "nvml_field" | "gpm" | "cupti_pm" | "none"
    source: str  # NVML function, NVML_FI_* id, NVML_GPM_METRIC_* id, CUPTI metric name, or ""
    unit: str
    meaning: str
    min_interval_s: float | None = None
    group: str | None = None  # NVML sampler group (one NVML call may feed several counters)
    unavailable: str | None = None  # why no API can read it, and what to use instead

    def to_dict(self) -> dict:
        return asdict(self)


_NVML_MIN = 0.001  # the NVML sampler's shortest interval; the driver refreshes some values more slowly

COUNTERS: tuple[Counter, ...] = (
    # NVML device queries (collectors.nvml_sampler)
    Counter("sm_clock_mhz", "nvml", "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)", "MHz",
            "current SM clock", _NVML_MIN, "clocks"),
    Counter("memory_clock_mhz", "nvml", "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)", "MHz",
            "current memory clock", _NVML_MIN, "clocks"),
    Counter("power_w", "nvml", "nvmlDeviceGetPowerUsage", "W",
            "board power draw as the driver reports it (averaged by the driver on recent GPUs)", _NVML_MIN, "power"),
    Counter("temperature_c", "nvml", "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)", "C",
            "GPU core temperature", _NVML_MIN, "temperature"),
    Counter("gpu_util_pct", "nvml", "nvmlDeviceGetUtilizationRates.gpu", "%",
            "share of the last sample period (1/6 s to 1 s) in which a kernel ran", _NVML_MIN, "utilization"),
    Counter("memory_util_pct", "nvml", "nvmlDeviceGetUtilizationRates.memory", "%",
            "share of the last sample period in which device memory was read or written", _NVML_MIN, "utilization"),
    Counter("clock_event_reasons", "nvml", "nvmlDeviceGetCurrentClocksEventReasons", "bitmask",
            "why clocks are below maximum (idle, power cap, thermal, locked...): nvmlClocksEventReason* bits",
            _NVML_MIN, "event_reasons"),
    Counter("memory_used_bytes", "nvml", "nvmlDeviceGetMemoryInfo.used", "B",
            "device memory in use", _NVML_MIN, "memory"),
    Counter("power_instant_w", "nvml_field", "NVML_FI_DEV_POWER_INSTANT (186)", "W",
            "instantaneous board power", _NVML_MIN, "fields"),
    Counter("energy_mj", "nvml_field", "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION (83)", "mJ",
            "energy since the driver was loaded (difference two readings for a run)", _NVML_MIN, "fields"),
    # NVML GPM (Hopper and newer; samples must be at least 100 ms apart)
    Counter("gpm_dram_bw_util_pct", "gpm", "NVML_GPM_METRIC_DRAM_BW_UTIL (10)", "%",
            "DRAM bandwidth used against the theoretical maximum", 0.1),
    Counter("gpm_sm_util_pct", "gpm", "NVML_GPM_METRIC_SM_UTIL (2)", "%", "share of SMs busy", 0.1),
    Counter("gpm_sm_occupancy_pct", "gpm", "NVML_GPM_METRIC_SM_OCCUPANCY (3)", "%",
            "active warps against the theoretical maximum", 0.1),
    Counter("gpm_any_tensor_util_pct", "gpm", "NVML_GPM_METRIC_ANY_TENSOR_UTIL (5)", "%",
            "share of time SMs ran any tensor instruction", 0.1),
    Counter("gpm_pcie_tx_mibps", "gpm", "NVML_GPM_METRIC_PCIE_TX_PER_SEC (20)", "MiB/s",
            "PCIe traffic from the GPU", 0.1),
    Counter("gpm_pcie_rx_mibps", "gpm", "NVML_GPM_METRIC_PCIE_RX_PER_SEC (21)", "MiB/s",
            "PCIe traffic to the GPU", 0.1),
    Counter("gpm_nvlink_rx_mibps", "gpm", "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC (60)", "MiB/s",
            "NVLink receive bandwidth, all links", 0.1),
    Counter("gpm_nvlink_tx_mibps", "gpm", "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC (61)", "MiB/s",
            "NVLink transmit bandwidth, all links", 0.1),
    # CUPTI PM sampling (cupti-python >= 13.3; interval in ns, default 100 us: pmu.cupti_pm says why);
    # together they must fit one pass of one single-pass set (checked against the chip at configure time)
    Counter("lts__t_sectors_lookup_hit.sum", "cupti_pm", "lts__t_sectors_lookup_hit.sum", "sectors",
            "L2 sector lookups that hit, per sample interval", 1e-6),
    Counter("lts__t_sectors_lookup_miss.sum", "cupti_pm", "lts__t_sectors_lookup_miss.sum", "sectors",
            "L2 sector lookups that missed, per sample interval", 1e-6),
    Counter("lts__t_sector_hit_rate.pct", "cupti_pm", "lts__t_sector_hit_rate.pct", "%", "L2 sector hit rate", 1e-6),
    Counter("dram__bytes_read.sum", "cupti_pm", "dram__bytes_read.sum", "B", "bytes read from DRAM (HBM)", 1e-6),
    Counter("dram__bytes_write.sum", "cupti_pm", "dram__bytes_write.sum", "B", "bytes written to DRAM (HBM)", 1e-6),
    # asked for, but no public API exposes them
    Counter("tlb_misses", "none", "", "count", "GPU TLB misses",
            unavailable="no public NVML, CUPTI or Nsight metric counts GPU TLB misses; TLB reach and miss "
                        "penalty are measured by the TLB probe (pointer chase with page-sized strides) instead"),
    Counter("l2_replacement_delay_cycles", "none", "", "cycles", "extra latency of re-touching an evicted L2 line",
            unavailable="no counter measures it; the loaded-latency probe measures it as a distribution"),
    Counter("pmc_sample", "none", "", "", "\"nvmlDeviceGetPmcSample\" raw PMC reads",
            unavailable="nvmlDeviceGetPmcSample does not exist in NVML; fine-interval hardware counters come "
                        "from CUPTI PM sampling"),
    Counter("nvml_16ns_sampling", "none", "", "", "NVML sampling at a 16 ns period",
            unavailable="NVML has no 16 ns sampling period (each NVML read takes microseconds); CUPTI PM "
                        "sampling reaches microsecond intervals, Nsight Systems up to 200 kHz"),
    Counter("gpm_l2_hit_rate", "none", "", "%", "L2 hit rate through NVML/GPM",
            unavailable="GPM has no L2 or TLB metric; use the CUPTI PM sampling lts__* metrics"),
)

BY_NAME = {c.name: c for c in COUNTERS}
DEFAULT_CUPTI_METRICS = [c.source for c in COUNTERS if c.backend == "cupti_pm"]
GPM_METRIC_IDS = {c.name: int(c.source.split("(")[1].rstrip(")")) for c in COUNTERS if c.backend == "gpm"}
NVML_GROUPS = sorted({c.group for c in COUNTERS if c.group})


def counters(backend: str | None = None, available: bool | None = None) -> list[Counter]:
    out = [c for c in COUNTERS if backend is None or c.backend == backend]
    if available is not None:
        out = [c for c in out if (c.unavailable is None) == available]
    return out


def lookup(name: str) -> Counter:
    """The catalog entry `name`; for the unavailable ones, raise with the reason."""
    from sitsprof.pmu.errors import UnsupportedError

    counter = BY_NAME.get(name)
    if counter is None:
        raise UnsupportedError(f"unknown counter {name!r}; `sitsprof devices --counters` lists them")
    if counter.unavailable:
        raise UnsupportedError(f"{name}: {counter.unavailable}")
    return counter
