"""One time base for a run: the host's monotonic clock, tied to wall time and to the GPU.

Samplers stamp rows with `time.monotonic_ns()`. `clock_sync()` records the wall-clock time
of one monotonic reading, and, where CuPy and a GPU are there, the offset between the GPU's
`%globaltimer` (the time base of CUPTI PM-sampling timestamps) and the monotonic clock,
taken from the kernel launch with the shortest round trip of a few.
"""
from __future__ import annotations

import time

__all__ = ["clock_sync"]

_KERNEL = r"""
extern "C" __global__ void sitsprof_globaltimer(unsigned long long *out) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    out[0] = t;
}
"""


def _globaltimer_offset(device_index: int, trials: int = 7) -> dict:
    try:
        import cupy
    except ImportError:
        return {"available": False, "reason": "cupy is not installed"}
    try:
        with cupy.cuda.Device(device_index):
            kernel = cupy.RawKernel(_KERNEL, "sitsprof_globaltimer")
            out = cupy.zeros(1, dtype=cupy.uint64)
            kernel((1,), (1,), (out,))
            cupy.cuda.runtime.deviceSynchronize()  # warm-up: module load
            best = None
            for _ in range(trials):
                t0 = time.monotonic_ns()
                kernel((1,), (1,), (out,))
                cupy.cuda.runtime.deviceSynchronize()
                t1 = time.monotonic_ns()
                gpu = int(out.get()[0])
                if best is None or t1 - t0 < best[1] - best[0]:
                    best = (t0, t1, gpu)
    except Exception as exc:  # noqa: BLE001 - the offset is optional
        return {"available": False, "reason": f"{type(exc).__name__}: {exc}"}
    t0, t1, gpu = best
    return {"available": True, "offset_ns": gpu - (t0 + t1) // 2, "uncertainty_ns": (t1 - t0) // 2,
            "method": f"%globaltimer kernel, shortest of {trials} launches"}


def clock_sync(device_index: int | None = 0) -> dict:
    """{"host_clock", "monotonic_ns", "unix_ns", "globaltimer": {...}} (globaltimer = monotonic + offset_ns)."""
    mono0 = time.monotonic_ns()
    unix = time.time_ns()
    mono1 = time.monotonic_ns()
    out = {"host_clock": "time.monotonic_ns", "monotonic_ns": (mono0 + mono1) // 2, "unix_ns": unix}
    if device_index is not None:
        out["globaltimer"] = _globaltimer_offset(device_index)
    return out
