"""A synthetic run directory with the shape of a real one, for tests, the bench and demos.

Everything in it is generated from a seeded model of a Hopper-like memory hierarchy (L1, L2
near/far, HBM, TLB steps, a queueing curve under load); `meta.json` says `synthetic: true`
and the reports label it as such. It is never a measurement.
"""
from __future__ import annotations

import re

import numpy as np

from .queueing import queueing_curve

__all__ = [
    "GIB",
    "KIB",
    "LEVELS",
    "MIB",
    "MODEL_L2",
    "MODEL_PEAK_GBS",
    "RETOUCH_INTERVALS_NS",
    "RETOUCH_LINES",
    "make_fleet",
    "make_synthetic_run",
]

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
#: (upper footprint in bytes, median cycles, spread) of each level of the model.
LEVELS = ((256 * KIB, 33.0, 1.0), (24 * MIB, 282.0, 5.0), (50 * MIB, 505.0, 12.0), (None, 648.0, 18.0))


def _ladder_latency(footprint: float) -> tuple[float, float]:
    for top, median, spread in LEVELS:
        if top is None or footprint <= top:
            return median, spread
    raise AssertionError


def _mark_failed(run, exc: BaseException) -> None:
    """End `run` as failed (interrupted on Ctrl-C) with the reason; its reserve file goes first,
    so on a full disk the last meta.json has room. Never hides `exc` (the caller re-raises it)."""
    from sitsprof.collectors.rundir import describe_exception

    status = "interrupted" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else "failed"
    try:
        run.finish(status, error=describe_exception(exc))
    except Exception:  # noqa: BLE001 - not even that fits: at least free the reserve
        run._release_reserve()


def make_synthetic_run(parent, name: str = "synthetic-node", seed: int = 0, samples: int = 200_000,
                       host: str | None = None, sm_mhz: float = 1980.0, slowdown: float = 1.0,
                       complete: bool = True, parts: tuple[str, ...] = ("latency", "tlb", "bandwidth", "loaded"),
                       sampler_rows: int = 4000):
    """Write a run directory under `parent`; returns its `RunDirectory`.

    `samples` is the total number of latency samples over the ladder and loaded probes;
    `slowdown` scales every latency (to make one node of a fleet an outlier); `parts` picks
    which probe tables to write (a partial run for the incomplete-run paths).
    """
    import pandas as pd

    from sitsprof.collectors.rundir import RunDirectory

    rng = np.random.default_rng(seed)
    run = RunDirectory.create(parent, name, meta={
        "synthetic": True,
        "host": host or name,
        "device": {"name": "Synthetic Hopper (model, not a GPU)", "uuid": f"GPU-synthetic-{seed:04d}",
                   "sm_count": 132, "l2_bytes": 50 * MIB, "memory_bytes": 141 * GIB},
        # As pmu.clocks.ClockSession.to_dict() records it.
        "clocks": {"mode": "lock", "requested": {"sm_mhz": sm_mhz}, "resolved": {"sm_mhz": sm_mhz},
                   "before": {"sm_mhz": 1755.0, "memory_mhz": 2619.0},
                   "applied": {"sm_mhz": sm_mhz, "memory_mhz": 2619.0},
                   "after": {"sm_mhz": 1755.0, "memory_mhz": 2619.0}, "restored": True},
        "sm_clock_mhz": sm_mhz,
    })
    try:  # a run that cannot be written (a full disk) says "failed", never stays "running"
        origin_ns = 10**12  # the samplers' monotonic clock at the start of the probes
        phases = []
        t = 0.0

        def phase(label, seconds):
            nonlocal t
            phases.append({"name": label, "start_s": t, "end_s": t + seconds})
            t += seconds

        def chase_table(fp, lat, variant, stride=128):
            lat = np.maximum(lat, 1.0).astype(np.float32)
            return pd.DataFrame({"variant": variant, "stride_bytes": np.int64(stride), "footprint_bytes": fp,
                                 "sample": np.arange(fp.size, dtype=np.int32), "latency_cycles": lat,
                                 "latency_ns": (lat * 1e3 / sm_mhz).astype(np.float32)})

        n_ladder = samples // 2 if "loaded" in parts else samples
        if "latency" in parts:
            footprints = np.unique(np.geomspace(16 * KIB, 4 * GIB, 40).astype(np.int64) // 128 * 128)
            per = max(n_ladder // (2 * footprints.size), 16)
            fp = np.repeat(footprints, per)
            med = np.empty(fp.size)
            spread = np.empty(fp.size)
            for f in footprints:
                m, s = _ladder_latency(float(f))
                sel = fp == f
                med[sel], spread[sel] = m, s
            for variant in ("ca", "cg"):
                base = med.copy()
                if variant == "cg":  # L1-bypassing: the L1 footprints are served by L2
                    base[fp <= LEVELS[0][0]] = LEVELS[1][1]
                lat = base * slowdown + rng.normal(0, 1, fp.size) * spread
                tail = rng.random(fp.size) < 0.004
                lat[tail] += rng.exponential(180.0, tail.sum())
                run.write_table("latency" if variant == "ca" else "latency_cg", chase_table(fp, lat, variant))
            phase("latency", 20.0)
        if "tlb" in parts:
            rows = []
            for stride in (2 * MIB, 32 * MIB):
                for fp_ in np.geomspace(64 * MIB, 64 * GIB, 16).astype(np.int64):
                    # The few links stay L2-resident: steps come from address translation alone.
                    base = 282.0 + (95.0 if fp_ > 8 * GIB else 0.0) + (240.0 if fp_ > 32 * GIB else 0.0)
                    vals = base * slowdown + rng.normal(0, 15, 400)
                    rows.append(chase_table(np.full(vals.size, fp_, dtype=np.int64), vals, "cg", stride))
            run.write_table("tlb", pd.concat(rows, ignore_index=True))
            phase("tlb", 10.0)
        if "bandwidth" in parts:
            rows = []
            peak = 4200.0 / slowdown
            for kernel, scale in (("read", 0.93), ("write", 0.9), ("copy", 0.96)):
                for blocks in (1, 2, 4, 8, 16, 32, 66, 132, 264, 528):
                    for rep in range(3):
                        achieved = peak * scale * (1 - np.exp(-blocks / 60.0)) * (1 + rng.normal(0, 0.005))
                        rows.append({"kernel": kernel, "active_sms": min(blocks, 132), "blocks": blocks,
                                     "throttle_ns": 0, "rep": rep, "bytes": int(achieved * 1e9 * 0.01),
                                     "seconds": 0.01, "achieved_gbs": achieved})
            for rep in range(3):
                rows.append({"kernel": "memcpy", "active_sms": 0, "blocks": 0, "throttle_ns": 0, "rep": rep,
                             "bytes": int(peak * 0.955e7), "seconds": 0.01, "achieved_gbs": peak * 0.955})
            run.write_table("bandwidth", pd.DataFrame(rows))
            phase("bandwidth", 5.0)
        if "loaded" in parts:
            frames = _loaded_frames(rng, samples - n_ladder, slowdown, sm_mhz)
            run.write_table("loaded", pd.concat(frames, ignore_index=True))
            phase("loaded", 30.0)
        run.update_meta(phases=phases, phases_origin_ns=origin_ns)

        # Samplers as collectors/ writes them: t_ns on the monotonic clock, tick, read_ns.
        ts = np.linspace(0.0, max(t, 1.0), sampler_rows)
        t_ns = origin_ns + (ts * 1e9).astype(np.int64)
        drift = -15.0 * (ts / ts[-1]) ** 2  # a little thermal sag
        run.write_table("nvml", pd.DataFrame({
            "t_ns": t_ns, "tick": np.arange(ts.size, dtype=np.int64), "read_ns": np.full(ts.size, 40_000, np.int64),
            "sm_clock_mhz": np.round(sm_mhz + drift + rng.normal(0, 1.5, ts.size)),
            "memory_clock_mhz": np.full(ts.size, 2619.0),
            "power_w": 300 + 250 * (ts / ts[-1]) + rng.normal(0, 10, ts.size),
            "temperature_c": 45 + 20 * (ts / ts[-1]) + rng.normal(0, 0.5, ts.size),
            "clock_event_reasons": np.zeros(ts.size, dtype=np.int64),
        }), kind="sampler")
        g = slice(None, None, 100)
        run.write_table("gpm", pd.DataFrame({
            "t_ns": t_ns[g], "tick": np.arange(t_ns[g].size, dtype=np.int64),
            "read_ns": np.full(t_ns[g].size, 90_000, np.int64),
            "gpm_dram_bw_util_pct": np.clip(rng.normal(40, 20, t_ns[g].size), 0, 100),
            "gpm_sm_util_pct": np.clip(rng.normal(30, 10, t_ns[g].size), 0, 100)}), kind="sampler")
        if complete:
            run.finish("complete")
    except BaseException as exc:
        _mark_failed(run, exc)
        raise
    return run


#: Re-touch intervals of the synthetic loaded table (ns), as the probe's default schedule.
RETOUCH_INTERVALS_NS = (0, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000)
RETOUCH_LINES = 8  # as probes.plan.LoadedPlan.retouch_lines
#: The model's L2 (bytes) and peak bandwidth (GB/s): a line lives about L2 / injected bandwidth.
MODEL_L2, MODEL_PEAK_GBS = 50 * MIB, 4200.0


def _loaded_frames(rng, budget: int, slowdown: float, sm_mhz: float) -> list:
    """Rows of probes/loaded as kernels/loaded.cu writes them, per level: `hbm` (the queueing
    curve), `hot` (near-L2 hits under load: the hot set is re-touched every few microseconds, so
    it keeps a near copy) and `retouch` (each line in the L2 while it survives: exp(-age /
    lifetime), lifetime = L2 / injected bandwidth; a survivor is a near or, 40 % of the time, a
    far-partition hit, which lies between the hot set and HBM; a miss costs an HBM access)."""
    import pandas as pd

    levels = np.linspace(0.0, 0.93, 10)
    per = max(budget // (2 * levels.size), 16)
    reps = max(1, per // (len(RETOUCH_INTERVALS_NS) * RETOUCH_LINES))
    frames = []
    for i, frac in enumerate(levels):
        hbm_centre = queueing_curve(frac, 648.0, 38.0, 0.97) * slowdown
        extra = queueing_curve(frac, 0.0, 6.0, 0.97) + 20.0 * frac

        def hits(n, extra=extra, frac=frac, far_share=0.4):
            far = rng.random(n) < far_share  # lines in the far partition
            return np.where(far, 505.0, 282.0) * slowdown + extra + rng.gamma(2.0, 3.0 + 10 * frac, n)

        def misses(n, centre=hbm_centre, frac=frac):
            spread = 20.0 + 30 * frac
            return centre + rng.gamma(2.0, spread / 2.0, n) - spread

        iv = np.repeat(np.tile(np.asarray(RETOUCH_INTERVALS_NS, dtype=np.int64), reps), RETOUCH_LINES)
        age = iv + rng.uniform(1_500.0, 5_000.0, iv.size)  # 8 lines a round: a few us of the round's own
        lifetime = MODEL_L2 / (frac * MODEL_PEAK_GBS) if frac > 0 else np.inf  # bytes / (bytes per ns)
        survived = rng.random(iv.size) < np.exp(-age / lifetime)
        retouch = np.where(survived, hits(iv.size), misses(iv.size))
        t0 = 10**12 + i * 10**8  # %globaltimer: each level's chases inside its saturator's window
        miss_ref = misses(per)
        hot = hits(per, far_share=0.0)
        for k, (access, vals, fp) in enumerate((("hbm", miss_ref, 64 * MIB), ("hot", hot, 2 * KIB),
                                                ("retouch", retouch, 8 * MIB))):
            n = vals.size
            lat = np.maximum(vals, 1.0).astype(np.float32)
            is_rt = access == "retouch"
            loaded = frac > 0
            p0, p1 = t0 + k * 10**7 + 200_000, t0 + k * 10**7 + 5_000_000
            frames.append(pd.DataFrame({  # the columns and order of probes/tables.LOADED_COLUMNS
                "level": np.int64(i), "target_fraction": frac,
                "throttle_ns": np.int64(0 if frac == 0 else int(2000 * (1 - frac))), "access": access,
                "achieved_gbs": frac * MODEL_PEAK_GBS, "bandwidth_fraction": frac, "probe_sm": np.int64(5),
                "saturator_blocks": np.int64(393 if loaded else 0), "blocks_left_probe_sm": np.int64(0),
                "probe_start_ns": np.int64(p0), "probe_end_ns": np.int64(p1),
                "probe_start_cycles": np.int64(p0 * sm_mhz // 1000), "probe_end_cycles": np.int64(p1 * sm_mhz // 1000),
                "saturator_start_ns": np.int64(p0 - 150_000 if loaded else -1),
                "saturator_end_ns": np.int64(p1 + 2_000 if loaded else -1),
                "saturator_last_end_ns": np.int64(p1 + 9_000 if loaded else 0),
                "saturator_blocks_at_probe_start": np.int64(393 if loaded else 0), "chase_mhz": float(sm_mhz),
                "clock_source": "chase", "valid": True, "invalid_reason": "", "attempt": np.int64(0),
                "footprint_bytes": np.int64(fp),
                "round": np.repeat(np.arange(iv.size // RETOUCH_LINES), RETOUCH_LINES) if is_rt else np.int64(-1),
                "interval_ns": iv if is_rt else np.int64(-1),
                "age_cycles": (age * sm_mhz / 1e3).astype(np.int64) if is_rt else np.int64(-1),
                "age_ns": age.astype(np.float32) if is_rt else np.float32(np.nan),
                # first touches miss (fresh lines); a constant keeps the generator's random stream as it was
                "prime_latency_cycles": np.float32(hbm_centre) if is_rt else np.float32(np.nan),
                "sample": np.arange(n, dtype=np.int32), "latency_cycles": lat,
                "latency_ns": (lat * 1e3 / sm_mhz).astype(np.float32)}))
    return frames


def make_fleet(parent, hosts: list[str], samples: int = 100_000, outlier: str | None = None):
    """One synthetic run per host (named by hostname, as `examples/slurm` does); one may be slow."""
    return [make_synthetic_run(parent, name=re.sub(r"[^A-Za-z0-9._-]", "-", h).lstrip("-._") or f"node{i}", seed=i,
                               samples=samples, host=h, slowdown=1.12 if h == outlier else 1.0)
            for i, h in enumerate(hosts)]

