"""Run-directory analysis on a synthetic run written through RunDirectory (no GPU)."""
from __future__ import annotations

import numpy as np
import pytest

from sitsprof.collectors.rundir import RunDirectory, open_run
from sitsprof.reports.analysis import analyze_run, sorted_groups
from sitsprof.reports.synthetic import make_synthetic_run


@pytest.fixture(scope="module")
def run_path(tmp_path_factory):
    return make_synthetic_run(tmp_path_factory.mktemp("runs"), "node-a", seed=3, samples=60_000).path


@pytest.fixture(scope="module")
def res(run_path):
    return analyze_run(run_path)


def test_sorted_groups_contiguous_and_interleaved():
    keys = np.array([3, 3, 1, 1, 1, 2])
    vals = np.array([5.0, 4.0, 9.0, np.nan, 7.0, 1.0])
    got = sorted_groups(keys, vals)
    assert [k for k, _ in got] == [1, 2, 3]
    assert [v.tolist() for _, v in got] == [[7.0, 9.0], [1.0], [4.0, 5.0]]
    inter = sorted_groups(np.array([1, 2, 1, 2]), np.array([4.0, 3.0, 2.0, 1.0]))
    assert [(k, v.tolist()) for k, v in inter] == [(1, [2.0, 4.0]), (2, [1.0, 3.0])]


def test_ladder_quantiles_are_exact(res, run_path):
    frame = open_run(run_path).read_table("latency")
    fp = int(res.ladder["footprint_bytes"].iloc[5])
    want = np.quantile(frame.loc[frame["footprint_bytes"] == fp, "latency_cycles"].to_numpy(), [0.5, 0.99])
    row = res.ladder[res.ladder["footprint_bytes"] == fp].iloc[0]
    assert [row["p50"], row["p99"]] == list(want)
    assert res.ladder["count"].sum() == len(frame)


def test_tiers_found_from_the_data(res):
    names = [t.name for t in res.tiers]
    assert names == ["l1", "l2_near", "l2_far", "hbm"]
    medians = {t.name: t.dist.summary["p50"] for t in res.tiers}
    assert medians["l1"] == pytest.approx(33, rel=0.05)
    assert medians["l2_near"] == pytest.approx(282, rel=0.05)
    assert medians["hbm"] == pytest.approx(648, rel=0.05)
    hbm = res.tier("hbm")
    assert hbm.dist.hist_counts.sum() == hbm.dist.summary["count"]
    assert res.to_ns(hbm.dist.summary["p50"]) == pytest.approx(hbm.dist.summary["p50"] / 1.98)


def test_tlb_steps_and_tlb_miss(res):
    strides = {s["stride_bytes"] for s in res.tlb_steps}
    assert strides == {2 << 20, 32 << 20}
    first = [s for s in res.tlb_steps if s["stride_bytes"] == 2 << 20][0]
    assert 4 << 30 < first["step_at_bytes"] <= 16 << 30 and first["size"] == pytest.approx(95, rel=0.2)
    assert res.tlb_miss is not None and res.tlb_miss[1].summary["p50"] == pytest.approx(377, rel=0.03)


def test_loaded_fit_and_replacement_delay(res):
    fit = res.loaded_fits[("hbm", "p50")]
    assert fit.l0 == pytest.approx(648, rel=0.03) and fit.u_max == pytest.approx(0.97, rel=0.03)
    assert fit.r2 > 0.99
    levels = sorted(res.replacement)
    assert len(levels) == 10
    p50 = [res.replacement[lv].summary["p50"] for lv in levels]
    assert abs(p50[0]) < 5 and all(b >= a for a, b in zip(p50, p50[1:]))
    # The baseline is the unloaded L2 hit: the median re-touch at level 0 (the saturator off).
    frame = open_run(res.path).read_table("loaded")
    idle = frame.loc[(frame["access"] == "retouch") & (frame["level"] == 0), "latency_cycles"]
    assert res.replacement_baseline[0].startswith("median re-touch")
    assert res.replacement_baseline[1] == pytest.approx(float(np.median(idle.to_numpy())), rel=1e-6)


def test_l1_bypassing_ladder_has_its_own_tiers(res):
    assert [t.name for t in res.tiers_cg][0] == "l2_near"
    assert res.tiers_cg[0].dist.summary["p50"] == pytest.approx(282, rel=0.05)
    assert res.ladder_cg is not res.ladder


def test_samplers_and_clock_drift(res):
    assert set(res.samplers) == {"nvml", "gpm"}
    assert set(res.samplers["nvml"]) == {"sm_clock_mhz", "memory_clock_mhz", "power_w", "temperature_c"}
    xs, ys = res.samplers["nvml"]["sm_clock_mhz"]
    assert xs.size <= 1500 and ys.size == xs.size and xs[0] == 0.0  # seconds from the phases' origin
    assert res.phases_aligned
    assert 0 < res.clock["max_drift_pct"] < 2 and res.clock["min_mhz"] < res.clock["max_mhz"]
    assert [p["name"] for p in res.phases] == ["latency", "tlb", "bandwidth", "loaded"]


def test_partial_and_unfinished_run(tmp_path):
    run = make_synthetic_run(tmp_path, "partial", samples=20_000, parts=("latency",), complete=False)
    res = analyze_run(open_run(run.path))
    assert not res.complete and res.status == "running"
    assert set(res.missing) == {"tlb", "bandwidth", "loaded"}
    assert res.tiers and res.loaded is None


def test_cupti_times_use_the_globaltimer_offset():
    import pandas as pd

    from sitsprof.reports.analysis import sampler_times_ns

    frame = pd.DataFrame({"gpu_start_ns": [5_000, 6_000], "dram__bytes_read.sum": [1.0, 2.0]})
    meta = {"clock_sync": {"globaltimer": {"available": True, "offset_ns": 1_000}}}
    assert sampler_times_ns(frame, meta).tolist() == [4_000, 5_000]
    assert sampler_times_ns(frame, {}) is None


def test_unknown_columns_are_reported_not_fatal(tmp_path):
    import pandas as pd

    run = RunDirectory.create(tmp_path, "odd")
    run.write_table("latency", pd.DataFrame({"size": [1, 2], "cycles": [3.0, 4.0]}))
    run.finish()
    res = analyze_run(run.path)
    assert "footprint" in res.missing["latency"] and res.ladder is None


# -- the figures the probe suite used to write as derived tables, from recorded-shape raw tables --
MHZ = 1980.0
KiB, MiB = 1 << 10, 1 << 20


def _analysed(tmp_path, name, tables: dict, meta: dict | None = None):
    run = RunDirectory.create(tmp_path, name, meta={"sm_clock_mhz": MHZ, "device": {"l2_bytes": 50 * MiB},
                                                    **(meta or {})})
    for table, frame in tables.items():
        run.write_table(table, frame)
    run.finish()
    return analyze_run(run.path)


def test_ladder_and_tiers_from_a_recorded_ladder(tmp_path):
    import pandas as pd

    from sitsprof.probes.tables import chase_frame

    rng = np.random.default_rng(1)
    frames = []
    for fp, lvl in [(16 * KiB, 32), (32 * KiB, 32), (64 * KiB, 32), (128 * KiB, 32), (1 * MiB, 280),
                    (2 * MiB, 280), (4 * MiB, 280), (8 * MiB, 280), (32 * MiB, 510), (45 * MiB, 510),
                    (128 * MiB, 650), (256 * MiB, 650), (512 * MiB, 650), (1024 * MiB, 650)]:
        raw = (lvl + 6) * (1 + rng.normal(0, 0.03, 512))
        frames.append(chase_frame(raw, 6, MHZ, footprint_bytes=fp, variant="ca", stride_bytes=128))
    res = _analysed(tmp_path, "ladder", {"latency": pd.concat(frames, ignore_index=True)})
    assert len(res.ladder) == 14 and (res.ladder["count"] == 512).all()
    assert res.ladder.columns[0] == "footprint_bytes"
    assert res.ladder["p50"].iloc[0] == pytest.approx(32, rel=0.02)
    assert [t.name for t in res.tiers] == ["l1", "l2_near", "l2_far", "hbm"]
    assert res.to_ns(res.tier("hbm").dist.summary["p50"]) == pytest.approx(650 / 1.98, rel=0.03)


def test_tlb_steps_from_a_recorded_sweep(tmp_path):
    import pandas as pd

    from sitsprof.probes.tables import chase_frame

    frames = []
    for stride in (2 * MiB, 32 * MiB):
        for k, fp in enumerate([64, 128, 256, 512, 1024, 2048, 4096, 8192]):
            lvl = 300 + (60 if k >= 4 else 0)
            frames.append(chase_frame(np.full(16, lvl, dtype=np.float64), 0, MHZ, variant="cg",
                                      stride_bytes=stride, footprint_bytes=fp * MiB))
    res = _analysed(tmp_path, "tlb", {"tlb": pd.concat(frames, ignore_index=True)})
    assert {s["stride_bytes"] for s in res.tlb_steps} == {2 * MiB, 32 * MiB}
    first = [s for s in res.tlb_steps if s["stride_bytes"] == 2 * MiB][0]
    assert first["reach_bytes"] == 512 * MiB and first["step_at_bytes"] == 1024 * MiB
    assert first["reach_pages"] == 256 and first["size"] == pytest.approx(60)


def test_load_levels_from_a_recorded_loaded_table(tmp_path):
    import pandas as pd

    from sitsprof.probes.tables import chase_frame

    rng = np.random.default_rng(3)
    frames = []
    for level in range(9):
        frac = level / 8
        hbm = 650 * (1 + 0.5 * frac ** 3) * (1 + rng.normal(0, 0.02, 400))
        evicted = rng.random(400) < frac * 0.8
        retouch = np.where(evicted, 700 * (1 + frac), 280) * (1 + rng.normal(0, 0.02, 400))
        for access, lat in (("hbm", hbm), ("retouch", retouch)):
            frames.append(chase_frame(lat + 6, 6, MHZ, level=level, target_fraction=frac, throttle_ns=0,
                                      access=access, achieved_gbs=4000 * frac, bandwidth_fraction=frac))
    frame = pd.concat(frames, ignore_index=True)
    res = _analysed(tmp_path, "loaded", {"loaded": frame})
    levels = res.loaded
    assert len(levels) == 18 and set(levels["access"]) == {"hbm", "retouch"}
    rt = levels[levels["access"] == "retouch"].sort_values("level")
    assert rt["evicted_fraction"].iloc[0] == pytest.approx(0, abs=0.01)
    assert rt["evicted_fraction"].iloc[-1] == pytest.approx(0.8, abs=0.06)
    assert levels.loc[levels["access"] == "hbm", "evicted_fraction"].isna().all()
    assert res.replacement[0].summary["p50"] == pytest.approx(0, abs=5)
    assert res.replacement[8].summary["p99"] > 1000
    hbm = levels[levels["access"] == "hbm"].sort_values("level")
    assert hbm["p50"].is_monotonic_increasing
    assert res.to_ns(hbm["p50"].iloc[0]) == pytest.approx(650 / 1.98, rel=0.02)

    # The replacement delay: each re-touch's latency minus the unloaded L2-hit latency (the
    # median re-touch at level 0, about 280 cycles here); HBM chases have none.
    idle = frame.loc[(frame["access"] == "retouch") & (frame["level"] == 0), "latency_cycles"].to_numpy()
    base = float(np.median(idle))
    assert res.replacement_baseline[1] == pytest.approx(base) and base == pytest.approx(280, rel=0.01)
    for level in range(9):
        rt = frame.loc[(frame["access"] == "retouch") & (frame["level"] == level), "latency_cycles"].to_numpy()
        assert res.replacement[level].summary["p50"] == pytest.approx(float(np.median(rt)) - base, abs=1e-3)
        assert res.replacement[level].summary["count"] == rt.size
    # Without an unloaded level (and no ladder to take the L2 hit from) there is no baseline.
    later = _analysed(tmp_path, "loaded-busy", {"loaded": frame[frame["level"] > 0]})
    assert later.replacement_baseline is None and later.replacement == {}
    assert later.loaded["evicted_fraction"].isna().all()


def test_bandwidth_against_the_memcpy_of_the_same_run(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({"kernel": ["copy", "memcpy", "memcpy"], "achieved_gbs": [4100.0, 4200.0, 4000.0]})
    bw = _analysed(tmp_path, "bw", {"bandwidth": frame}).bandwidth.set_index("kernel")
    assert bw.loc["copy", "fraction_of_memcpy"] == pytest.approx(4100 / 4200)
    assert bw.loc["memcpy", "fraction_of_memcpy"] == pytest.approx(1.0)
