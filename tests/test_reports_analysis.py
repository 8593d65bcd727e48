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
    """Issue 10.8 on the synthetic run: the replacement delay per level is a missed re-touch's
    latency minus the same-load hot-set hit, the residency time falls as the load rises."""
    fit = res.loaded_fits[("hbm", "p50")]
    assert fit.l0 == pytest.approx(648, rel=0.03) and fit.u_max == pytest.approx(0.97, rel=0.03)
    assert fit.r2 > 0.99
    lv = res.replacement_levels.set_index("level")
    assert list(lv.index) == list(range(10))
    assert lv.loc[0, "misses"] == 0 and 0 not in res.replacement  # nothing evicts at idle
    assert lv.loc[0, "residency_bound"] == ">" and lv.loc[0, "residency_ns"] >= 1e6
    assert sorted(res.replacement) == list(range(1, 10))
    assert lv.loc[9, "evicted_fraction"] > lv.loc[1, "evicted_fraction"] > 0
    assert lv.loc[9, "residency_ns"] < lv.loc[3, "residency_ns"] < lv.loc[1, "residency_ns"] < 1e6
    # issue 20.3: 8 lines a round put the shortest age (~3 us) below the top level's turnover, so
    # the top level's residency is measured ("="), not only bounded ("<")
    assert res.residency[9]["age_ns"].iloc[0] < 5_000 and res.residency[9]["resident_fraction"].iloc[0] > 0.5
    assert lv.loc[9, "residency_bound"] == "="
    # the delay is measured from the same-load hit median, not from an idle one
    frame = open_run(res.path).read_table("loaded")
    for level in (1, 9):
        hot = frame.loc[(frame["access"] == "hot") & (frame["level"] == level), "latency_cycles"].to_numpy()
        assert lv.loc[level, "hit_p50"] == pytest.approx(float(np.median(hot)), rel=1e-6)
        assert res.replacement[level].summary["p50"] > 200  # an HBM access over an L2 hit
    assert res.replacement_baseline[0].startswith("median hot-set hit latency under the same load")
    rt = res.loaded[res.loaded["access"] == "retouch"].set_index("level")["evicted_fraction"]
    assert rt[9] == pytest.approx(lv.loc[9, "evicted_fraction"])
    from sitsprof.reports.run_report import replacement_figures

    figs, tables = replacement_figures(res)
    assert [f.title for f in figs] == ["Replacement delay per load level (CDF)", "L2 residency per load level"]
    assert tables[1].title == "L2 residency time per load level" and len(tables[1].rows) == 10


def test_synthetic_loaded_table_has_the_probes_raw_columns(run_path):
    """Issue 10.8: the synthetic run writes probes/loaded with the launchers' columns, in their order."""
    from sitsprof.probes.tables import LOADED_COLUMNS

    frame = open_run(run_path).read_table("loaded")
    assert list(frame.columns) == list(LOADED_COLUMNS)
    assert set(frame["access"]) == {"hbm", "hot", "retouch"} and frame["valid"].all()
    rt = frame[frame["access"] == "retouch"]
    assert (rt["age_ns"] > rt["interval_ns"]).all()
    assert (frame.loc[frame["access"] != "retouch", "interval_ns"] == -1).all()


def test_l1_bypassing_ladder_has_its_own_tiers(res):
    assert [t.name for t in res.tiers_cg][0] == "l2_near"
    assert res.tiers_cg[0].dist.summary["p50"] == pytest.approx(282, rel=0.05)
    assert res.ladder_cg is not res.ladder


def test_samplers_and_clock_drift(res):
    assert set(res.samplers) == {"nvml", "gpm"}
    assert set(res.samplers["nvml"]) == {"sm_clock_mhz", "memory_clock_mhz", "power_w", "temperature_c"}
    xs, ys = res.samplers["nvml"]["sm_clock_mhz"]
    # seconds from the phases' origin: the first bucket's min/max row, within its first 5 rows (16 ms each)
    assert xs.size <= 1500 and ys.size == xs.size and 0.0 <= xs[0] < 0.1
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


def _recorded_loaded(rng, levels=9, lines=32, reps=4, far_share=0.4, lifetime_at_full_ns=20_000.0,
                     hot_far_share=None):
    """A loaded table with the probe's raw columns: hbm, hot (near 280 / far 500 cycles; far in
    `hot_far_share` of the samples, default `far_share`) and retouch rows whose lines survive
    exp(-age / lifetime) (lifetime ~ 1 / load), a survivor far in `far_share` of them; the truth
    of each re-touch (evicted or not) is returned beside it."""
    import pandas as pd

    from sitsprof.probes.tables import chase_frame

    intervals = np.array([0, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000], dtype=np.int64)
    frames, truth = [], {}
    for level in range(levels):
        frac = level / (levels - 1)

        def hits(n, share=far_share):
            return np.where(rng.random(n) < share, 500.0, 280.0) * (1 + rng.normal(0, 0.02, n))

        def misses(n, frac=frac):
            return 650 * (1 + 0.5 * frac ** 3) * (1 + rng.normal(0, 0.02, n))

        iv = np.repeat(np.tile(intervals, reps), lines)
        age = iv + rng.uniform(4_000, 8_000, iv.size)
        life = lifetime_at_full_ns / frac if frac else np.inf
        evicted = rng.random(iv.size) >= np.exp(-age / life)
        truth[level] = (evicted, age)
        retouch = np.where(evicted, misses(iv.size), hits(iv.size))
        common = dict(level=level, target_fraction=frac, throttle_ns=0, achieved_gbs=4000 * frac,
                      bandwidth_fraction=frac, probe_sm=7, attempt=0, valid=True, invalid_reason="")
        frames.append(chase_frame(misses(400) + 6, 6, MHZ, access="hbm", interval_ns=-1, **common))
        hot = hits(400, far_share if hot_far_share is None else hot_far_share)
        frames.append(chase_frame(hot + 6, 6, MHZ, access="hot", interval_ns=-1, **common))
        frames.append(chase_frame(retouch + 6, 6, MHZ, access="retouch",
                                  per_sample={"interval_ns": iv, "age_ns": age.astype(np.float32)}, **common))
    frame = pd.concat(frames, ignore_index=True)
    frame["age_ns"] = frame["age_ns"].astype(np.float32)
    return frame, truth


def test_load_levels_from_a_recorded_loaded_table(tmp_path):
    """Issue 10.8: re-touches are classified against the same-load hit (hot set) and miss (HBM)
    distributions, so far-L2 hits (500 cycles, 40 % of the lines here) are hits, not evictions
    (the old fixed cut at sqrt(idle hit x HBM) ~ 427 cycles counted every one of them); the
    delay is a missed re-touch minus the same-load hit median; the residency time is where the
    share of surviving lines falls through 1/2."""
    rng = np.random.default_rng(3)
    frame, truth = _recorded_loaded(rng)
    res = _analysed(tmp_path, "loaded", {"loaded": frame})
    levels = res.loaded
    assert len(levels) == 27 and set(levels["access"]) == {"hbm", "hot", "retouch"}
    lv = res.replacement_levels.set_index("level")
    for level, (evicted, _age) in truth.items():
        # a miss is at or above the same-load HBM p1, so about 1 % of real misses fall in the far band
        assert evicted.mean() * 0.95 - 0.01 <= lv.loc[level, "evicted_fraction"] <= evicted.mean() + 0.005, level
        assert lv.loc[level, "separation"] > 0.9
        assert 500 < lv.loc[level, "cut"] < lv.loc[level, "miss_p50"]
    assert lv.loc[0, "misses"] == 0 and lv.loc[0, "evicted_fraction"] == 0  # idle: the far hits are hits
    hbm = levels[levels["access"] == "hbm"].sort_values("level")
    assert hbm["p50"].is_monotonic_increasing
    assert res.to_ns(hbm["p50"].iloc[0]) == pytest.approx(650 / 1.98, rel=0.02)
    # delay: each missed re-touch minus the median hot-set latency of its level
    for level in (4, 8):
        sub = frame[frame["level"] == level]
        hot = np.median(sub.loc[sub["access"] == "hot", "latency_cycles"].to_numpy())
        rt = sub.loc[sub["access"] == "retouch", "latency_cycles"].to_numpy()
        want = np.sort(rt[rt > lv.loc[level, "cut"]] - hot)
        got = res.replacement[level]
        assert got.summary["count"] == want.size and got.summary["p50"] == pytest.approx(np.median(want), abs=1e-3)
    # residency: the model's half-life (in line age) is lifetime x ln 2 = 20 us / fraction x 0.69
    for level in (4, 8):
        frac = level / 8
        assert lv.loc[level, "residency_bound"] == "="
        assert lv.loc[level, "residency_ns"] == pytest.approx(20_000 / frac * np.log(2), rel=0.2)
    assert lv.loc[0, "residency_bound"] == ">"
    curve = res.residency[8]
    assert curve["age_ns"].is_monotonic_increasing and curve["resident_fraction"].iloc[-1] < 0.05


def test_far_l2_retouches_are_a_band_of_their_own_never_evictions():
    """Issue 20.3: the hot set is re-touched so often that it is served from the near L2 (280
    cycles here, no far samples), while half the surviving re-touched lines are far-partition
    hits (500). Each re-touch is checked against its own truth: no survivor is counted as evicted,
    every far survivor is in the far band (between the hot-set p99 and the HBM p1), and the band
    is reported per level. The control: the single balanced cut, midway between the references,
    would have counted every far survivor as an eviction."""
    from sitsprof.reports.replacement import balanced_threshold, replacement_levels

    rng = np.random.default_rng(11)
    frame, truth = _recorded_loaded(rng, far_share=0.5, hot_far_share=0.0)
    levels = {lv.level: lv for lv in replacement_levels(frame)}
    assert sorted(levels) == sorted(truth)
    for level, (evicted, _age) in truth.items():
        lv = levels[level]
        survivor_far = ~evicted & (lv.retouch > 400)
        assert survivor_far.sum() > 0.3 * (~evicted).sum(), level  # the model put far survivors here
        assert not (lv.missed & ~evicted).any(), level               # no survivor counted as evicted
        assert lv.far[survivor_far].all(), level                     # each far survivor is in the far band
        assert not (lv.far & ~lv.missed & (lv.retouch <= lv.hit_cut)).any()
        row = lv.row()
        assert row["hit_cut"] == pytest.approx(np.quantile(lv.hit, 0.99))
        assert row["cut"] == pytest.approx(np.quantile(lv.miss_reference, 0.01))
        assert row["far_band"] == int(lv.far.sum()) >= int(survivor_far.sum())
        assert 480 < row["far_p50"] < 520
        assert evicted.mean() * 0.95 - 0.01 <= row["evicted_fraction"] <= evicted.mean()
        if level <= 2:  # the old rule's cut, midway to HBM, lies below 500 up to here: far = evicted
            old_cut = balanced_threshold(lv.hit, lv.miss_reference)[0]
            assert (lv.retouch[survivor_far] > old_cut).mean() > 0.8, level


def test_probe_figures_print_the_bands_of_the_synthetic_run(res):
    """Issue 20.3: `probe figures` prints per level the hot-set p99, the HBM p1, the cuts, the
    separation and the far band; at idle (nothing evicts) the far-L2 re-touches are all in the
    band and none is evicted."""
    from sitsprof.reports.figures import check_figures, format_figures

    fig = check_figures(res)
    bands = {b["level"]: b for b in fig["loaded"]["bands"]}
    lv = res.replacement_levels.set_index("level")
    assert sorted(bands) == list(range(10))
    assert bands[0]["misses"] == 0 and bands[0]["far_band"] > 0.2 * bands[0]["retouches"]
    assert 480 < bands[0]["far_p50"] < 560
    for level, b in bands.items():
        assert b["hit_p99"] < b["far_p50"] < b["miss_p1"], level
        assert b["far_band"] == lv.loc[level, "far_band"] and b["misses"] == lv.loc[level, "misses"]
    lines = format_figures(fig)
    head = lines.index("level  hot p99  hbm p1  cut(s)       separation  re-touches  far band (p50)  evicted")
    assert "never counted as evictions" in lines[head - 1]
    b = bands[0]
    assert lines[head + 1].split() == ["0", f"{b['hit_p99']:.0f}", f"{b['miss_p1']:.0f}", f"{b['hit_cut']:.0f}", "/",
                                       f"{b['cut']:.0f}", f"{b['separation']:.2f}", str(b["retouches"]),
                                       str(b["far_band"]), f"({b['far_p50']:.0f})", "0"]


def test_invalid_loaded_chases_are_excluded_and_counted(tmp_path):
    """Issue 10.7: rows of a chase whose window was not inside the saturator's (valid = False)
    are left out of every figure; a level left without a valid chase of some access is excluded
    whole; the notes and the figures check say how many."""
    from sitsprof.reports.figures import check_figures, format_figures

    rng = np.random.default_rng(5)
    frame, _ = _recorded_loaded(rng, levels=6)
    # level 2: the first HBM attempt ran before the saturator (its latency the idle one), a rerun is valid
    bad = frame[(frame["level"] == 2) & (frame["access"] == "hbm")].copy()
    bad["attempt"], bad["valid"] = 0, False
    bad["invalid_reason"] = "the saturator had not started when the probe's window began"
    bad["latency_cycles"] = 100.0
    frame.loc[(frame["level"] == 2) & (frame["access"] == "hbm"), "attempt"] = 1
    # level 4: its hot set never had a valid window
    sel = (frame["level"] == 4) & (frame["access"] == "hot")
    frame.loc[sel, "valid"] = False
    frame.loc[sel, "invalid_reason"] = "a saturator block stopped before the probe's window ended"
    import pandas as pd

    frame = pd.concat([frame, bad], ignore_index=True)
    res = _analysed(tmp_path, "invalid", {"loaded": frame})
    assert sorted(res.loaded["level"].unique()) == [0, 1, 2, 3, 5]
    assert res.loaded_excluded_levels == [4] and len(res.loaded_invalid) == 2
    hbm2 = res.loaded[(res.loaded["access"] == "hbm") & (res.loaded["level"] == 2)]
    assert float(hbm2["p50"].iloc[0]) > 600  # the invalid attempt's 100-cycle rows are not in it
    assert any("2 of 19 chases invalid" in n for n in res.notes), res.notes
    assert any("1 level(s) excluded" in n for n in res.notes), res.notes
    fig = check_figures(res)
    assert fig["loaded"]["invalid_chases"] == 2 and fig["loaded"]["excluded_levels"] == [4]
    assert any("2 chase(s) invalid" in line for line in format_figures(fig))


def test_hbm_compared_in_ns_at_each_chase_clock(tmp_path):
    """Issue 10.9: with the clocks unlocked (here the SM ran at 1500 MHz, not the published 1980)
    the HBM tier's cycle count is off the published one, but its ns, each chase converted at its
    own clock, are compared too, and agree."""
    import pandas as pd

    from sitsprof.probes.tables import chase_frame
    from sitsprof.reports.figures import check_figures, format_figures

    rng = np.random.default_rng(2)
    frames = []
    for fp, ns in [(16 * KiB, 21), (64 * KiB, 21), (1 * MiB, 190), (4 * MiB, 190), (32 * MiB, 260),
                   (45 * MiB, 260), (256 * MiB, 330), (512 * MiB, 330), (1024 * MiB, 330)]:
        cycles = ns * 1.5 * (1 + rng.normal(0, 0.01, 256))
        frames.append(chase_frame(cycles + 6, 6, 1500.0, footprint_bytes=fp, variant="ca", stride_bytes=128,
                                  chase_mhz=1500.0, clock_source="chase"))
    res = _analysed(tmp_path, "unlocked", {"latency": pd.concat(frames, ignore_index=True)},
                    meta={"sm_clock_mhz": 1500.0, "clocks": {"mode": "none"}})
    fig = check_figures(res)
    hbm = next(t for t in fig["tiers"] if t["tier"] == "hbm")
    assert not hbm["within"]  # ~495 cycles against 610-690
    assert fig["hbm_ns"]["measured_ns"] == pytest.approx(330, rel=0.02) and fig["hbm_ns"]["within"]
    assert any(line.startswith("hbm") and " ns " in line for line in format_figures(fig))


def test_calibration_carries_the_delay_distributions_and_residency(run_path):
    """Issue 10.8: the calibration's replacement_delay has, per level, the same-load hit, the
    delay distribution (null where nothing was evicted) and the residency curve and time; the
    schema validates it and refuses a resident share above 1."""
    import copy

    from sitsprof.calibration import validate_calibration
    from sitsprof.calibration.errors import CalibrationError
    from sitsprof.reports.fromrun import calibration_from_run

    cal = calibration_from_run(run_path)
    validate_calibration(cal)
    rd = cal["replacement_delay"]
    assert rd["method"] == "docs/replacement-delay.md" and len(rd["levels"]) == 10
    idle, busy = rd["levels"][0], rd["levels"][-1]
    assert idle["delay"] is None and idle["residency"]["bound"] == ">"
    assert busy["delay"]["samples"] == busy["misses"] > 0 and busy["delay"]["histogram"]["counts"]
    assert busy["residency"]["time_ns"] < idle["residency"]["time_ns"]
    assert busy["hit_cycles"] < busy["cut_cycles"] < busy["miss_cycles"] * 1.1
    broken = copy.deepcopy(cal)
    broken["replacement_delay"]["levels"][3]["residency"]["curve"][0]["resident_fraction"] = 1.5
    with pytest.raises(CalibrationError, match=r"replacement_delay.levels\[3\].residency.curve\[0\]"):
        validate_calibration(broken)


def test_bandwidth_against_the_memcpy_of_the_same_run(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({"kernel": ["copy", "memcpy", "memcpy"], "achieved_gbs": [4100.0, 4200.0, 4000.0]})
    bw = _analysed(tmp_path, "bw", {"bandwidth": frame}).bandwidth.set_index("kernel")
    assert bw.loc["copy", "fraction_of_memcpy"] == pytest.approx(4100 / 4200)
    assert bw.loc["memcpy", "fraction_of_memcpy"] == pytest.approx(1.0)
