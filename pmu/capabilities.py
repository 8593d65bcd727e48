"""What this user can do on a GPU: lock clocks, GPM, CUPTI PM sampling, which counters read."""
from __future__ import annotations

import os

from sitsprof.pmu.catalog import COUNTERS, NVML_GROUPS

__all__ = ["capabilities", "clock_lock_capability", "device_entries"]


def clock_lock_capability() -> dict:
    """NVML has no 'may I lock clocks' query; locking needs root, so root is what we check."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return {"possible": True, "reason": "running as root"}
    return {"possible": False,
            "reason": "locking clocks needs root (NVML_ERROR_NO_PERMISSION otherwise); run as root, or use "
                      "--clocks none to record clock drift instead"}


def _nvml_problems(index: int) -> dict[str, str]:
    """NVML counter name -> why it does not read on GPU `index` (counters that read are absent)."""
    from sitsprof.pmu.nvml import group_readers, handle, nvml

    pynvml = nvml()
    h = handle(index)
    problems = {}
    for group, reader in zip(NVML_GROUPS, group_readers(pynvml, h, NVML_GROUPS)):
        try:
            row = reader()
        except pynvml.NVMLError as exc:
            problems.update((c.name, f"NVML: {exc}") for c in COUNTERS if c.group == group)
            continue
        missing = [k for k, v in row.items() if v is None]
        problems.update((k, f"not reported: {', '.join(missing)}") for k in missing)
    return problems


def capabilities(index: int = 0) -> dict:
    """Clock locking, GPM, CUPTI PM sampling and, for each catalog counter, whether it reads on GPU `index`."""
    from sitsprof.pmu.clocks import lock_behaviour
    from sitsprof.pmu.cupti_pm import availability
    from sitsprof.pmu.gpm import gpm_support
    from sitsprof.pmu.nvml import nvml, optional

    pynvml = nvml()
    gpm_ok, gpm_reason = gpm_support(index)
    cuda_version = optional(pynvml.nvmlSystemGetCudaDriverVersion)
    cupti_ok, cupti_reason = availability(cuda_version)
    nvml_problems = _nvml_problems(index)
    counters = []
    for counter in COUNTERS:
        if counter.unavailable:
            readable, reason = False, counter.unavailable
        elif counter.backend in ("nvml", "nvml_field"):
            reason = nvml_problems.get(counter.name)
            readable = reason is None
        elif counter.backend == "gpm":
            readable, reason = gpm_ok, gpm_reason
        else:
            readable, reason = cupti_ok, cupti_reason
        counters.append({**counter.to_dict(), "readable": bool(readable), "reason": reason})
    return {
        "clock_lock": clock_lock_capability(),
        "clock_locking": lock_behaviour(index),  # what a lock would do on this card (persistence, MIG)
        "gpm": {"supported": gpm_ok, "reason": gpm_reason},
        "cupti_pm_sampling": {"available": cupti_ok, "reason": cupti_reason},
        "counters": counters,
    }


def device_entries(index: int | None = None) -> list[dict]:
    """`sitsprof devices`: the facts of every GPU (or only GPU `index`), each with its `capabilities`."""
    from sitsprof.pmu.device import device_facts
    from sitsprof.pmu.nvml import device_count

    indices = [index] if index is not None else list(range(device_count()))
    return [{**device_facts(i), "capabilities": capabilities(i)} for i in indices]
