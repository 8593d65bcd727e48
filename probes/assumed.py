"""The device a dry run plans against when no GPU is visible.

`sitsprof run --dry-run` on a laptop or a login node still shows the plan and its checks; it
assumes an H200 (the GPU the suites are sized for) at the `--device` index asked for, says so
in the device's name and in the dry run's last line (`suite.dry_run_line`). Only a machine
with no usable GPU at all gets the assumed one: where GPUs are visible, a `--device` that is
not one of them is an error, dry run or not.
"""
from __future__ import annotations

from sitsprof.common.sizes import GiB, KiB
from sitsprof.pmu.device import known_device
from sitsprof.pmu.errors import NoGpuError

from . import gpu
from .plan import DeviceLimits

__all__ = ["ASSUMED_NOTE", "assumed_h200", "is_assumed", "planning_limits"]

#: What an assumed device's name says, and how `is_assumed` knows one.
ASSUMED_NOTE = "assumed: no GPU visible"


def assumed_h200(index: int = 0) -> DeviceLimits:
    """The nominal H200 a dry run without a GPU plans against, as GPU `index`: what an H200's
    cudaDeviceProp reports (l2CacheSize 60 MiB, where an H100 reports 50 MiB; 228 KiB of shared
    memory per SM, 227 KiB per block opted in, 1 KiB reserved per block)."""
    _model, l2_bytes, sm_count = known_device("NVIDIA H200")  # pmu.device.KNOWN_DEVICES: one table
    return DeviceLimits(name=f"NVIDIA H200 ({ASSUMED_NOTE})", index=int(index), compute_capability=(9, 0),
                        sm_count=sm_count, l2_bytes=l2_bytes, memory_bytes=141 * GiB, free_bytes=140 * GiB,
                        shared_per_sm=228 * KiB, shared_per_block_optin=227 * KiB, reserved_shared_per_block=KiB)


def is_assumed(limits: DeviceLimits) -> bool:
    """Whether `limits` is the assumed H200 rather than a device that answered."""
    return limits.name.endswith(f"({ASSUMED_NOTE})")


def planning_limits(index: int, dry_run: bool) -> DeviceLimits:
    """GPU `index`'s limits; for a dry run on a machine with no usable GPU (no CuPy, no driver,
    none visible), the assumed H200 at `index` instead of NoGpuError. Where GPUs are visible,
    an `index` that is not one of them is NoGpuError, dry run or not."""
    try:
        return gpu.device_limits(index)
    except NoGpuError:
        if not dry_run:
            raise
        try:
            gpu.import_cupy()
        except NoGpuError:
            return assumed_h200(index)
        raise  # GPUs are visible, and `index` is not one of them
