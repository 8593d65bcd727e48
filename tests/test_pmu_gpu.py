"""GPU checks (`-m gpu`, skipped without a GPU): clock lock and restore seen through NVML, GPM
DRAM bandwidth rising under a CuPy copy, CUPTI PM sampling at 10 us without overflow, and the
NVML sampler rate."""
from __future__ import annotations

import statistics
import threading
import time

import pytest

pytestmark = pytest.mark.gpu


def _copy_load(seconds: float):
    """Run device-to-device copies of 1 GiB for `seconds` (returns bytes copied)."""
    cupy = pytest.importorskip("cupy")
    a = cupy.ones(2**28, dtype=cupy.float32)
    b = cupy.empty_like(a)
    copied, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        b[...] = a
        cupy.cuda.runtime.deviceSynchronize()
        copied += 2 * a.nbytes
    return copied


def _sm_clock_under_load(index=0, seconds=0.5):
    from sitsprof.pmu.clocks import read_clocks

    readings = []
    worker = threading.Thread(target=_copy_load, args=(seconds,))
    worker.start()
    while worker.is_alive():
        readings.append(read_clocks(index)["sm_mhz"])
        time.sleep(0.02)
    worker.join()
    return statistics.median(readings)


def test_lock_and_restore_verified_through_nvml():
    from sitsprof.pmu.clocks import locked_clocks, resolve
    from sitsprof.pmu.errors import ClockPermissionError

    supported = resolve(0, "max")["sm"]
    from sitsprof.pmu.device import clock_facts
    from sitsprof.pmu.nvml import handle

    steps = clock_facts(handle(0))["supported_sm_mhz"]
    target = steps[len(steps) // 2]  # a mid clock, far below boost
    try:
        with locked_clocks(0, sm=target) as session:
            locked = _sm_clock_under_load()
    except ClockPermissionError as exc:
        pytest.skip(str(exc))
    after = _sm_clock_under_load()
    print(f"locked to {target} MHz: {locked} MHz under load; after restore: {after} MHz (max {supported})")
    assert abs(locked - target) <= 30
    assert session.restored and after > target + 100


def test_gpm_dram_bandwidth_rises_during_copy():
    from sitsprof.collectors.gpm_sampler import GpmSampler
    from sitsprof.pmu.gpm import gpm_support

    ok, reason = gpm_support(0)
    if not ok:
        pytest.skip(reason)
    with GpmSampler(0, interval_s=0.1) as sampler:
        time.sleep(0.6)
        idle_rows = len(sampler.drain().get("gpm_dram_bw_util_pct", []))
        _copy_load(1.5)
    rows = sampler.drain()["gpm_dram_bw_util_pct"]
    busy = statistics.median(v for v in rows if v is not None)
    print(f"GPM DRAM_BW_UTIL: idle rows {idle_rows}, median during copy {busy:.1f}%")
    assert busy > 30.0


def test_cupti_pm_sampling_10us_without_overflow():
    from sitsprof.collectors.cupti_sampler import CuptiPmSampler
    from sitsprof.pmu.cupti_pm import availability

    ok, reason = availability()
    if not ok:
        pytest.skip(reason)
    sampler = CuptiPmSampler(0, interval_ns=10_000).start()
    try:
        _copy_load(2.0)
    finally:
        sampler.stop()
    rows = sampler.drain()
    stats = sampler.stats()
    gaps = [b - a for a, b in zip(rows["gpu_start_ns"], rows["gpu_start_ns"][1:])]
    print(f"CUPTI PM: {stats['samples']} samples, {stats['achieved_hz']:.0f} Hz, median gap "
          f"{statistics.median(gaps)} ns, overflow {stats['overflow']}, dropped {stats['dropped']}")
    assert not stats["overflow"] and stats["last_error"] is None
    assert statistics.median(gaps) <= 10_500
    assert stats["samples"] >= 0.9 * 2.0 / 10e-6
    assert max(rows["dram__bytes_read.sum"]) > 0 and "lts__t_sectors_lookup_hit.sum" in rows


def test_nvml_sampler_reaches_1khz():
    from sitsprof.collectors.nvml_sampler import NvmlSampler

    with NvmlSampler(0, interval_s=0.001) as sampler:
        time.sleep(3.0)
    stats = sampler.stats()
    print(f"NVML sampler: {stats['achieved_hz']:.0f} Hz, {stats['dropped']} dropped, "
          f"{stats['cpu_pct_of_core']:.2f}% of a core")
    assert stats["achieved_hz"] >= 950
