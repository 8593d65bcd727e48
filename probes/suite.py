"""The probe suites (`quick`, `full`): plans sized from the device, and running them into a run directory.

The quick suite is sized to finish well inside 3 minutes on an H200 (by the planner's own
estimate from access counts and nominal latencies, `estimate_seconds`, shown by `--dry-run`;
it has not been timed on a GPU yet). Most of it is the warm-up passes of the ladder
footprints up to twice the L2, and the kernel compiles.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from sitsprof.common.sizes import GiB, KiB, MiB, format_size, parse_size
from sitsprof.pmu.device import KNOWN_DEVICES

from .plan import (
    TLB_SKEW,
    BandwidthPlan,
    ChaseSweep,
    DeviceLimits,
    LatencyPlan,
    LoadedPlan,
    StreamConfig,
    TlbPlan,
    geometric_sizes,
)

__all__ = [
    "DENSE_BAND",
    "DENSE_PER_OCTAVE",
    "FALLBACK_L2_BYTES",
    "PARTS",
    "SUITES",
    "SuitePlan",
    "dry_run_line",
    "ladder_footprints",
    "make_suite",
    "parse_parts",
    "plan_suite",
    "prepare_suite",
    "run_suite",
]

SUITES = ("quick", "full")
PARTS = ("latency", "tlb", "bandwidth", "loaded")
#: Nominal latencies (ns) used only to estimate durations for the planner, never reported.
_EST_NS = {"l2": 200.0, "hbm": 600.0, "tlb": 900.0}
#: Planning only, for a device that reports no L2 size (CuPy's cudaDeviceProp.l2CacheSize is used
#: when present): the smallest Hopper L2 of the one table of device facts (pmu.device.KNOWN_DEVICES).
FALLBACK_L2_BYTES = min(l2 for l2, _sms, _source in KNOWN_DEVICES.values())
#: The far-L2 band (about 38-60 MB on H100/H200) and its neighbours get this many ladder
#: footprints per octave in every suite.
DENSE_BAND = (16 * MiB, 128 * MiB)
DENSE_PER_OCTAVE = 4


@dataclass
class SuitePlan:
    name: str
    latency: LatencyPlan
    tlb: TlbPlan
    bandwidth: BandwidthPlan
    loaded: LoadedPlan
    parts: tuple[str, ...] = PARTS
    notes: list[str] = field(default_factory=list)
    l2_bytes: int = FALLBACK_L2_BYTES  # the device's, when it reports one

    def validate(self, device: DeviceLimits) -> None:
        for part in self.parts:
            plan = getattr(self, part)
            if part == "loaded":
                plan = plan.for_device(device)
            plan.validate(device)

    def steps(self, part: str) -> int:
        """Progress steps a part reports (one per chase, kernel setting or load level)."""
        if part == "latency":
            return len(self.latency.sweep.footprints) * len(self.latency.variants)
        if part == "tlb":
            return sum(len(s.footprints) for s in self.tlb.sweeps)
        if part == "bandwidth":
            return len(self.bandwidth.configs) * len(self.bandwidth.kernels) + 1
        return 1 + self.loaded.levels

    def describe(self) -> list[str]:
        lat, tlb, bw, ld = self.latency, self.tlb, self.bandwidth, self.loaded
        fps = lat.sweep.footprints
        return [
            f"latency: {len(fps)} footprints {format_size(fps[0])} .. {format_size(fps[-1])}, "
            f"{lat.sweep.samples} samples each, variants {', '.join(lat.variants)}",
            "tlb: " + "; ".join(f"stride {format_size(s.stride)}: {len(s.footprints)} footprints "
                                f"{format_size(s.footprints[0])} .. {format_size(s.footprints[-1])}"
                                for s in tlb.sweeps),
            f"bandwidth: {', '.join(bw.kernels)} + memcpy over {format_size(bw.buffer_bytes)}, "
            f"{len(bw.configs)} intensity settings x {bw.reps} reps",
            f"loaded: {ld.levels} levels (idle + {len(ld.targets)} targets up to {max(ld.targets):.0%}), "
            f"HBM chase over {format_size(ld.hbm_footprint)}, re-touch ring {format_size(ld.retouch_bytes)} "
            f"({len(ld.intervals_ns)} intervals {ld.intervals_ns[0] / 1e3:g}..{ld.intervals_ns[-1] / 1e3:g} us x "
            f"{ld.interval_reps}, {ld.retouch_lines} lines each), hot set {format_size(ld.hot_bytes)}, "
            f"{ld.saturator_kind} saturator over {format_size(ld.saturator_bytes)}",
        ]

    def estimate_seconds(self) -> dict[str, float]:
        """Rough duration per part from access counts and nominal latencies (planning only)."""
        s = self.latency.sweep
        l2 = self.l2_bytes
        lat = 0.0
        for fp in s.footprints:
            per = (_EST_NS["l2"] if fp <= l2 else _EST_NS["hbm"]) * 1e-9
            lat += len(self.latency.variants) * ((s.warm(fp) + s.samples) * per + 0.02)
        tlb = sum((sw.warm(fp) + sw.samples) * _EST_NS["tlb"] * 1e-9 + 0.02
                  for sw in self.tlb.sweeps for fp in sw.footprints)
        bw = self.bandwidth
        bw_s = 0.0
        for c in bw.configs:
            gbs = min(3500.0, 30.0 * c.active_sms) / (1 + c.throttle_ns / 2000.0)
            bw_s += len(bw.kernels) * (bw.reps + 1) * (2 * bw.passes * bw.buffer_bytes / (gbs * 1e9)) + 0.01
        ld = self.loaded
        retouch_s = (sum(ld.round_intervals) * 1e-9 + 2 * ld.retouch_samples * _EST_NS["hbm"] * 1e-9
                     + ld.settle_ns * 1e-9 + 0.05)
        hbm_s = ld.samples * 4 * _EST_NS["hbm"] * 1e-9 + ld.settle_ns * 1e-9 + 0.05
        ld_s = len(ld.calibration_sleeps_ns) * ld.calibration_ns * 1e-9 + ld.levels * (retouch_s + hbm_s)
        return {"latency": lat, "tlb": tlb, "bandwidth": bw_s, "loaded": ld_s, "compile": 10.0}

    def estimate_total_seconds(self) -> float:
        """The estimate for the parts this plan runs, kernel compiles included."""
        return sum(v for k, v in self.estimate_seconds().items() if k in self.parts or k == "compile")


def parse_parts(text: str) -> tuple[str, ...]:
    """'latency,tlb' -> ('latency', 'tlb'); PlanError naming any part that is not one of PARTS."""
    chosen = tuple(p.strip() for p in text.split(",") if p.strip())
    bad = [p for p in chosen if p not in PARTS]
    if bad or not chosen:
        from .errors import PlanError

        raise PlanError(f"unknown probe(s) {', '.join(bad) or '(none)'}: choose from {', '.join(PARTS)}")
    return chosen


def make_suite(name: str, device: DeviceLimits, parts: tuple[str, ...] = PARTS,
               max_footprint: int | None = None, min_footprint: int | None = None,
               per_octave: int | None = None, samples: int | None = None) -> SuitePlan:
    """The quick or full suite for `device`; the keyword overrides apply to the latency ladder."""
    if name not in SUITES:
        from .errors import PlanError

        raise PlanError(f"unknown suite {name!r}: use {' or '.join(SUITES)}")
    quick = name == "quick"
    l2 = int(device.l2_bytes or FALLBACK_L2_BYTES)
    lat_max = max_footprint or (1 * GiB if quick else 4 * GiB)
    lat_min = min_footprint or 16 * KiB
    ladder = ChaseSweep(ladder_footprints(lat_min, lat_max, per_octave or (2 if quick else 4)),
                        samples=samples or (2048 if quick else 8192), warm_full_bytes=2 * l2)
    tlb_max = 4 * GiB if quick else 16 * GiB
    tlb_sweeps = [ChaseSweep(geometric_sizes(2 * stride, tlb_max, 2 if quick else 4, align=stride), stride=stride,
                             skew=TLB_SKEW, samples=1024 if quick else 4096, warm_full_bytes=tlb_max)
                  for stride in ((2 * MiB, 32 * MiB) if quick else (2 * MiB, 32 * MiB, 512 * MiB))]
    sms = max(device.sm_count, 1)
    sm_steps = sorted({max(1, sms * k // 16) for k in (1, 2, 4, 8, 12, 16)} | {1, 2, 4})
    configs = [StreamConfig(active_sms=n) for n in sm_steps]
    configs += [StreamConfig(active_sms=sms, throttle_ns=t) for t in ((500, 2000, 8000) if quick
                                                                       else (250, 500, 1000, 2000, 4000, 8000))]
    if not quick:
        configs += [StreamConfig(active_sms=sms, blocks_per_sm=b, threads=256) for b in (1, 2, 4, 8)]
    bandwidth = BandwidthPlan(buffer_bytes=1 * GiB if quick else 4 * GiB, configs=configs,
                              reps=3 if quick else 5)
    loaded = LoadedPlan(hbm_footprint=max(8 * l2, 512 * MiB) if quick else max(16 * l2, 2 * GiB),
                        retouch_bytes=4 * MiB, saturator_bytes=max(16 * l2, 1 * GiB),
                        targets=[i / 8 for i in range(1, 9)] if quick else [i / 16 for i in range(1, 17)],
                        samples=4096 if quick else 16384)
    return SuitePlan(name, LatencyPlan(ladder), TlbPlan(tlb_sweeps), bandwidth, loaded, parts=tuple(parts), l2_bytes=l2)


def ladder_footprints(lo: int, hi: int, per_octave: int) -> list[int]:
    """The ladder's footprints: `per_octave` per doubling from lo to hi, and at least
    DENSE_PER_OCTAVE per doubling over DENSE_BAND (clipped to lo..hi), where the near/far L2
    split and the L2's edge lie."""
    sizes = set(geometric_sizes(lo, hi, per_octave))
    band_lo, band_hi = max(lo, DENSE_BAND[0]), min(hi, DENSE_BAND[1])
    if band_lo < band_hi:
        sizes |= set(geometric_sizes(band_lo, band_hi, max(per_octave, DENSE_PER_OCTAVE)))
    return sorted(sizes)


def prepare_suite(name: str, parts: tuple[str, ...], index: int = 0, overrides: dict | None = None,
                  dry_run: bool = False, hopper_only: str | None = None) -> tuple[SuitePlan, DeviceLimits]:
    """(validated plan, device) for `sitsprof run` / `probe <part>`, before anything is made or
    launched: GPU `index`'s limits (a dry run without a GPU plans against `assumed.assumed_h200`),
    `hopper_only` naming a Hopper-only feature asked for (refused elsewhere), then the plan."""
    from .assumed import planning_limits
    from .plan import require_hopper

    limits = planning_limits(index, dry_run)
    if hopper_only:
        require_hopper(limits, hopper_only)
    plan = plan_suite(name, limits, tuple(parts), overrides)
    plan.validate(limits)
    return plan, limits


def dry_run_line(limits: DeviceLimits) -> str:
    """The dry run's last line: what the checks were made against, so a plan for the assumed
    H200 (no GPU on this machine) never reads as checked on a real device."""
    from .assumed import is_assumed

    if is_assumed(limits):
        return (f"dry run: planned for an assumed H200 as GPU {limits.index} (no GPU found on this machine): "
                "all checks passed against its nominal limits; nothing launched (run it on the GPU node to check "
                "against the real device)")
    return f"dry run: all checks passed on {limits.describe()}; nothing launched"


def plan_suite(name: str, device: DeviceLimits, parts: tuple[str, ...] = PARTS,
               overrides: dict | None = None) -> SuitePlan:
    """The suite for `device` with the command line's per-part overrides (`sitsprof probe <part>
    --...`; sizes as text, e.g. '2MiB'). Not validated yet: the caller validates before anything runs."""
    opts = overrides or {}

    def size(key):
        return parse_size(opts[key]) if opts.get(key) is not None else None

    # --max-footprint belongs to whichever part is run: the ladder's top, the TLB sweep's, the HBM chase's
    plan = make_suite(name, device, tuple(parts), max_footprint=size("max_footprint") if "latency" in parts else None,
                      min_footprint=size("min_footprint"), per_octave=opts.get("per_octave"),
                      samples=opts.get("samples"))
    if "tlb" in parts and (opts.get("strides") or opts.get("max_footprint")):
        strides = ([parse_size(s) for s in (opts.get("strides") or "").split(",") if s.strip()]
                   or [s.stride for s in plan.tlb.sweeps])
        top = size("max_footprint") or plan.tlb.sweeps[0].footprints[-1]
        base = plan.tlb.sweeps[0]
        plan.tlb.sweeps = [ChaseSweep(geometric_sizes(2 * s, max(top, 2 * s), 2, align=s), stride=s,
                                      skew=TLB_SKEW, samples=base.samples, warm_full_bytes=max(top, 2 * s))
                           for s in strides]
    if "bandwidth" in parts:
        if opts.get("buffer"):
            plan.bandwidth.buffer_bytes = size("buffer")
        if any(opts.get(k) is not None for k in ("sms", "blocks_per_sm", "throttle_ns")):
            bps = opts.get("blocks_per_sm") or 4
            plan.bandwidth.configs = [StreamConfig(active_sms=opts.get("sms") or device.sm_count, blocks_per_sm=bps,
                                                   threads=max(32, min(512, 2048 // bps // 32 * 32)),
                                                   throttle_ns=opts.get("throttle_ns") or 0)]
    if "loaded" in parts:
        loaded = plan.loaded
        if opts.get("levels"):
            n = opts["levels"] - 1
            if n < 1:
                from .errors import PlanError

                raise PlanError("--levels must be at least 2 (idle and one loaded level)")
            loaded = replace(loaded, targets=[(i + 1) / n for i in range(n)])
        if opts.get("retouch"):
            loaded = replace(loaded, retouch_bytes=size("retouch"))
        if opts.get("max_footprint"):
            loaded = replace(loaded, hbm_footprint=size("max_footprint"))
        if opts.get("sms"):
            loaded = replace(loaded, saturator=replace(loaded.saturator, active_sms=opts["sms"]))
        if opts.get("saturator"):
            loaded = replace(loaded, saturator_kind=opts["saturator"])
        plan.loaded = loaded
    return plan


@contextmanager
def _out_of_memory_is_plain(part: str):
    """CuPy's OutOfMemoryError (another process took the memory after planning) as one line."""
    try:
        yield
    except Exception as exc:
        if type(exc).__name__ != "OutOfMemoryError":
            raise
        from .errors import ProbeError

        raise ProbeError(f"{part}: the GPU ran out of memory ({exc}); free GPU memory or lower the sizes") from exc


def run_suite(run, plan: SuitePlan, index: int = 0, progress: Callable[[str, int, int], None] | None = None,
              probes=None) -> dict:
    """Run the suite's parts on GPU `index`, writing each raw probe table into `run` as it completes
    (what the tables say, tiers, TLB steps, load levels, is derived by `sitsprof.reports`).

    progress(part, advance, total) is called as steps finish. Returns the calibration facts.
    """
    from .gpu import Probes, timed_phase

    probes = probes or Probes(index)
    plan.validate(probes.limits)
    report = progress or (lambda part, advance, total: None)
    # Phases are seconds since t0, a reading of the samplers' monotonic clock (their `t_ns`),
    # recorded as `phases_origin_ns` so reports can place the phases on the sampler timelines.
    t0 = time.monotonic_ns()
    run.update_meta(phases_origin_ns=t0)
    phases: list[dict] = []

    def step(part):
        total = plan.steps(part)
        report(part, 0, total)
        return lambda n: report(part, n, total)

    with _out_of_memory_is_plain("calibrate"), timed_phase(phases, "calibrate", t0):
        facts = probes.calibrate(plan.latency.clock_spin_ns, plan.latency.timer_samples)
    run.update_meta(sm_clock_mhz=facts["sm_clock_mhz"], timer_overhead_cycles=facts["timer_overhead_cycles"],
                    probe_calibration=facts, suite=plan.name, probe_plan=plan.describe())
    if "latency" in plan.parts:
        with _out_of_memory_is_plain("latency"), timed_phase(phases, "latency", t0):
            tables = probes.latency(plan.latency, step("latency"))
        for name, frame in tables.items():
            run.write_table(name, frame)
    if "tlb" in plan.parts:
        with _out_of_memory_is_plain("tlb"), timed_phase(phases, "tlb", t0):
            frame = probes.tlb(plan.tlb, step("tlb"))
        run.write_table("tlb", frame)
    if "bandwidth" in plan.parts:
        with _out_of_memory_is_plain("bandwidth"), timed_phase(phases, "bandwidth", t0):
            run.write_table("bandwidth", probes.bandwidth(plan.bandwidth, step("bandwidth")))
    if "loaded" in plan.parts:
        with _out_of_memory_is_plain("loaded"), timed_phase(phases, "loaded", t0):
            out = probes.loaded(plan.loaded, step("loaded"))
        run.write_table("loaded", out["loaded"])
        run.write_table("loaded_calibration", out["loaded_calibration"])
        facts["saturator_peak_gbs"] = out["peak_gbs"]
    run.update_meta(phases=phases)
    return facts
