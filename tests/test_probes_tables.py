"""The raw probe tables from constructed (recorded-shape) kernel output: no GPU involved."""
from __future__ import annotations

import numpy as np
import pytest

from sitsprof.common.sizes import KiB, MiB
from sitsprof.probes import tables as A
from sitsprof.probes.errors import ProbeError

MHZ = 1980.0


def test_ring_is_one_cycle_through_every_link():
    order = A.ring_order(1000, seed=3)
    assert sorted(order.tolist()) == list(range(1000))
    nxt = A.ring_next(order)
    visited = A.walk(nxt, int(order[0]), 1000)
    assert sorted(visited.tolist()) == list(range(1000))  # one cycle, all links, no repeats
    assert visited[-1] == order[0]
    assert not np.array_equal(order, np.arange(1000, dtype=np.uint64))  # permuted, not sequential
    with pytest.raises(ProbeError):
        A.ring_order(1)


def test_link_offsets_stay_in_their_page_and_spread_lines():
    stride, skew = 2 * MiB, 17 * 128
    k = np.arange(4096)
    off = A.link_offset(k, stride, skew).astype(np.int64)
    assert np.all(off // stride == k)  # each link in its own stride-sized page
    assert np.all(off % 128 == 0)
    assert np.unique((off % stride) // 128).size == 4096  # distinct lines inside the pages
    assert np.array_equal(A.link_offset(k, 128), k * 128)


def test_sm_clock_and_conversion():
    mhz = A.sm_clock_mhz(20_000_000, 39_600_000)
    assert mhz == pytest.approx(1980.0)
    assert A.cycles_to_ns(1980, mhz) == pytest.approx(1000.0)
    with pytest.raises(ProbeError):
        A.sm_clock_mhz(0, 10)


def test_overhead_is_subtracted_from_recorded_stamps():
    rng = np.random.default_rng(0)
    overhead = A.timer_overhead(np.where(rng.random(4096) < 0.99, 6, 40))
    assert overhead["median"] == 6.0 and overhead["p99"] <= 40
    raw = np.array([38, 286, 656], dtype=np.uint32)
    frame = A.chase_frame(raw, overhead["median"], MHZ, footprint_bytes=16 * KiB, variant="ca")
    assert frame["latency_cycles"].tolist() == [32.0, 280.0, 650.0]
    assert frame["latency_ns"].iloc[1] == pytest.approx(280 / 1.98, rel=1e-6)
    assert frame["footprint_bytes"].unique().tolist() == [16 * KiB]
    assert frame["sample"].tolist() == [0, 1, 2]


def test_bandwidth_bytes():
    assert A.bytes_moved("read", 1000, 2) == 32_000
    assert A.bytes_moved("copy", 1000, 2) == 64_000


def test_saturator_bandwidth_from_recorded_stats():
    assert A.saturator_gbs(np.array([4_000_000_000, 1_000, 1_001_000, 0, 0], dtype=np.uint64)) == 4000.0
    assert A.saturator_gbs(np.array([0, 2**64 - 1, 0, 0, 0], dtype=np.uint64)) == 0.0


def test_choose_throttles_inverts_a_monotone_calibration():
    sleeps = [0, 100, 200, 400, 800, 1600, 3200, 6400]
    gbs = [4000, 3900, 3500, 2600, 1600, 900, 480, 250]
    got = A.choose_throttles(sleeps, gbs, [4000, 3500, 2000, 480, 100, 5000])
    assert got[0] == 0 and got[1] == 200 and got[3] == 3200
    assert 400 < got[2] < 800
    assert got[4] > 6400          # below the slowest calibration point: extrapolated
    assert got[5] == 0            # above peak: unthrottled
    # a noisy, non-monotone calibration still gives non-increasing bandwidth for more sleep
    noisy = A.choose_throttles(sleeps, [4000, 4050, 3500, 3600, 1600, 900, 480, 250], [3550])
    assert 100 <= noisy[0] <= 400


def test_chase_clock_from_its_own_window():
    """Issue 10.9: a chase's cycles convert at the clock of its own %globaltimer/clock64 window;
    a window shorter than MIN_CLOCK_WINDOW_NS (the global timer ticks coarsely) falls back to the
    session clock, and says so."""
    g0, c0 = 10**9, 5 * 10**8
    span = A.MIN_CLOCK_WINDOW_NS
    assert A.chase_clock([g0, g0 + span, c0, c0 + span * 3 // 2], 1980.0) == (pytest.approx(1500.0), "chase")
    assert A.chase_clock([g0, g0 + span - 1, c0, c0 + span], 1980.0) == (1980.0, "session")
    cols = A.clock_columns([g0, g0 + span, c0, c0 + 2 * span], 1980.0)
    assert cols["chase_mhz"] == pytest.approx(2000.0) and cols["chase_end_ns"] - cols["chase_start_ns"] == span


def test_placement_needs_the_probe_window_inside_the_saturators():
    """Issue 10.7: the validity of a loaded chase from its raw window stamps."""
    w = {"probe_start_ns": 100, "probe_end_ns": 200, "saturator_start_ns": 50, "saturator_end_ns": 250,
         "saturator_blocks_at_probe_start": 10}
    assert A.placement(True, True, 3, 3, w) == (True, "")
    assert A.placement(False, True, None, 5, {**w, "saturator_start_ns": -1}) == (True, "")  # idle level
    assert "had not started" in A.placement(True, True, 3, 3, {**w, "saturator_start_ns": 150})[1]
    assert "had not started" in A.placement(True, True, 3, 3, {**w, "saturator_blocks_at_probe_start": 0})[1]
    assert "stopped before" in A.placement(True, True, 3, 3, {**w, "saturator_end_ns": 199})[1]
    assert "not on SM 3" in A.placement(True, True, 3, 4, w)[1]
    assert "no probe block landed" in A.placement(True, False, 3, 2**32 - 1, w)[1]


def test_line_ages_wrap_with_the_32_bit_stamps():
    assert A.line_ages([10, 2**32 - 5], [30, 7]).tolist() == [20, 12]
