"""Change-point tier detection on constructed ladders with published plateaus
(calibration/data/hopper-published.json).

Plateaus (cycles at 1980 MHz, RRZE-HPC gpu-benches, gpu-latency on GH200): L1 ~32,
near L2 ~280, far L2 ~490-530, HBM ~610-690.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sitsprof.reports.tiers import detect_steps, detect_tiers, segment

KiB, MiB, GiB = 1024, 1024**2, 1024**3
L2 = 50 * MiB


def ladder(per_octave=4, top=4 * GiB, l1=32.0, near=280.0, far=510.0, hbm=650.0, ramp=True):
    fps = np.unique((np.geomspace(16 * KiB, top, int(np.log2(top / (16 * KiB)) * per_octave) + 1))
                    .astype(np.int64) // 128 * 128)

    def level(f):
        if f <= 160 * KiB:
            return l1
        if f <= 24 * MiB:  # past the L1, hits fall off as capacity/footprint (a long ramp)
            hit = 160 * KiB / f if ramp else float(f <= 192 * KiB)
            return hit * l1 + (1 - hit) * near
        if f <= L2:
            return far
        return hbm

    return fps, np.array([level(f) for f in fps])


def samples(med, rng, n=512, spread=0.04, tail=0.01):
    out = []
    for m in med:
        v = m * (1 + rng.normal(0, spread, n))
        hit = rng.random(n) < tail
        v[hit] += rng.exponential(m, hit.sum())
        out.append(v)
    return out


@pytest.mark.parametrize("ramp", [True, False], ids=["gradual-L1-falloff", "sharp-L1-edge"])
@pytest.mark.parametrize("per_octave", [2, 4, 8])
def test_four_published_tiers_from_noisy_samples(per_octave, ramp):
    rng = np.random.default_rng(per_octave)
    fps, med = ladder(per_octave, ramp=ramp)
    tiers = detect_tiers(fps, samples(med, rng), l2_bytes=L2)
    assert [t.name for t in tiers] == ["l1", "l2_near", "l2_far", "hbm"]
    for t, want in zip(tiers, (32, 280, 510, 650)):
        assert t.level == pytest.approx(want, rel=0.05)
    near, far, hbm = tiers[1], tiers[2], tiers[3]
    assert near.footprint_hi <= 24 * MiB < far.footprint_lo
    assert far.footprint_hi <= L2 < hbm.footprint_lo
    assert tiers[0].footprint_hi <= (160 if ramp else 192) * KiB


def test_transition_points_are_not_tiers():
    fps, med = ladder(8)
    seg = segment(fps, med)
    assert len(seg.segments) == 4
    assert seg.transitions and all(160 * KiB < t.footprint_lo <= 1 * MiB for t in seg.transitions)


def test_a_one_footprint_spike_is_not_a_tier():
    fps, med = ladder(4)
    k = int(np.searchsorted(fps, 4 * MiB))
    for factor in (1.6, 3.0):  # one noisy footprint inside the near-L2 plateau
        spiked = med.copy()
        spiked[k] *= factor
        tiers = detect_tiers(fps, spiked, l2_bytes=L2)
        assert [t.name for t in tiers] == ["l1", "l2_near", "l2_far", "hbm"]
        assert tiers[1].level == pytest.approx(275, rel=0.03)
        assert tiers[1].footprint_lo < fps[k] < tiers[1].footprint_hi  # absorbed, the plateau not split


def test_names_by_order_without_l2_size_and_for_l1_bypassing_chase():
    fps, med = ladder(4)
    assert [t.name for t in detect_tiers(fps, med)] == ["l1", "l2_near", "l2_far", "hbm"]
    keep = fps > 1 * MiB  # what an ld.global.cg chase sees: no L1 plateau
    names = [t.name for t in detect_tiers(fps[keep], med[keep], first="l2_near", l2_bytes=L2)]
    assert names == ["l2_near", "l2_far", "hbm"]


def test_a_second_plateau_beyond_hbm_is_not_called_a_tlb_miss_by_the_ladder_alone():
    """Issue 20.4: the ladder names what it sees (a second HBM plateau), not its cause."""
    fps, med = ladder(4, top=16 * GiB)
    med = np.where(fps > 4 * GiB, 900.0, med)
    tiers = detect_tiers(fps, med, l2_bytes=L2)
    assert [t.name for t in tiers][-2:] == ["hbm", "hbm_2"]
    assert "TLB" not in tiers[-1].label.replace("TLB sweep", "") and "cause not shown" in tiers[-1].label


@pytest.mark.parametrize("step_at, stride, named", [
    (6 * GiB, 2 * MiB, "tlb_miss"), (8 * GiB, 2 * MiB, "tlb_miss"), (32 * GiB, 2 * MiB, "hbm_2"),
    (6 * GiB, 32 * MiB, "hbm_2"),  # the same footprint at 32 MiB a link is 16x fewer pages
    (96 * GiB, 32 * MiB, "tlb_miss"), (None, None, "hbm_2")])
def test_the_plateau_is_a_tlb_miss_only_where_the_tlb_sweep_steps_at_that_page_count(step_at, stride, named):
    """Issue 20.4: `tlb_miss` only when the TLB sweep (one link per stride) steps within a factor 2
    of the page count (2 MiB pages) where the ladder's second HBM plateau starts; a step
    elsewhere, or no sweep, leaves `hbm_2` and a note that says why."""
    from sitsprof.reports.analysis import Distribution, RunAnalysis, Tier, name_tiers_by_tlb

    fps, med = ladder(4, top=16 * GiB)
    med = np.where(fps > 4 * GiB, 900.0, med)
    segs = detect_tiers(fps, med, l2_bytes=L2)
    dist = Distribution.of(np.array([1.0, 2.0]), presorted=True)
    res = RunAnalysis("r", "r", {}, True, "complete", True, 1980.0,
                      tiers=[Tier(s.name, s.label, s.footprint_lo, s.footprint_hi, dist) for s in segs])
    if step_at is not None:
        res.tlb_steps = [{"stride_bytes": stride, "step_at_bytes": step_at, "reach_bytes": step_at // 2}]
    name_tiers_by_tlb(res)
    last = res.tiers[-1]
    assert 4 * GiB < last.footprint_lo <= 6 * GiB
    assert last.name == named
    if named == "tlb_miss":
        assert last.label == f"HBM + TLB miss (TLB sweep step at {step_at // stride} pages, stride {stride})"
        assert not res.notes
    else:
        assert res.notes == [f"ladder plateau hbm_2 from {last.footprint_lo} bytes "
                             f"({last.footprint_lo / (2 * MiB):.0f} pages of 2 MiB): "
                             + ("no TLB sweep in the run" if step_at is None
                                else "no TLB sweep step within a factor 2 of that page count")
                             + ", so it is not called a TLB miss"]


def test_flat_data_is_one_tier_and_levels_do_not_depend_on_units():
    fps, _ = ladder(4)
    flat = np.full(fps.size, 300.0) * (1 + np.random.default_rng(0).normal(0, 0.02, fps.size))
    assert len(detect_tiers(fps, flat)) == 1
    _, med = ladder(4)
    a = detect_tiers(fps, med)
    b = detect_tiers(fps, med / 1.98)  # the same ladder in ns at 1980 MHz
    assert [(t.start, t.stop) for t in a] == [(t.start, t.stop) for t in b]


def test_steps_report_reach_and_size():
    fps = np.array([4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096], dtype=np.int64) * MiB
    lat = np.array([300, 302, 298, 301, 299, 300, 345, 347, 344, 430, 432], dtype=float)
    steps = detect_steps(fps, lat)
    assert [(s.reach_bytes, s.step_at_bytes) for s in steps] == [(128 * MiB, 256 * MiB), (1024 * MiB, 2048 * MiB)]
    assert steps[0].size == pytest.approx(45, abs=3)
    assert steps[1].size == pytest.approx(85, abs=4)


def test_bad_input():
    with pytest.raises(ValueError, match="ascending"):
        segment([2, 1], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        segment([1, 2], [1.0, -2.0])
    with pytest.raises(ValueError, match="2 footprints but 1"):
        segment([1, 2], [1.0])
    assert segment([], []).segments == []


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(20, 2000), min_size=1, max_size=5).map(sorted),
       st.integers(3, 8), st.integers(0, 10_000))
def test_separated_plateaus_are_recovered(levels, width, seed):
    """Plateaus at least 20% apart, each `width` footprints wide, 2% noise: found exactly."""
    kept = [levels[0]]
    for v in levels[1:]:
        if v >= kept[-1] * 1.2:
            kept.append(v)
    rng = np.random.default_rng(seed)
    med = np.repeat(kept, width) * (1 + rng.normal(0, 0.02, width * len(kept)))
    fps = (np.arange(med.size) + 1) * 4096
    seg = segment(fps, med)
    assert [(s.start, s.stop) for s in seg.segments] == [(k * width, (k + 1) * width) for k in range(len(kept))]
