"""The NVML session: pynvml imported lazily, initialised once per process, shut down at exit.

Every failure to reach NVML becomes a `NoGpuError` that says what is missing and what to do.
"""
from __future__ import annotations

import atexit
import threading

from sitsprof.pmu.errors import NoGpuError, PmuError

__all__ = [
    "DRIVER_SERIES",
    "DriverSeries",
    "cuda_version_text",
    "describe_init_failure",
    "device_count",
    "driver_series",
    "group_readers",
    "handle",
    "nvml",
    "optional",
    "text",
]

_lock = threading.Lock()
_started = False


def _pynvml():
    try:
        import pynvml
    except ImportError:
        raise NoGpuError(
            "nvidia-ml-py is not installed (pip install 'sitsprof[gpu]' or pip install nvidia-ml-py)"
        ) from None
    return pynvml


def _shutdown() -> None:
    global _started
    with _lock:
        if not _started:
            return
        _started = False
    try:
        _pynvml().nvmlShutdown()
    except Exception:  # noqa: BLE001 - best effort at exit
        pass


def nvml():
    """The pynvml module with NVML initialised (once per process)."""
    global _started
    pynvml = _pynvml()
    with _lock:
        if _started:
            return pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NoGpuError(describe_init_failure(pynvml, exc)) from None
        _started = True
    atexit.register(_shutdown)
    return pynvml


def describe_init_failure(pynvml, exc) -> str:
    value = getattr(exc, "value", None)
    if value == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return ("no NVIDIA driver: libnvidia-ml.so.1 was not found; run on a node with an NVIDIA GPU "
                "and driver installed (nvidia-smi should work)")
    if value == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "the NVIDIA kernel driver is not loaded (nvidia-smi fails too); load it or reboot the node"
    if value == pynvml.NVML_ERROR_NO_PERMISSION:
        return "no permission to open the NVIDIA device files (/dev/nvidia*); ask for access to the GPU"
    return f"NVML could not start: {exc}; check that nvidia-smi works on this node"


def device_count() -> int:
    pynvml = nvml()
    return int(pynvml.nvmlDeviceGetCount())


def handle(index: int = 0):
    """The NVML handle of GPU `index`; one clear error when there is no such GPU."""
    pynvml = nvml()
    count = pynvml.nvmlDeviceGetCount()
    if count == 0:
        raise NoGpuError("NVML sees no GPU on this node")
    if not 0 <= index < count:
        raise PmuError(f"there is no GPU {index}: this node has {count} (indices 0..{count - 1})")
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def optional(fn, *args, default=None):
    """Call an NVML query, turning 'not supported on this device/driver' into `default`."""
    pynvml = _pynvml()
    try:
        return fn(*args)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return default


def text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_version_text(version: int) -> str:
    """`nvmlSystemGetCudaDriverVersion`'s 1000 * major + 10 * minor as "major.minor"."""
    return f"{version // 1000}.{version % 1000 // 10}"


_FI_POWER_INSTANT, _FI_TOTAL_ENERGY = 186, 83  # NVML_FI_DEV_POWER_INSTANT, NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION


def group_readers(pynvml, h, groups):
    """One function per counter group (`pmu.catalog`), each one NVML call returning its columns.

    Built once per GPU so that the sampler loop does no attribute lookups."""
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


# nvmlSamplingType_t (nvml.h) of the driver's timestamped series sitsprof reads, with the column
# each becomes and the factor from the driver's unit (power in mW, utilisation in %)
DRIVER_SERIES = {
    "power_w": ("NVML_TOTAL_POWER_SAMPLES", 0.001),
    "gpu_util_pct": ("NVML_GPU_UTILIZATION_SAMPLES", 1.0),
    "memory_util_pct": ("NVML_MEMORY_UTILIZATION_SAMPLES", 1.0),
}


class DriverSeries:
    """The driver's own timestamped samples of one quantity (`nvmlDeviceGetSamples`).

    nvml.h: the driver keeps a buffer of samples, each with a "CPU timestamp in microseconds";
    a query passes the last timestamp it saw (`lastSeenTimeStamp`) and gets only newer ones;
    NVML_ERROR_NOT_FOUND means there are none yet. `read()` returns the new (timestamp_us,
    value) pairs and keeps the bookkeeping, so no sample is returned twice or skipped while the
    buffer holds it. The first query starts at `since_us` (the recording's start), not at the
    whole buffer."""

    def __init__(self, pynvml, h, column: str, since_us: int):
        type_name, self.scale = DRIVER_SERIES[column]
        self.pynvml, self.handle, self.column = pynvml, h, column
        self.type = getattr(pynvml, type_name)
        self.last_seen_us = int(since_us)

    def read(self) -> list[tuple[int, float]]:
        p = self.pynvml
        try:
            _, samples = p.nvmlDeviceGetSamples(self.handle, self.type, self.last_seen_us)
        except p.NVMLError_NotFound:
            return []
        out = []
        for sample in samples:
            stamp = int(sample.timeStamp)
            if stamp <= self.last_seen_us:
                continue
            out.append((stamp, sample.sampleValue.uiVal * self.scale))
        if out:
            out.sort()
            self.last_seen_us = out[-1][0]
        return out


def driver_series(pynvml, h, columns, since_us: int) -> tuple[list[DriverSeries], dict[str, str]]:
    """(readers, {column: why not}) for the driver series this GPU/driver supports."""
    readers, unsupported = [], {}
    for column in columns:
        series = DriverSeries(pynvml, h, column, since_us)
        try:
            series.read()
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound) as exc:
            unsupported[column] = f"nvmlDeviceGetSamples({DRIVER_SERIES[column][0]}): {exc}"
            continue
        series.last_seen_us = int(since_us)  # the probe read is not kept: start again from since_us
        readers.append(series)
    return readers, unsupported
