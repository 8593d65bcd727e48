"""A synthetic run directory with the shape of a real one, for tests, the bench and demos.

Everything in it is generated from a seeded model of a Hopper-like memory hierarchy (L1, L2
near/far, HBM, TLB steps, a queueing curve under load); `meta.json` says `synthetic: true`
and the reports label it as such. It is never a measurement.
"""
from __future__ import annotations

import re

import numpy as np

from .queueing import queueing_curve

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
#: (upper footprint in bytes, median cycles, spread) of each level of the model.
LEVELS = ((256 * KIB, 33.0, 1.0), (24 * MIB, 282.0, 5.0), (50 * MIB, 505.0, 12.0), (None, 648.0, 18.0))


def _ladder_latency(footprint: float) -> tuple[float, float]:
    for top, median, spread in LEVELS:
        if top is None or footprint <= top:
            return median, spread
    raise AssertionError


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
        "clocks": {"requested": {"sm_mhz": sm_mhz}, "applied": {"sm_mhz": sm_mhz}, "locked": True},
        "sm_clock_mhz": sm_mhz,
    })
    phases = []
    t = 0.0

    def phase(label, seconds):
        nonlocal t
        phases.append({"name": label, "start_s": t, "end_s": t + seconds})
        t += seconds

    n_ladder = samples // 2 if "loaded" in parts else samples
    if "latency" in parts:
        footprints = np.unique(np.geomspace(16 * KIB, 4 * GIB, 40).astype(np.int64) // 128 * 128)
        per = max(n_ladder // footprints.size, 16)
        fp = np.repeat(footprints, per)
        med = np.empty(fp.size)
        spread = np.empty(fp.size)
        for f in footprints:
            m, s = _ladder_latency(float(f))
            sel = fp == f
            med[sel], spread[sel] = m, s
        lat = med * slowdown + rng.normal(0, 1, fp.size) * spread
        tail = rng.random(fp.size) < 0.004
        lat[tail] += rng.exponential(180.0, tail.sum())
        run.write_table("latency", pd.DataFrame({
            "footprint_bytes": fp, "latency_cycles": np.maximum(lat, 1.0).astype(np.float32)}))
        phase("latency", 20.0)
    if "tlb" in parts:
        rows = []
        for stride in (2 * MIB, 32 * MIB):
            for fp_ in np.geomspace(64 * MIB, 64 * GIB, 16).astype(np.int64):
                base = 648.0 + (95.0 if fp_ > 8 * GIB else 0.0) + (240.0 if fp_ > 32 * GIB else 0.0)
                vals = base * slowdown + rng.normal(0, 15, 400)
                rows.append(pd.DataFrame({"stride_bytes": stride, "footprint_bytes": fp_,
                                          "latency_cycles": vals.astype(np.float32)}))
        run.write_table("tlb", pd.concat(rows, ignore_index=True))
        phase("tlb", 10.0)
    if "bandwidth" in parts:
        rows = []
        peak = 4200.0 / slowdown
        for kernel, scale in (("read", 0.93), ("write", 0.9), ("copy", 0.96)):
            for blocks in (1, 2, 4, 8, 16, 32, 66, 132, 264, 528):
                achieved = peak * scale * (1 - np.exp(-blocks / 60.0))
                rows.append({"kernel": kernel, "blocks": blocks, "throttle_ns": 0,
                             "bytes": int(achieved * 1e9 * 0.01), "seconds": 0.01, "achieved_gbs": achieved})
        rows.append({"kernel": "memcpy", "blocks": 0, "throttle_ns": 0, "bytes": int(peak * 0.955e7),
                     "seconds": 0.01, "achieved_gbs": peak * 0.955})
        run.write_table("bandwidth", pd.DataFrame(rows))
        phase("bandwidth", 5.0)
    if "loaded" in parts:
        levels = np.linspace(0.0, 0.93, 10)
        per = max((samples - n_ladder) // (2 * levels.size), 16)
        frames = []
        for i, frac in enumerate(levels):
            hbm = queueing_curve(frac, 648.0, 38.0, 0.97) * slowdown
            l2 = 282.0 * slowdown
            retouch_extra = queueing_curve(frac, 0.0, 6.0, 0.97) + 45.0 * frac
            for access, centre, spread in (("hbm", hbm, 20.0 + 30 * frac), ("retouch", l2 + retouch_extra, 6.0 + 20 * frac)):
                vals = centre + rng.gamma(2.0, spread / 2.0, per) - spread
                frames.append(pd.DataFrame({
                    "level": i, "bandwidth_fraction": frac, "achieved_gbs": frac * 4200.0,
                    "access": access, "latency_cycles": vals.astype(np.float32)}))
        run.write_table("loaded", pd.concat(frames, ignore_index=True))
        phase("loaded", 30.0)
    run.update_meta(phases=phases)

    ts = np.linspace(0.0, max(t, 1.0), sampler_rows)
    drift = -15.0 * (ts / ts[-1]) ** 2  # a little thermal sag
    run.write_table("nvml", pd.DataFrame({
        "t_s": ts,
        "sm_clock_mhz": np.round(sm_mhz + drift + rng.normal(0, 1.5, ts.size)),
        "mem_clock_mhz": np.full(ts.size, 2619.0),
        "power_w": 300 + 250 * (ts / ts[-1]) + rng.normal(0, 10, ts.size),
        "temperature_c": 45 + 20 * (ts / ts[-1]) + rng.normal(0, 0.5, ts.size),
    }), kind="sampler")
    gts = ts[::100]
    run.write_table("gpm", pd.DataFrame({
        "t_s": gts, "dram_bw_util_pct": np.clip(rng.normal(40, 20, gts.size), 0, 100),
        "sm_util_pct": np.clip(rng.normal(30, 10, gts.size), 0, 100)}), kind="sampler")
    if complete:
        run.finish("complete")
    return run


def make_fleet(parent, hosts: list[str], samples: int = 100_000, outlier: str | None = None):
    """One synthetic run per host (named by hostname, as `examples/slurm` does); one may be slow."""
    return [make_synthetic_run(parent, name=re.sub(r"[^A-Za-z0-9._-]", "-", h).lstrip("-._") or f"node{i}", seed=i, samples=samples, host=h,
                               slowdown=1.12 if h == outlier else 1.0)
            for i, h in enumerate(hosts)]

