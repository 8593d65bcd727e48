"""Probe launchers on a real GPU (`-m gpu`; skipped with the reason where there is none).

Small problems only: each test runs in seconds. The quick suite itself is `sitsprof run
--suite quick` (last test), whose figures `sitsprof probe figures RUN` prints.
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

KiB, MiB, GiB = 1024, 1024**2, 1024**3


@pytest.fixture(scope="module")
def probes():
    pytest.importorskip("cupy")
    from sitsprof.probes.gpu import Probes

    p = Probes(0)
    p.calibrate(spin_ns=10_000_000, timer_samples=2048)
    return p


def test_modules_compile_with_cupy(probes):
    from sitsprof.probes.gpu import load_module
    from sitsprof.probes.kernels import KERNEL_FILES

    for name, entries in KERNEL_FILES.items():
        module = load_module(name)
        for entry in entries:
            assert module.get_function(entry) is not None


def test_clock_and_timer_overhead(probes):
    assert 500 < probes.mhz < 3000
    assert 0 <= probes.overhead["median"] < 100


def test_ring_built_on_the_gpu_is_one_cycle(probes):
    from sitsprof.probes import tables as A

    cp = probes.cp
    links, stride, skew = 4096, 2 * MiB, 17 * 128
    buf = cp.zeros(links * stride, dtype=cp.uint8)
    start = probes.build_ring(buf, links, stride, skew, seed=5)
    words = buf.view(cp.uint64)
    offsets = A.link_offset(np.arange(links), stride, skew).astype(np.int64)
    values = words[cp.asarray(offsets // 8)].get().astype(np.int64)
    base = int(buf.data.ptr)
    nxt = np.searchsorted(offsets, values - base)
    assert np.array_equal(offsets[nxt], values - base)
    seen = A.walk(nxt, int(np.searchsorted(offsets, start - base)), links)
    assert np.unique(seen).size == links


def test_small_ladder_separates_l1_l2_and_hbm(probes):
    from sitsprof.probes.plan import ChaseSweep, LatencyPlan

    plan = LatencyPlan(ChaseSweep([16 * KiB, 4 * MiB, 1 * GiB], samples=1024, warm_full_bytes=50 * MiB))
    tables = probes.latency(plan)
    med = {(v, fp): float(np.median(sub["latency_cycles"]))
           for name, frame in tables.items() for (v, fp), sub in frame.groupby(["variant", "footprint_bytes"])}
    assert med[("ca", 16 * KiB)] < 100                      # L1 hit
    assert med[("cg", 16 * KiB)] > 2 * med[("ca", 16 * KiB)]  # .cg bypasses the L1
    assert med[("cg", 1 * GiB)] > 1.5 * med[("cg", 4 * MiB)]  # HBM beyond the L2


def test_copy_kernel_against_memcpy(probes):
    from sitsprof.probes.plan import BandwidthPlan, StreamConfig

    sms = probes.limits.sm_count
    frame = probes.bandwidth(BandwidthPlan(1 * GiB, [StreamConfig(active_sms=sms), StreamConfig(active_sms=4)],
                                           kernels=("read", "write", "copy"), reps=3))
    best = frame.groupby("kernel")["achieved_gbs"].max()
    assert best["copy"] >= 0.95 * best["memcpy"], best.to_dict()
    small = frame[(frame["active_sms"] == 4) & (frame["kernel"] == "read")]
    assert (small["sms_used"] == 4).all()  # the blocks on the other SMs left
    assert best["read"] > 4 * small["achieved_gbs"].max()  # and 4 SMs move far less than all


def test_loaded_latency_keeps_the_probe_sm_free(probes):
    from sitsprof.probes.plan import LoadedPlan

    plan = LoadedPlan(hbm_footprint=512 * MiB, retouch_bytes=4 * MiB, saturator_bytes=1 * GiB,
                      targets=[0.5, 1.0], samples=1024, calibration_sleeps_ns=[0, 400, 1600, 6400])
    out = probes.loaded(plan)
    table = out["loaded"]
    valid = table[table["valid"]]
    assert set(zip(valid["level"], valid["access"])) >= {(lv, a) for lv in (0, 1, 2) for a in ("hbm", "retouch")}
    assert valid["probe_sm"].nunique() == 1                  # every level on the baseline's SM
    loaded = valid[valid["level"] > 0]
    assert (loaded["saturator_blocks"] > 0).all()
    assert ((loaded["saturator_start_ns"] <= loaded["probe_start_ns"])
            & (loaded["probe_end_ns"] <= loaded["saturator_end_ns"])).all()  # inside the saturator's window
    per_level = valid.groupby("level")["achieved_gbs"].first()
    assert per_level[0] == 0 and per_level[2] > per_level[1] > 0
    hbm = valid[valid["access"] == "hbm"].groupby("level")["latency_cycles"].median()
    hot = valid[valid["access"] == "hot"].groupby("level")["latency_cycles"].median()
    assert hbm[2] >= hbm[0] and hot[0] < hbm[0]


def test_chase_kernels_prefer_l1_and_convert_per_chase(probes):
    """Issue 10.6/10.9 on the GPU: carveout 0 read back from the driver; each chase's own clock."""
    from sitsprof.probes.gpu import L1_KERNELS
    from sitsprof.probes.plan import ChaseSweep, LatencyPlan

    for name in ("chase_ca", "chase_cg"):
        assert name in L1_KERNELS
        assert probes.kernel("chase", name).attributes["preferred_shared_memory_carveout"] == 0
    frame = probes.latency(LatencyPlan(ChaseSweep([16 * KiB, 64 * MiB], samples=1024, warm_full_bytes=128 * MiB)))
    lat = frame["latency"]
    assert (lat["clock_source"] == "chase").all()
    assert lat["chase_mhz"].between(0.5 * probes.mhz, 1.5 * probes.mhz).all()


def test_quick_suite_writes_a_complete_run(tmp_path):
    from sitsprof.cli.main import main
    from sitsprof.collectors.rundir import open_run

    code = main(["run", "--suite", "quick", "--clocks", "none", "--out", str(tmp_path), "--name", "quick"])
    assert code == 0
    run = open_run(tmp_path / "quick")
    assert run.complete
    assert {"latency", "latency_cg", "tlb", "bandwidth", "loaded", "loaded_calibration"} == set(run.tables("probe"))
