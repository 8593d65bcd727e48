"""What the probe kernels recorded, as the run directory's raw probe tables: pure NumPy/pandas.

Raw kernel output -> rows (columns documented in docs/run-directory.md, "Probe tables"):
cycle stamps minus the timer's own overhead, cycles -> ns with the measured SM clock, ring
orders for the chase, the throttle choice for the loaded-latency levels. Nothing here
summarises: quantiles, tiers, TLB steps and load levels are derived by `sitsprof.reports`.
"""
from __future__ import annotations

import numpy as np

from .errors import ProbeError

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


# -- bandwidth ------------------------------------------------------------------------------
def bytes_moved(kernel: str, vectors: int, passes: int, vec_bytes: int = 16) -> int:
    """Bytes one launch moves: read or write once per vector, copy (and memcpy) read + write."""
    per = 2 if kernel in ("copy", "memcpy") else 1
    return per * vectors * vec_bytes * passes


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
