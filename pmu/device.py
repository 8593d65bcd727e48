"""Device facts: what a run records about the GPU it ran on (`device_facts`).

Everything comes from NVML, except the SM count and L2 size, which NVML does not expose:
those come from the CUDA driver (cuda-python, when installed) and otherwise from NVML's CUDA
core count and a small table of known parts; `sources` says which.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from sitsprof.pmu.errors import NoGpuError, PmuError
from sitsprof.pmu.nvml import cuda_version_text, handle, nvml, optional, text

__all__ = [
    "EVENT_REASONS",
    "KNOWN_DEVICES",
    "DeviceChoice",
    "choose_device",
    "clock_facts",
    "cuda_index_of",
    "cuda_to_nvml",
    "device_facts",
    "event_reason_list",
    "event_reason_names",
    "event_reasons",
    "known_device",
]

# nvmlClocksEventReason* bits (nvml.h)
EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

# CUDA cores per SM by compute capability major.minor (CUDA C Programming Guide, arithmetic table)
_CORES_PER_SM = {(7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
                 (9, 0): 128, (10, 0): 128, (12, 0): 128}
#: The one table of device facts sitsprof states without asking the device: used only where the
#: device does not answer (the L2 fallback below, the dry run's assumed H200 in probes/assumed.py,
#: the planner's fallback L2 in probes/suite.py). Model -> (L2 bytes as cudaDeviceProp.l2CacheSize
#: reports it, SMs, source). Matched as a whole word of the NVML name, so "GH200" is not an H200:
#: no GH200 row, since no source at hand gives its l2CacheSize.
KNOWN_DEVICES = {
    "H100": (50 * 1024 * 1024, 132, "NVIDIA H100 whitepaper: 50 MB of L2 on H100 SXM5 and PCIe (132 SMs SXM5)"),
    "H200": (60 * 1024 * 1024, 132, "cudaDeviceProp on the lent H200: 60 MiB of L2, 132 SMs (PyTorch, 2026-10-28; "
                                    "/work/.library/device/KINDS.md)"),
}


def known_device(name: str) -> tuple[str, int, int] | None:
    """(model, l2_bytes, sm_count) of the KNOWN_DEVICES row whose model is a word of `name`, or None."""
    import re

    for model, (l2, sms, _source) in KNOWN_DEVICES.items():
        if re.search(rf"(?<![A-Za-z0-9]){model}(?![A-Za-z0-9])", name):
            return model, l2, sms
    return None


def event_reason_names(bits: int) -> list[str]:
    """The names of the clock event (throttle) reasons set in `bits`."""
    names = [name for bit, name in EVENT_REASONS.items() if bits & bit]
    unknown = bits & ~sum(EVENT_REASONS)
    if unknown:
        names.append(f"other_0x{unknown:x}")
    return names


def event_reasons(h) -> int | None:
    pynvml = nvml()
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        fn = getattr(pynvml, name, None)
        if fn is None:
            continue
        try:
            return int(fn(h))
        except pynvml.NVMLError_FunctionNotFound:
            continue
        except pynvml.NVMLError_NotSupported:
            return None
    return None


def event_reason_list(h) -> list[str] | None:
    """The names of the clock event reasons now set on `h`; None where the GPU does not report them."""
    reasons = event_reasons(h)
    return event_reason_names(reasons) if reasons is not None else None


def _cuda_attributes(pci_bus_id: str) -> dict | None:
    """SM count and L2 bytes from the CUDA driver, matched by PCI bus id; None without cuda-python."""
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        return None
    try:
        (err,) = cu.cuInit(0)
        if err != cu.CUresult.CUDA_SUCCESS:
            return None
        err, dev = cu.cuDeviceGetByPCIBusId(pci_bus_id.encode())
        if err != cu.CUresult.CUDA_SUCCESS:
            return None
        out = {}
        for key, attr in (("sm_count", cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                          ("l2_bytes", cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)):
            err, value = cu.cuDeviceGetAttribute(attr, dev)
            if err == cu.CUresult.CUDA_SUCCESS:
                out[key] = int(value)
        return out
    except Exception:  # noqa: BLE001 - CUDA facts are optional, NVML ones are not
        return None


def clock_facts(h) -> dict:
    """Current, maximum and default (base) clocks plus the supported lists, in MHz."""
    pynvml = nvml()
    mem_supported = optional(pynvml.nvmlDeviceGetSupportedMemoryClocks, h, default=[]) or []
    mem_max = optional(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_MEM)
    graphics = []
    if mem_supported:
        graphics = optional(pynvml.nvmlDeviceGetSupportedGraphicsClocks, h, max(mem_supported), default=[]) or []
    return {
        "sm_mhz": optional(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM),
        "memory_mhz": optional(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM),
        "sm_max_mhz": optional(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_SM),
        "memory_max_mhz": mem_max,
        "sm_base_mhz": optional(pynvml.nvmlDeviceGetDefaultApplicationsClock, h, pynvml.NVML_CLOCK_GRAPHICS),
        "supported_memory_mhz": sorted(mem_supported, reverse=True),
        "supported_sm_mhz": sorted(graphics, reverse=True),
    }


def device_facts(index: int = 0, cuda: bool = True) -> dict:
    """Facts about GPU `index` (see docs/CONTRACTS.md). Raises NoGpuError without a GPU."""
    pynvml = nvml()
    h = handle(index)
    pci = pynvml.nvmlDeviceGetPciInfo(h)
    pci_bus_id = text(pci.busId)
    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
    name = text(pynvml.nvmlDeviceGetName(h))
    memory = pynvml.nvmlDeviceGetMemoryInfo(h)
    cores = optional(pynvml.nvmlDeviceGetNumGpuCores, h)
    cuda_version = optional(pynvml.nvmlSystemGetCudaDriverVersion)
    sources = {}
    attrs = _cuda_attributes(pci_bus_id) if cuda else None
    sm_count = (attrs or {}).get("sm_count")
    l2_bytes = (attrs or {}).get("l2_bytes")
    if sm_count is not None:
        sources["sm_count"] = "cuda"
    elif cores and (major, minor) in _CORES_PER_SM:
        sm_count = cores // _CORES_PER_SM[(major, minor)]
        sources["sm_count"] = "nvml cuda cores / cores per SM"
    if l2_bytes is not None:
        sources["l2_bytes"] = "cuda"
    else:
        known = known_device(name)
        if known:
            model, l2_bytes, _sms = known
            sources["l2_bytes"] = f"known {model} L2 size"
    return {
        "index": index,
        "cuda_index": cuda_index_of(pci_bus_id) if cuda else None,  # --device takes this one (choose_device)
        "name": name,
        "uuid": text(pynvml.nvmlDeviceGetUUID(h)),
        "pci_bus_id": pci_bus_id,
        "compute_capability": f"{major}.{minor}",
        "sm_count": sm_count,
        "cuda_cores": cores,
        "l2_bytes": l2_bytes,
        "memory_bytes": int(memory.total),
        "memory_used_bytes": int(memory.used),
        "bus_width_bits": optional(pynvml.nvmlDeviceGetMemoryBusWidth, h),
        "driver": text(pynvml.nvmlSystemGetDriverVersion()),
        "cuda": cuda_version_text(cuda_version) if cuda_version else None,
        "clocks": clock_facts(h),
        "clock_event_reasons": event_reason_list(h),
        "sources": sources,
    }



# -- which NVML device a CUDA index is -------------------------------------------------------
# The index a user gives (`--device`) is CUDA's: the probes run on cupy.cuda.Device(i) and CUPTI
# takes a CUDA index. NVML numbers GPUs in its own order (PCI order), and nvml.h warns that its
# index "may not correlate with other APIs, such as the CUDA device index": CUDA's default
# CUDA_DEVICE_ORDER=FASTEST_FIRST and CUDA_VISIBLE_DEVICES both make them differ. So every
# NVML consumer (samplers, clocks, device facts) goes through `choose_device`, which finds the
# CUDA device's PCI bus id and asks NVML for that device.

_NO_CUDA = ("no CUDA library (CuPy or cuda-python) to map CUDA's index to NVML's: GPU {index} is NVML's "
            "index {index}, which can differ from CUDA's (CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES)")


@dataclass(frozen=True)
class DeviceChoice:
    """The GPU behind a user's device index: CUDA's index, NVML's index, and how they were matched."""

    cuda_index: int | None  # None where no CUDA library could say
    nvml_index: int
    pci_bus_id: str
    uuid: str
    how: str  # "cupy pci bus id" | "cuda-python pci bus id" | the sentence saying no CUDA library mapped it

    @property
    def mapped(self) -> bool:
        return self.cuda_index is not None

    def describe(self) -> dict:
        return {"cuda_index": self.cuda_index, "nvml_index": self.nvml_index, "pci_bus_id": self.pci_bus_id,
                "uuid": self.uuid, "device_mapping": self.how}


def _cupy_pci_bus_id(index: int) -> str | None:
    """CUDA device `index`'s PCI bus id through CuPy (cudaDeviceGetPCIBusId); None without CuPy."""
    try:
        import cupy
    except ImportError:
        return None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - CuPy without a working CUDA runtime: let another library try
        return None
    if not 0 <= index < count:
        raise PmuError(_no_cuda_device(index, count))
    return str(cupy.cuda.Device(index).pci_bus_id)


def _cuda_python_pci_bus_id(index: int) -> str | None:
    """CUDA device `index`'s PCI bus id through cuda-python (cuDeviceGetPCIBusId); None without it."""
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        return None
    try:
        (err,) = cu.cuInit(0)
        if err != cu.CUresult.CUDA_SUCCESS:
            return None
        err, count = cu.cuDeviceGetCount()
        if err != cu.CUresult.CUDA_SUCCESS:
            return None
        if not 0 <= index < count:
            raise PmuError(_no_cuda_device(index, count))
        err, dev = cu.cuDeviceGet(index)
        if err != cu.CUresult.CUDA_SUCCESS:
            return None
        err, bus_id = cu.cuDeviceGetPCIBusId(32, dev)
        if err != cu.CUresult.CUDA_SUCCESS:
            return None
    except PmuError:
        raise
    except Exception:  # noqa: BLE001 - an unusable cuda-python is the same as none
        return None
    return bus_id.split(b"\0", 1)[0].decode() if isinstance(bus_id, bytes) else str(bus_id)


def _no_cuda_device(index: int, count: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" with CUDA_VISIBLE_DEVICES={visible}" if visible is not None else ""
    return f"there is no CUDA device {index}: CUDA sees {count}{where} (indices 0..{count - 1}); pick one of those"


def choose_device(index: int = 0) -> DeviceChoice:
    """The GPU a user's `--device index` names: CUDA device `index`, found in NVML by its PCI bus
    id. With no CUDA library, `index` is taken as NVML's and `how` says so."""
    pynvml = nvml()
    for how, lookup in (("cupy pci bus id", _cupy_pci_bus_id), ("cuda-python pci bus id", _cuda_python_pci_bus_id)):
        bus_id = lookup(index)
        if bus_id is None:
            continue
        try:
            h = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        except pynvml.NVMLError as exc:
            raise NoGpuError(f"CUDA device {index} (PCI {bus_id}) is not a GPU NVML can see ({exc}); "
                             "check that nvidia-smi lists it") from None
        return DeviceChoice(index, int(pynvml.nvmlDeviceGetIndex(h)), text(pynvml.nvmlDeviceGetPciInfo(h).busId),
                            text(pynvml.nvmlDeviceGetUUID(h)), how)
    h = handle(index)
    return DeviceChoice(None, index, text(pynvml.nvmlDeviceGetPciInfo(h).busId), text(pynvml.nvmlDeviceGetUUID(h)),
                        _NO_CUDA.format(index=index))


def _pci_key(bus_id: str):
    """(domain, bus, device, function) of a PCI bus id, whatever the domain's width (CUDA 4, NVML 8)."""
    try:
        domain, bus, rest = bus_id.strip().lower().split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return None


def cuda_index_of(pci_bus_id: str) -> int | None:
    """CUDA's index of the GPU at `pci_bus_id` (NVML's form), or None where no CUDA library
    (CuPy) can say or CUDA does not see it (CUDA_VISIBLE_DEVICES)."""
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
        ids = [cupy.cuda.Device(i).pci_bus_id for i in range(count)]
    except Exception:  # noqa: BLE001 - no CuPy, or no CUDA runtime behind it
        return None
    wanted = _pci_key(pci_bus_id)
    return next((i for i, bus in enumerate(ids) if _pci_key(str(bus)) == wanted), None)


def cuda_to_nvml(cuda_index: int) -> int:
    """NVML's index of CUDA device `cuda_index` (see `choose_device`)."""
    return choose_device(cuda_index).nvml_index
