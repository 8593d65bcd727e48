"""What this user can do on a GPU: lock clocks, GPM, CUPTI PM sampling, which counters read."""
from __future__ import annotations

import os

from sitsprof.pmu.catalog import COUNTERS, NVML_GROUPS


def clock_lock_capability() -> dict:
    """NVML has no 'may I lock clocks' query; locking needs root, so root is what we check."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return {"possible": True, "reason": "running as root"}
    return {"possible": False,
            "reason": "locking clocks needs root (NVML_ERROR_NO_PERMISSION otherwise); run as root, or use "
                      "--clocks none to record clock drift instead"}


def _nvml_groups_readable(index: int) -> dict[str, str | None]:
    """group -> None if readable, else the reason."""
    from sitsprof.pmu.nvml import group_readers, handle, nvml

    pynvml = nvml()
    h = handle(index)
    out = {}
    for group, reader in zip(NVML_GROUPS, group_readers(pynvml, h, NVML_GROUPS)):
        try:
            row = reader()
            missing = [k for k, v in row.items() if v is None]
            out[group] = f"not reported: {', '.join(missing)}" if missing else None
        except pynvml.NVMLError as exc:
            out[group] = f"NVML: {exc}"
    return out


def capabilities(index: int = 0) -> dict:
    """Clock locking, GPM, CUPTI PM sampling and, for each catalog counter, whether it reads on GPU `index`."""
    from sitsprof.pmu.cupti_pm import availability
    from sitsprof.pmu.gpm import gpm_support
    from sitsprof.pmu.nvml import nvml, optional

    pynvml = nvml()
    gpm_ok, gpm_reason = gpm_support(index)
    cuda_version = optional(pynvml.nvmlSystemGetCudaDriverVersion)
    cupti_ok, cupti_reason = availability(cuda_version)
    groups = _nvml_groups_readable(index)
    counters = []
    for counter in COUNTERS:
        if counter.unavailable:
            readable, reason = False, counter.unavailable
        elif counter.backend in ("nvml", "nvml_field"):
            problem = groups.get(counter.group)
            readable = problem is None or (problem.startswith("not reported") and counter.name not in problem)
            reason = None if readable else problem
        elif counter.backend == "gpm":
            readable, reason = gpm_ok, gpm_reason
        else:
            readable, reason = cupti_ok, cupti_reason
        counters.append({**counter.to_dict(), "readable": bool(readable), "reason": reason})
    return {
        "clock_lock": clock_lock_capability(),
        "gpm": {"supported": gpm_ok, "reason": gpm_reason},
        "cupti_pm_sampling": {"available": cupti_ok, "reason": cupti_reason},
        "counters": counters,
    }
