"""Launch planning: sizes, sweeps, SM placement and memory checks, all before any launch."""
from __future__ import annotations

import pytest

from sitsprof.common.sizes import GiB, KiB, MiB, SizeError, format_size, parse_size
from sitsprof.probes.errors import PlanError
from sitsprof.probes.plan import (
    TLB_SKEW,
    BandwidthPlan,
    ChaseSweep,
    DeviceLimits,
    LatencyPlan,
    LoadedPlan,
    StreamConfig,
    geometric_sizes,
    require_hopper,
)
from sitsprof.probes.suite import make_suite

H200 = DeviceLimits(name="NVIDIA H200", compute_capability=(9, 0), sm_count=132, l2_bytes=50 * MiB,
                    memory_bytes=141 * GiB, free_bytes=140 * GiB)
A100 = DeviceLimits(name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0), sm_count=108, l2_bytes=40 * MiB,
                    memory_bytes=80 * GiB, free_bytes=79 * GiB)


@pytest.mark.parametrize("text,value", [("16KiB", 16 * KiB), ("2 MiB", 2 * MiB), ("4G", 4 * GiB),
                                        ("1.5GiB", 3 * GiB // 2), ("4096", 4096), (128, 128), ("64kb", 64 * KiB)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "12 parsecs", "-1KiB", "KiB"])
def test_parse_size_rejects(text):
    with pytest.raises(SizeError, match="cannot read size"):
        parse_size(text)


def test_format_size():
    assert format_size(16 * KiB) == "16 KiB"
    assert format_size(3 * GiB // 2) == "1.5 GiB"
    assert format_size(100) == "100 B"


def test_geometric_sizes_cover_the_range_in_lines():
    sizes = geometric_sizes(16 * KiB, 4 * GiB, per_octave=4)
    assert sizes[0] == 16 * KiB and sizes[-1] == 4 * GiB
    assert all(s % 128 == 0 for s in sizes)
    assert len(sizes) == 18 * 4 + 1
    ratios = [b / a for a, b in zip(sizes, sizes[1:])]
    assert all(1.15 < r < 1.22 for r in ratios)
    assert geometric_sizes(16 * KiB, 20 * KiB, 1) == [16 * KiB, 20 * KiB]  # the top is always included
    with pytest.raises(PlanError):
        geometric_sizes(4 * KiB, 2 * KiB)


def test_footprint_beyond_free_memory_is_refused_with_the_numbers():
    plan = LatencyPlan(ChaseSweep(geometric_sizes(16 * KiB, 400 * GiB, 1)))
    with pytest.raises(PlanError, match=r"needs \d+ GiB .* has 140 GiB free.*lower the largest footprint"):
        plan.validate(H200)
    tight = DeviceLimits(**{**H200.__dict__, "free_bytes": 4 * GiB})
    with pytest.raises(PlanError, match="4 GiB free"):
        LatencyPlan(ChaseSweep([4 * GiB])).validate(tight)
    LatencyPlan(ChaseSweep([2 * GiB])).validate(tight)  # 2 GiB + its ring building fit beside the reserve


def test_sm_count_beyond_the_device_is_refused():
    plan = BandwidthPlan(1 * GiB, [StreamConfig(active_sms=133)])
    with pytest.raises(PlanError, match="133 SMs asked for, but GPU 0 .* has 132 SMs"):
        plan.validate(H200)
    with pytest.raises(PlanError, match="at least 1"):
        BandwidthPlan(1 * GiB, [StreamConfig(active_sms=0)]).validate(H200)
    loaded = LoadedPlan(512 * MiB, 64 * KiB, 1 * GiB, saturator=StreamConfig(active_sms=200))
    with pytest.raises(PlanError, match="saturator: 200 SMs"):
        loaded.validate(H200)


def test_threads_that_do_not_fit_an_sm():
    with pytest.raises(PlanError, match="do not fit on one SM"):
        BandwidthPlan(1 * GiB, [StreamConfig(active_sms=4, blocks_per_sm=8, threads=512)]).validate(H200)
    with pytest.raises(PlanError, match="beyond the 32 an SM holds"):
        BandwidthPlan(1 * GiB, [StreamConfig(active_sms=4, blocks_per_sm=64, threads=32)]).validate(H200)
    with pytest.raises(PlanError, match="multiple of 32"):
        BandwidthPlan(1 * GiB, [StreamConfig(active_sms=4, threads=100)]).validate(H200)


def test_non_hopper_gpu_for_hopper_only_counters():
    require_hopper(H200, "GPM")
    with pytest.raises(PlanError, match=r"GPM needs a Hopper GPU .*A100.*compute capability 8.0"):
        require_hopper(A100, "GPM")
    make_suite("quick", A100).validate(A100)  # the probes themselves run on any sm_70+


def test_stream_vectors_are_whole_passes():
    cfg = StreamConfig(active_sms=16, blocks_per_sm=4, threads=512)
    assert cfg.grid(132) == 528 and cfg.blocks == 64  # launched everywhere, 64 blocks work
    n = cfg.vectors(1 * GiB, 132)  # grid-stride (saturator): whole passes of the launched grid
    unit = 528 * 512 * 4
    assert n % unit == 0 and n * 16 <= 1 * GiB and 1 * GiB - n * 16 < unit * 16
    m = cfg.claim_vectors(1 * GiB)  # claimed chunks (bandwidth.cu): whole chunks of one block
    assert m % (512 * 4 * 16) == 0 and m * 16 == 1 * GiB


def test_chase_sweep_links_and_warm_up():
    sweep = ChaseSweep([16 * KiB, 64 * MiB], samples=2048, warm_full_bytes=50 * MiB)
    assert sweep.links(16 * KiB) == 128
    assert sweep.warm(16 * KiB) == 128          # whole ring once: cached tiers are warm
    assert sweep.warm(64 * MiB) == 2048          # past the L2: just enough to settle
    with pytest.raises(PlanError, match="fewer than 2 links"):
        ChaseSweep([128]).validate(H200)
    with pytest.raises(PlanError, match="skew"):
        ChaseSweep([4 * MiB], stride=2 * MiB, skew=100).validate(H200)


def test_loaded_plan_checks_the_sets_against_the_l2():
    ok = LoadedPlan(512 * MiB, 4 * MiB, 1 * GiB).for_device(H200)
    assert ok.saturator.active_sms == 132 and ok.levels == 9
    assert ok.saturator.blocks_per_sm * ok.saturator.threads + 32 <= 2048  # room for the probe's block
    ok.validate(H200)
    with pytest.raises(PlanError, match="must fit well inside the L2"):
        LoadedPlan(512 * MiB, 40 * MiB, 1 * GiB).for_device(H200).validate(H200)
    with pytest.raises(PlanError, match="at least twice"):
        LoadedPlan(64 * MiB, 4 * MiB, 1 * GiB).for_device(H200).validate(H200)
    with pytest.raises(PlanError, match="use read or copy"):
        LoadedPlan(512 * MiB, 4 * MiB, 1 * GiB, saturator_kind="write").for_device(H200).validate(H200)
    copy = LoadedPlan(512 * MiB, 4 * MiB, 1 * GiB, saturator_kind="copy")
    assert copy.need_bytes - LoadedPlan(512 * MiB, 4 * MiB, 1 * GiB).need_bytes == 1 * GiB  # a destination
    with pytest.raises(PlanError, match="fractions"):
        LoadedPlan(512 * MiB, 4 * MiB, 1 * GiB, targets=[0.5, 1.5]).for_device(H200).validate(H200)
    with pytest.raises(PlanError, match="fewer than the 1920 fresh lines"):  # 10 intervals x 24 reps x 8 lines
        LoadedPlan(512 * MiB, 64 * KiB, 1 * GiB).for_device(H200).validate(H200)


def test_retouch_rounds_are_short_enough_to_see_the_top_levels_turnover():
    """Issue 20.3: a round primes 4-8 lines (the shortest age is about that many HBM accesses,
    ~0.3-0.8 us each: a few us, under the ~15 us an H200's 60 MiB L2 takes to turn over at
    ~4 TB/s), with more rounds so every interval keeps as many re-touches as 6 x 32 did."""
    plan = LoadedPlan(512 * MiB, 4 * MiB, 1 * GiB)
    assert 4 <= plan.retouch_lines <= 8
    assert plan.retouch_samples // len(plan.intervals_ns) >= 6 * 32
    assert plan.retouch_lines * 0.8e-6 < 60 * MiB / 4e12  # the slowest prime still inside the turnover
    # the whole re-touch probe of one level stays well inside the saturator's own 2 s limit
    assert sum(plan.round_intervals) * 1e-9 + 2 * plan.retouch_samples * 0.8e-6 < 0.1 * plan.max_ns * 1e-9


#: An H200 as cudaDeviceProp describes it (l2CacheSize 60 MiB; 228 KiB of shared memory per SM).
H200_PROPS = DeviceLimits(name="NVIDIA H200", compute_capability=(9, 0), sm_count=132, l2_bytes=60 * MiB,
                          memory_bytes=141 * GiB, free_bytes=140 * GiB, shared_per_sm=228 * KiB,
                          shared_per_block_optin=227 * KiB, reserved_shared_per_block=KiB)


@pytest.mark.parametrize("shared_per_sm,bps", [(228 * KiB, 3), (164 * KiB, 3), (228 * KiB, 2), (100 * KiB, 1)])
def test_saturator_shared_memory_keeps_a_place_for_the_probe(shared_per_sm, bps):
    """Issue 10.7: the saturator's dynamic shared memory lets exactly blocks_per_sm of its blocks
    onto an SM and leaves the probe's block (its shared memory and the per-block reservation) room
    beside them on any SM, computed from the device's shared memory per SM."""
    dev = DeviceLimits(**{**H200_PROPS.__dict__, "shared_per_sm": shared_per_sm,
                          "shared_per_block_optin": shared_per_sm - KiB})
    plan = LoadedPlan(512 * MiB, 4 * MiB, 1 * GiB, saturator=StreamConfig(active_sms=0, blocks_per_sm=bps),
                      probe_shared_bytes=16392)
    dyn = plan.saturator_shared_bytes(dev, saturator_static=16)
    block = dyn + 16 + KiB  # what one saturator block takes from the SM
    assert bps * block + 16392 + KiB <= shared_per_sm       # the probe's block fits beside them
    assert (bps + 1) * block > shared_per_sm                 # one more saturator block does not
    plan.for_device(dev).validate(dev)


def test_saturator_shared_memory_unknown_or_impossible():
    no_info = DeviceLimits(**{**H200_PROPS.__dict__, "shared_per_sm": None})
    assert LoadedPlan(512 * MiB, 4 * MiB, 1 * GiB).saturator_shared_bytes(no_info) == 0
    tiny = DeviceLimits(**{**H200_PROPS.__dict__, "shared_per_sm": 16 * KiB})
    with pytest.raises(PlanError, match="cannot keep to 3 blocks per SM beside the probe"):
        LoadedPlan(512 * MiB, 4 * MiB, 1 * GiB).for_device(tiny).validate(tiny)
    # the default probe size comes from the kernel text (two chase_timed stamp arrays)
    from sitsprof.probes.plan import probe_static_smem

    assert probe_static_smem() == 16392  # what ptxas -v reports for retouch_probe (test_probes_kernels)


def test_quick_ladder_is_dense_over_the_l2_band_and_sized_from_the_device_l2():
    """Issue 10.12: at least 4 ladder footprints per octave from 16 to 128 MiB (the far-L2 band,
    about 38-60 MB, gets several points), and the L2 size used for planning is the device's."""
    from sitsprof.probes.assumed import assumed_h200

    plan = make_suite("quick", H200_PROPS)
    fps = plan.latency.sweep.footprints
    for lo in (16 * MiB, 32 * MiB, 64 * MiB):
        assert sum(lo <= f < 2 * lo for f in fps) >= 4, [f / MiB for f in fps if lo <= f < 2 * lo]
    assert sum(38 * MiB <= f <= 60 * MiB for f in fps) >= 3
    assert plan.l2_bytes == 60 * MiB and plan.latency.sweep.warm_full_bytes == 120 * MiB
    assert plan.loaded.hbm_footprint >= 8 * 60 * MiB
    h100 = make_suite("quick", H200)  # 50 MiB: the estimate follows the device's L2, not a table
    assert h100.l2_bytes == 50 * MiB
    assert plan.estimate_seconds()["latency"] > h100.estimate_seconds()["latency"]
    assert assumed_h200().l2_bytes == 60 * MiB and assumed_h200().shared_per_sm == 228 * KiB
    plan.validate(H200_PROPS)


@pytest.mark.parametrize("suite", ["quick", "full"])
def test_suites_fit_an_h200_and_meet_the_brief(suite):
    plan = make_suite(suite, H200)
    plan.validate(H200)
    fps = plan.latency.sweep.footprints
    assert fps[0] == 16 * KiB and fps[-1] >= 1 * GiB
    assert plan.loaded.levels >= 9 and max(plan.loaded.targets) == 1.0
    strides = [s.stride for s in plan.tlb.sweeps]
    assert strides[:2] == [2 * MiB, 32 * MiB]
    assert all(s.skew == TLB_SKEW for s in plan.tlb.sweeps)
    assert all(fp % s.stride == 0 for s in plan.tlb.sweeps for fp in s.footprints)
    sms = {c.active_sms for c in plan.bandwidth.configs}
    assert min(sms) == 1 and max(sms) == 132
    assert any(c.throttle_ns for c in plan.bandwidth.configs)
    if suite == "quick":
        assert sum(plan.estimate_seconds().values()) < 120  # the planner's own budget for 3 minutes
