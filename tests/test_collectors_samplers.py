"""Samplers over the fake NVML: rows on one monotonic grid, rate/drop accounting, GPM limits."""
from __future__ import annotations

import time

import fake_nvml
import pytest

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


def test_gpm_samples_are_always_more_than_100ms_apart(fake_gpu):
    """Issue 10 item 10: NVML wants more than 100 ms between nvmlGpmSampleGet calls (nvml.h); the
    first tick used to follow open()'s sample at once. Every gap, the first included, is over 100 ms."""
    with GpmSampler(0, interval_s=0.1) as sampler:
        time.sleep(0.55)
    times = fake_gpu.gpm_sample_times
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(times) >= 4 and sampler.stats()["samples"] == len(times) - 1
    assert min(gaps) > 0.1, gaps
    assert sampler.describe()["gpm_min_sample_gap_ms"] > 100


def test_gpm_reader_waits_out_a_read_that_comes_too_soon(fake_gpu):
    """Issue 10 item 10: a read sooner than 100 ms after the previous sample (a late tick followed
    by an on-time one, or open() then read()) waits instead of sampling early."""
    from sitsprof.pmu.gpm import GpmReader

    reader = GpmReader(0).open()
    try:
        reader.read()
        reader.read()
    finally:
        reader.close()
    times = fake_gpu.gpm_sample_times
    assert len(times) == 3 and all(b - a > 0.1 for a, b in zip(times, times[1:]))
    assert reader.waits == 2 and reader.min_gap_s > 0.1


def test_gpm_interval_default_and_refusal(fake_gpu):
    """Issue 10 item 10: the default GPM interval is 200 ms; below 100 ms is refused in one line
    that names the minimum and the fix."""
    from sitsprof.collectors.recorder import build_samplers

    assert GpmSampler(0).interval_s == 0.2
    assert [s.interval_s for s in build_samplers(0) if s.name == "gpm"] == [0.2]
    with pytest.raises(SamplerError) as info:
        GpmSampler(0, interval_s=0.099)
    message = str(info.value)
    assert "\n" not in message and "100 ms" in message and "use 100ms or more" in message
    assert info.value.exit_code == 2


def test_nvml_sampler_reports_each_fields_update_rate(fake_gpu):
    """Issue 10 item 14: at a 2 ms poll most NVML fields repeat; the stats say how often each
    column's value really changed (the fake's power changes every 50 ms, the rest never)."""
    dev = fake_gpu.state["devices"][0]
    stop = time.monotonic() + 0.6
    with NvmlSampler(0, interval_s=0.002) as sampler:
        while time.monotonic() < stop:
            dev["power_mw"] += 1000
            time.sleep(0.05)
    stats = sampler.stats()
    rate = stats["field_update_hz"]
    assert 10 <= rate["power_w"] <= 25, rate
    assert rate["temperature_c"] == 0 and rate["sm_clock_mhz"] == 0 and rate["memory_used_bytes"] == 0
    assert stats["field_changes"]["power_w"] >= 8 and stats["requested_hz"] == 500


def test_nvml_series_sampler_reads_each_driver_sample_once(fake_gpu):
    """Issue 10 item 14: the driver's timestamped series (nvmlDeviceGetSamples) are read with
    lastSeenTimeStamp bookkeeping: every sample since the start once, at its driver time, and
    their real rate (the fake's driver samples power every 20 ms, utilisation every 1/6 s)."""
    from sitsprof.collectors.nvml_sampler import NvmlSeriesSampler

    start_us = time.time_ns() // 1000
    t0 = time.monotonic_ns()
    with NvmlSeriesSampler(0, interval_s=0.05) as sampler:
        time.sleep(0.7)
    t1 = time.monotonic_ns()
    stats = sampler.stats()
    rows = sampler.drain()
    power = [(t, v) for t, v in zip(rows["t_ns"], rows["power_w"]) if v is not None]
    stamps = [(t - stats["wall_to_monotonic_ns"]) // 1000 for t, _ in power]
    assert len(power) >= 25 and all(v == 120.0 for _, v in power)
    assert stamps[0] > start_us and all(b - a == 20_000 for a, b in zip(stamps, stamps[1:]))  # none twice, none lost
    assert all(t0 - 20_000_000 <= t <= t1 for t, _ in power)  # on the samplers' monotonic clock
    util = [v for v in rows["gpu_util_pct"] if v is not None]
    assert 2 <= len(util) <= 6 and len(power) + len(util) + len(
        [v for v in rows["memory_util_pct"] if v is not None]) == len(rows["t_ns"])
    assert stats["series"]["power_w"]["driver_hz"] == pytest.approx(50, rel=0.01)
    assert stats["series"]["power_w"]["update_hz"] == 0  # a constant value never changes
    seen = [last for kind, last in fake_gpu.sample_queries if kind == 0]
    assert seen == sorted(seen) and seen[0] >= start_us  # each query starts after the last stamp seen
    assert sampler.drain() == {}


def test_nvml_series_unsupported_is_reported_not_fatal(tmp_path):
    """Issue 10 item 14: a driver without nvmlDeviceGetSamples support records why, and no rows."""
    from sitsprof.collectors.nvml_sampler import NvmlSeriesSampler

    fake_nvml.install(fake_nvml.default_state(samples_supported=False))
    try:
        with NvmlSeriesSampler(0, interval_s=0.05) as sampler:
            time.sleep(0.1)
    finally:
        fake_nvml.uninstall()
    assert sampler.drain() == {}
    assert set(sampler.describe()["unsupported_series"]) == {"power_w", "gpu_util_pct", "memory_util_pct"}


def test_record_refuses_a_gpm_interval_below_100ms_before_making_anything(fake_gpu, tmp_path, cli):
    """Issue 10 item 10: `record --gpm-interval 50ms` is refused in one line, exit status 2, no run
    directory made; `--gpm-interval 300ms` reaches the GPM sampler."""
    code, out, err = cli("record", "--duration", "0.3s", "--gpm-interval", "50ms", "--out", str(tmp_path / "a"))
    assert code == 2 and "below its minimum of 100 ms" in err and "use 100ms or more" in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1
    assert not (tmp_path / "a").exists()
    code, out, err = cli("record", "--duration", "0.5s", "--gpm-interval", "300ms", "--out", str(tmp_path / "b"),
                         "--name", "r")
    assert code == 0, err
    from sitsprof.collectors.rundir import open_run

    assert open_run(tmp_path / "b" / "r").meta["samplers"]["gpm"]["interval_s"] == 0.3
