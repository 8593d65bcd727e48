"""The device a dry run plans against when no GPU is visible.

`sitsprof run --dry-run` on a laptop or a login node still shows the plan and its checks; it
assumes an H200 (the GPU the suites are sized for) and says so in the device's name.
"""
from __future__ import annotations

from sitsprof.common.sizes import GiB, KiB, MiB
from sitsprof.pmu.errors import NoGpuError

from . import gpu
from .plan import DeviceLimits


def assumed_h200() -> DeviceLimits:
    """The nominal H200 a dry run without a GPU plans against: what an H200's cudaDeviceProp
    reports (l2CacheSize 60 MiB, where an H100 reports 50 MiB; 228 KiB of shared memory per SM,
    227 KiB per block opted in, 1 KiB reserved per block)."""
    return DeviceLimits(name="NVIDIA H200 (assumed: no GPU visible)", index=0, compute_capability=(9, 0),
                        sm_count=132, l2_bytes=60 * MiB, memory_bytes=141 * GiB, free_bytes=140 * GiB,
                        shared_per_sm=228 * KiB, shared_per_block_optin=227 * KiB, reserved_shared_per_block=KiB)


def planning_limits(index: int, dry_run: bool) -> DeviceLimits:
    """GPU `index`'s limits; for a dry run without a GPU, the assumed H200 instead of NoGpuError."""
    try:
        return gpu.device_limits(index)
    except NoGpuError:
        if not dry_run:
            raise
        return assumed_h200()
