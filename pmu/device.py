"""Device facts: what a run records about the GPU it ran on (`device_facts`).

Everything comes from NVML, except the SM count and L2 size, which NVML does not expose:
those come from the CUDA driver (cuda-python, when installed) and otherwise from NVML's CUDA
core count and a small table of known parts; `sources` says which.
"""
from __future__ import annotations

from sitsprof.pmu.nvml import cuda_version_text, handle, nvml, optional, text

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
# L2 sizes of Hopper parts (NVIDIA Hopper architecture whitepaper: 50 MB on H100 SXM5/PCIe)
_L2_BY_MODEL = {"H100": 50 * 1024 * 1024, "H200": 50 * 1024 * 1024, "GH200": 50 * 1024 * 1024}


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
        model = next((key for key in sorted(_L2_BY_MODEL, key=len, reverse=True) if key in name), None)
        if model:
            l2_bytes = _L2_BY_MODEL[model]
            sources["l2_bytes"] = f"known {model} L2 size"
    return {
        "index": index,
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

