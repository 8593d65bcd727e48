"""Samplers over the fake NVML: rows on one monotonic grid, rate/drop accounting, GPM limits."""
from __future__ import annotations

import time

import pytest
import fake_nvml

from sitsprof.collectors.errors import SamplerError
from sitsprof.collectors.gpm_sampler import GpmSampler
from sitsprof.collectors.nvml_sampler import NvmlSampler
from sitsprof.collectors.sampler import PeriodicSampler
from sitsprof.pmu.errors import UnsupportedError


def test_nvml_sampler_rows_and_stats(fake_gpu):
    with NvmlSampler(0, interval_s=0.005) as sampler:
        time.sleep(0.4)
    stats = sampler.stats()
    rows = sampler.drain()
    assert stats["samples"] == len(rows["t_ns"]) > 20
    assert set(rows) >= {"t_ns", "tick", "read_ns", "sm_clock_mhz", "memory_clock_mhz", "power_w",
                         "temperature_c", "gpu_util_pct", "clock_event_reasons", "memory_used_bytes"}
    assert rows["power_w"][0] == 120.0 and rows["memory_clock_mhz"][0] == 3201
    assert all(b > a for a, b in zip(rows["t_ns"], rows["t_ns"][1:]))  # one monotonic clock
    assert all(b > a for a, b in zip(rows["tick"], rows["tick"][1:]))
    # every tick is either a row or counted as dropped
    assert rows["tick"][-1] + 1 == stats["samples"] + stats["dropped"] + stats["errors"]
    assert 0 < stats["achieved_hz"] <= stats["requested_hz"] * 1.05
    assert sampler.drain() == {}


class _Slow(PeriodicSampler):
    name = "slow"

    def read(self):
        time.sleep(0.025)
        return {"x": 1}


def test_slow_reads_are_counted_as_dropped_not_squeezed_in():
    with _Slow(0.01) as sampler:
        time.sleep(0.3)
    stats = sampler.stats()
    assert stats["dropped"] >= stats["samples"]  # each 25 ms read skips at least two 10 ms ticks
    assert stats["achieved_hz"] < 50


class _Failing(PeriodicSampler):
    name = "failing"

    def read(self):
        raise RuntimeError("device went away")


def test_read_errors_are_reported():
    with _Failing(0.001) as sampler:
        time.sleep(0.2)
    assert sampler.stats()["errors"] >= 50 and "device went away" in sampler.stats()["last_error"]


def test_interval_limits(fake_gpu):
    with pytest.raises(SamplerError, match="below its minimum"):
        NvmlSampler(0, interval_s=0.0001)
    with pytest.raises(SamplerError, match="100 ms"):
        GpmSampler(0, interval_s=0.05)
    with pytest.raises(SamplerError, match="unknown counter groups"):
        NvmlSampler(0, groups=["clocks", "tlb"])


def test_gpm_sampler_follows_dram_activity(fake_gpu):
    with GpmSampler(0, interval_s=0.1) as sampler:
        time.sleep(0.25)
        fake_gpu.state["devices"][0]["dram_bw_util"] = 87.5
        time.sleep(0.3)
    rows = sampler.drain()
    assert rows["gpm_dram_bw_util_pct"][0] == 1.5 and rows["gpm_dram_bw_util_pct"][-1] == 87.5
    assert fake_gpu.calls["nvmlGpmSampleFree"] == 2  # both samples released


@pytest.mark.parametrize("gpm, reason", [("unsupported", "needs Hopper"), ("absent", "driver has no GPM")])
def test_gpm_unsupported_refuses_to_start(tmp_path, gpm, reason):
    fake_nvml.install(fake_nvml.default_state(gpm=gpm))
    try:
        with pytest.raises(UnsupportedError, match=reason):
            GpmSampler(0).start()
    finally:
        fake_nvml.uninstall()
