"""What the probe kernels recorded, as the run directory's raw probe tables: pure NumPy/pandas.

Raw kernel output -> rows (columns documented in docs/run-directory.md, "Probe tables"):
cycle stamps minus the timer's own overhead, cycles -> ns with the measured SM clock, ring
orders for the chase, the throttle choice for the loaded-latency levels. Nothing here
summarises: quantiles, tiers, TLB steps and load levels are derived by `sitsprof.reports`.
"""
from __future__ import annotations

import numpy as np

from .errors import ProbeError

__all__ = [
    "LOADED_COLUMNS",
    "MIN_CLOCK_WINDOW_NS",
    "bytes_moved",
    "chase_clock",
    "chase_frame",
    "choose_throttles",
    "clock_columns",
    "cycles_to_ns",
    "line_ages",
    "link_offset",
    "loaded_table",
    "net_cycles",
    "placement",
    "ring_next",
    "ring_order",
    "saturator_gbs",
    "sm_clock_mhz",
    "timer_overhead",
    "walk",
]


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


#: A chase's own clock window shorter than this is not trusted (the global timer ticks coarsely);
#: its cycles are converted at the session clock instead (kernels spin to at least this).
MIN_CLOCK_WINDOW_NS = 200_000


def chase_clock(clk, session_mhz: float) -> tuple[float, str]:
    """(MHz, source) for one chase from its clock window clk = [g0, g1, c0, c1]
    (kernels/common.cuh:clock_window_end): the SM clock while that chase ran ("chase"), or the
    session clock measured after the warm-up ("session") when the window is too short or broken."""
    g0, g1, c0, c1 = (int(x) for x in np.asarray(clk, dtype=np.uint64)[:4])
    if g1 - g0 >= MIN_CLOCK_WINDOW_NS and c1 > c0:
        return (c1 - c0) * 1e3 / (g1 - g0), "chase"
    return float(session_mhz), "session"


def clock_columns(clk, session_mhz: float) -> dict:
    """The raw clock-window columns of one chase's rows (docs/run-directory.md)."""
    mhz, source = chase_clock(clk, session_mhz)
    g0, g1, c0, c1 = (int(x) for x in np.asarray(clk, dtype=np.uint64)[:4])
    return {"chase_start_ns": np.int64(g0), "chase_end_ns": np.int64(g1), "chase_start_cycles": np.int64(c0),
            "chase_end_cycles": np.int64(c1), "chase_mhz": float(mhz), "clock_source": source}


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
def chase_frame(raw, overhead: float, mhz: float, per_sample: dict | None = None, **columns):
    """Rows of one chase: constant columns (footprint_bytes, stride_bytes, ...), per-sample
    columns (`per_sample`: arrays as long as raw), and per-sample latency in cycles and in ns at
    `mhz` (the chase's own clock where it was measured)."""
    import pandas as pd

    cyc = net_cycles(raw, overhead)
    data = {k: np.full(cyc.size, v) for k, v in columns.items()}
    for k, v in (per_sample or {}).items():
        data[k] = np.asarray(v)
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


def placement(loaded: bool, claimed: bool, target_sm: int | None, probe_sm: int, window: dict) -> tuple[bool, str]:
    """(valid, reason) of one loaded-latency chase, from its raw window stamps.

    Valid when the probe ran on the SM asked for, and, for a loaded level, inside the saturator's
    window: the first saturator block started no later than the probe's timed window and none
    had stopped before it ended (an idle level needs no saturator). The reason is '' when valid.
    """
    if not claimed:
        return False, f"no probe block landed on SM {target_sm}"
    if target_sm is not None and probe_sm != target_sm:
        return False, f"the probe ran on SM {probe_sm}, not on SM {target_sm} (the baseline's)"
    if not loaded:
        return True, ""
    if window["saturator_blocks_at_probe_start"] == 0 or window["saturator_start_ns"] > window["probe_start_ns"]:
        return False, "the saturator had not started when the probe's window began"
    if window["saturator_end_ns"] < window["probe_end_ns"]:
        return False, "a saturator block stopped before the probe's window ended"
    return True, ""


#: Column order of probes/loaded (docs/run-directory.md); `retouch`-only columns are -1 / NaN elsewhere.
LOADED_COLUMNS = ("level", "target_fraction", "throttle_ns", "access", "achieved_gbs", "bandwidth_fraction",
                  "probe_sm", "saturator_blocks", "blocks_left_probe_sm", "probe_start_ns", "probe_end_ns",
                  "probe_start_cycles", "probe_end_cycles", "saturator_start_ns", "saturator_end_ns",
                  "saturator_last_end_ns", "saturator_blocks_at_probe_start", "chase_mhz", "clock_source", "valid",
                  "invalid_reason", "attempt", "footprint_bytes", "round", "interval_ns", "age_cycles", "age_ns",
                  "prime_latency_cycles", "sample", "latency_cycles", "latency_ns")


def loaded_table(frames: list):
    """The frames of every loaded-latency launch as one table in LOADED_COLUMNS order."""
    import pandas as pd

    table = pd.concat(frames, ignore_index=True)
    for col, fill in (("round", -1), ("interval_ns", -1), ("age_cycles", -1)):
        table[col] = table[col].fillna(fill).astype(np.int64) if col in table else np.int64(fill)
    for col in ("age_ns", "prime_latency_cycles"):
        if col not in table:
            table[col] = np.float32(np.nan)
        table[col] = table[col].astype(np.float32)
    missing = [c for c in LOADED_COLUMNS if c not in table.columns]
    if missing:
        raise ProbeError(f"loaded-latency rows lack {', '.join(missing)}")
    return table[list(LOADED_COLUMNS)]


def line_ages(prime_start, retouch_start) -> np.ndarray:
    """Cycles between a line's prime and its re-touch, from the two accesses' 32-bit start stamps
    (kernels/loaded.cu:retouch_probe; modulo 2^32, so ages up to ~2 s at 2 GHz)."""
    a = np.asarray(prime_start, dtype=np.uint32)
    b = np.asarray(retouch_start, dtype=np.uint32)
    return (b - a).astype(np.int64)


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
