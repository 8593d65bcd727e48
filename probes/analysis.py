"""Post-processing of what the probe kernels recorded: pure NumPy/pandas, tested on CPU.

Raw kernel output -> tables (columns documented in docs/run-directory.md, "Probe tables"):
cycle stamps minus the timer's own overhead, cycles -> ns with the measured SM clock, ring
orders for the chase, throttle choice for the loaded-latency levels, per-level summaries with
the replacement delay.
"""
from __future__ import annotations

import numpy as np

from .errors import ProbeError

QUANTILES = {"p01": 0.01, "p10": 0.10, "p50": 0.50, "p90": 0.90, "p99": 0.99, "p999": 0.999}


# -- the chase ring -------------------------------------------------------------------------
def ring_order(n: int, seed: int = 0) -> np.ndarray:
    """A random permutation of 0..n-1: link order[i] points to order[i+1], the last to the first."""
    if n < 2:
        raise ProbeError(f"a chase ring needs at least 2 links (got {n})")
    return np.random.default_rng(seed).permutation(n).astype(np.uint64)


def ring_next(order: np.ndarray) -> np.ndarray:
    """next[k] = the link after link k: the host mirror of kernels/chase.cu:chase_init."""
    order = np.asarray(order, dtype=np.int64)
    nxt = np.empty_like(order)
    nxt[order] = np.roll(order, -1)
    return nxt


def link_offset(k, stride: int, skew: int = 0):
    """Byte offset of link k (host mirror of kernels/chase.cu:link_offset)."""
    k = np.asarray(k, dtype=np.uint64)
    off = k * np.uint64(stride)
    if skew:
        off = off + (k * np.uint64(skew)) % np.uint64(stride)
    return off


def walk(nxt: np.ndarray, start: int, steps: int) -> np.ndarray:
    """The links a chase visits from `start` (host mirror, for tests)."""
    out = np.empty(steps, dtype=np.int64)
    p = int(start)
    for i in range(steps):
        p = int(nxt[p])
        out[i] = p
    return out


# -- clocks ---------------------------------------------------------------------------------
def sm_clock_mhz(elapsed_ns: float, elapsed_cycles: float) -> float:
    """SM clock from one spin of kernels/chase.cu:sm_clock_rate (cycles per microsecond)."""
    if elapsed_ns <= 0 or elapsed_cycles <= 0:
        raise ProbeError(f"cannot measure the SM clock from {elapsed_cycles} cycles in {elapsed_ns} ns")
    return float(elapsed_cycles) * 1e3 / float(elapsed_ns)


def cycles_to_ns(cycles, mhz: float):
    return np.asarray(cycles, dtype=np.float64) * 1e3 / mhz


def timer_overhead(samples) -> dict:
    """The timed sequence without a load (kernels/chase.cu:timer_overhead): its median is subtracted."""
    s = np.asarray(samples, dtype=np.float64)
    if s.size == 0:
        raise ProbeError("no timer-overhead samples")
    return {"median": float(np.median(s)), "p01": float(np.quantile(s, 0.01)),
            "p99": float(np.quantile(s, 0.99)), "count": int(s.size)}


def net_cycles(raw, overhead: float) -> np.ndarray:
    """Per-access latency: raw stamp difference minus the timer overhead (float32, not clipped)."""
    return (np.asarray(raw, dtype=np.float64) - overhead).astype(np.float32)


# -- tables ---------------------------------------------------------------------------------
def chase_frame(raw, overhead: float, mhz: float, **columns):
    """Rows of one chase: constant columns (footprint_bytes, stride_bytes, ...) + per-sample latency."""
    import pandas as pd

    cyc = net_cycles(raw, overhead)
    data = {k: np.full(cyc.size, v) for k, v in columns.items()}
    data["sample"] = np.arange(cyc.size, dtype=np.int32)
    data["latency_cycles"] = cyc
    data["latency_ns"] = cycles_to_ns(cyc, mhz).astype(np.float32)
    return pd.DataFrame(data)


def quantile_row(values) -> dict:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"count": 0, "mean": np.nan, **{k: np.nan for k in QUANTILES}}
    qs = np.quantile(v, list(QUANTILES.values()))
    return {"count": int(v.size), "mean": float(v.mean()), **dict(zip(QUANTILES, map(float, qs)))}


def summarize(frame, by: list[str], value: str = "latency_cycles"):
    """Quantiles of `value` per group of `by` (group keys kept as columns, in sorted order)."""
    import pandas as pd

    rows = []
    for key, sub in frame.groupby(by, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, key)), **quantile_row(sub[value].to_numpy())})
    return pd.DataFrame(rows)


def tiers_frame(summary, variant: str, mhz: float, l2_bytes: int | None = None):
    """Tiers of one ladder (per-footprint P50) by change-point detection (reports/tiers.py)."""
    import pandas as pd

    from sitsprof.reports.tiers import detect_tiers

    sub = summary[summary["variant"] == variant].sort_values("footprint_bytes")
    if len(sub) < 2:
        return pd.DataFrame()
    first = "l1" if variant == "ca" else "l2_near"
    tiers = detect_tiers(sub["footprint_bytes"].to_numpy(), sub["p50"].to_numpy(), first=first, l2_bytes=l2_bytes)
    return pd.DataFrame([{"variant": variant, "tier": t.name, "label": t.label,
                          "footprint_lo": t.footprint_lo, "footprint_hi": t.footprint_hi,
                          "n_footprints": t.n_points, "p50_cycles": t.level,
                          "p50_ns": float(cycles_to_ns(t.level, mhz))} for t in tiers])


def tlb_steps_frame(summary):
    """Latency steps per stride (reports/tiers.py:detect_steps on the per-footprint P50)."""
    import pandas as pd

    from sitsprof.reports.tiers import detect_steps

    rows = []
    for stride, sub in summary.groupby("stride_bytes", sort=True):
        sub = sub.sort_values("footprint_bytes")
        if len(sub) < 2:
            continue
        for s in detect_steps(sub["footprint_bytes"].to_numpy(), sub["p50"].to_numpy()):
            rows.append({"stride_bytes": int(stride), "reach_bytes": s.reach_bytes,
                         "reach_pages": s.reach_bytes // int(stride), "step_at_bytes": s.step_at_bytes,
                         "before_cycles": s.before, "after_cycles": s.after, "step_cycles": s.size})
    return pd.DataFrame(rows, columns=["stride_bytes", "reach_bytes", "reach_pages", "step_at_bytes",
                                       "before_cycles", "after_cycles", "step_cycles"])


# -- bandwidth ------------------------------------------------------------------------------
def bytes_moved(kernel: str, vectors: int, passes: int, vec_bytes: int = 16) -> int:
    """Bytes one launch moves: read or write once per vector, copy (and memcpy) read + write."""
    per = 2 if kernel in ("copy", "memcpy") else 1
    return per * vectors * vec_bytes * passes


def add_memcpy_ratio(frame):
    """ratio_to_memcpy = achieved / the best cudaMemcpy D2D of the same run."""
    ref = frame.loc[frame["kernel"] == "memcpy", "achieved_gbs"]
    best = float(ref.max()) if len(ref) else np.nan
    frame = frame.copy()
    frame["ratio_to_memcpy"] = frame["achieved_gbs"] / best
    return frame


# -- loaded latency -------------------------------------------------------------------------
def saturator_gbs(stats) -> float:
    """GB/s the saturator moved: stats[0] bytes over [stats[1], stats[2]] ns (kernels/loaded.cu)."""
    nbytes, t0, t1 = (int(x) for x in np.asarray(stats)[:3])
    if nbytes == 0 or t1 <= t0:
        return 0.0
    return nbytes / (t1 - t0)  # bytes per ns == GB/s


def choose_throttles(sleeps_ns, achieved_gbs, targets_gbs) -> list[int]:
    """Sleep per iteration that should give each target bandwidth, from a calibration sweep.

    The calibration (the saturator alone at each sleep) is made monotone (more sleep, less
    bandwidth) and interpolated in log(1 + sleep); targets at or above the fastest setting get
    its sleep, targets below the slowest get a longer sleep extrapolated in proportion.
    """
    s = np.asarray(sleeps_ns, dtype=np.float64)
    b = np.asarray(achieved_gbs, dtype=np.float64)
    if s.size == 0 or s.size != b.size:
        raise ProbeError("the throttle calibration needs matching sleeps and bandwidths")
    order = np.argsort(s)
    s, b = s[order], np.minimum.accumulate(b[order])  # non-increasing in sleep
    x = np.log1p(s)
    out = []
    for t in targets_gbs:
        if t >= b[0]:
            out.append(int(s[0]))
        elif t <= b[-1]:
            out.append(int(round(s[-1] * b[-1] / max(t, 1e-9))) if b[-1] > 0 else int(s[-1]))
        else:
            # b is non-increasing: interpolate on the reversed (increasing) arrays
            xi = np.interp(t, b[::-1], x[::-1])
            out.append(int(round(np.expm1(xi))))
    return out


def l2_hit_baseline(frame) -> float:
    """Unloaded L2-hit latency: median re-touch latency at level 0 (the saturator off)."""
    idle = frame[(frame["access"] == "retouch") & (frame["level"] == 0)]["latency_cycles"]
    if idle.empty:
        raise ProbeError("no unloaded re-touch samples (level 0) to take the L2-hit baseline from")
    return float(np.median(idle.to_numpy()))


def add_replacement_delay(frame):
    """replacement_delay_cycles = re-touch latency - unloaded L2-hit latency (NaN for HBM rows)."""
    frame = frame.copy()
    base = l2_hit_baseline(frame)
    delay = frame["latency_cycles"].astype(np.float64) - base
    frame["replacement_delay_cycles"] = np.where(frame["access"] == "retouch", delay, np.nan).astype(np.float32)
    return frame


def loaded_levels(frame, mhz: float | None = None):
    """Per level and access: achieved bandwidth and the latency distribution; for re-touches
    also the replacement delay distribution and the share of re-touches slower than the
    geometric midpoint of the unloaded L2-hit and HBM medians (evicted by the saturator)."""
    import pandas as pd

    base = l2_hit_baseline(frame)
    hbm0 = frame[(frame["access"] == "hbm") & (frame["level"] == 0)]["latency_cycles"]
    cut = float(np.sqrt(base * np.median(hbm0))) if len(hbm0) and base > 0 else np.nan
    rows = []
    for (level, access), sub in frame.groupby(["level", "access"], sort=True):
        lat = sub["latency_cycles"].to_numpy(dtype=np.float64)
        row = {"level": int(level), "access": access,
               "target_fraction": float(sub["target_fraction"].iloc[0]),
               "throttle_ns": int(sub["throttle_ns"].iloc[0]),
               "achieved_gbs": float(sub["achieved_gbs"].iloc[0]),
               "bandwidth_fraction": float(sub["bandwidth_fraction"].iloc[0]),
               **quantile_row(lat)}
        if mhz:
            row["p50_ns"] = float(cycles_to_ns(row["p50"], mhz))
            row["p99_ns"] = float(cycles_to_ns(row["p99"], mhz))
        if access == "retouch":  # the delay is the latency shifted by the baseline: so are its statistics
            row.update({f"delay_{k}": row[k] - base for k in ("p50", "p90", "p99", "mean")})
            row["evicted_fraction"] = float(np.mean(lat > cut)) if np.isfinite(cut) else np.nan
        rows.append(row)
    return pd.DataFrame(rows)
