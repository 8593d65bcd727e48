"""Window signals: what the adaptive policies measure per window of the trace, and the action matrix.

The SITS controller and the semantic shards decide on the same two signals, computed here
once so they cannot drift apart:

- access-pattern entropy H: Shannon entropy (bits) of the window's block ids hashed into
  256 buckets (0 <= H <= 8); `entropy_bits` is the one entropy computation;
- latency sensitivity d: P99 TTFT (ms) of the window's requests, from the cost model.

Larger windows are sampled: SAMPLE_RUNS evenly spaced runs of consecutive requests /
references (consecutive runs read a few cache lines where a strided sample reads one per
item). score = a*min(1, H/H_CAP) + (1-a)*min(1, d/D_CAP_MS), with `a` adapted to load; the
action matrix keeps, migrates, or defers to the score (docstrings below and in sits.py).
Window bounds (by trace time or by reference count, at request boundaries) are here too.
"""
from __future__ import annotations

import math

import numpy as np

from sitsprof.common.jit import njit

from ..cost.costmodel import kth_smallest, ttft_kernel
from ..traces.hashing import GOLDEN
from ..traces.trace import Trace

__all__ = [
    "D_CAP_MS",
    "ENTROPY_SAMPLE",
    "H_CAP",
    "KEEP_D",
    "KEEP_H",
    "MIGRATE_D",
    "MIGRATE_H",
    "P99_SAMPLE",
    "SAMPLE_RUNS",
    "action_cell",
    "adapt_alpha",
    "count_buckets",
    "entropy_bits",
    "migration_score",
    "p99",
    "reference_windows",
    "time_windows",
    "window_bounds",
    "window_entropy",
    "window_signals",
]

H_CAP, D_CAP_MS = 8.0, 200.0
P99_SAMPLE = 1024  # a window's P99 is taken over at most this many evenly spaced requests
ENTROPY_SAMPLE = 4096  # and its entropy over at most this many references
SAMPLE_RUNS = 32  # both taken as this many evenly spaced runs of consecutive items
KEEP_H, KEEP_D = 2.5, 50.0
MIGRATE_H, MIGRATE_D = 6.0, 150.0


# ---------------------------------------------------------------------------- the action matrix


def migration_score(h_bits: float, d_ms: float, alpha: float = 0.6) -> float:
    """score = a*min(1, H/8) + (1-a)*min(1, d/200)."""
    return alpha * min(1.0, max(h_bits, 0.0) / H_CAP) + (1.0 - alpha) * min(1.0, max(d_ms, 0.0) / D_CAP_MS)


def action_cell(h_bits: float, d_ms: float) -> str:
    """The action-matrix cell: ``keep`` (H<2.5 and d<50), ``migrate`` (H>6 and d>150), else ``score``."""
    if h_bits < KEEP_H and d_ms < KEEP_D:
        return "keep"
    if h_bits > MIGRATE_H and d_ms > MIGRATE_D:
        return "migrate"
    return "score"


def adapt_alpha(alpha0: float, load: float) -> float:
    """Weight of entropy vs latency under `load` (window request rate / the run's mean rate).

    Above the mean rate latency matters more: a falls by 0.1 per unit of excess load; below
    it, entropy matters more: a rises by 0.1 per unit of deficit; kept within [0.2, 0.8].
    """
    if not math.isfinite(load):
        return alpha0
    return float(min(0.8, max(0.2, alpha0 - 0.1 * (load - 1.0))))


# ---------------------------------------------------------------------------- signals


@njit(cache=True)
def p99(values, m):
    """np.percentile(values[:m], 99) (linear interpolation), compiled; 0 when m == 0."""
    if m <= 0:
        return 0.0
    pos = 0.99 * (m - 1)
    lo = int(pos)
    a = values[:m].copy()
    k = kth_smallest(a, np.int64(lo))  # a selection, not a sort: linear in m (np.partition's compile is ~9 s)
    if lo + 1 >= m:
        return k
    return k + (a[lo + 1:].min() - k) * (pos - lo)


@njit(cache=True)
def count_buckets(block, lo, hi, stride, counts):
    """Add block[lo:hi:stride] to the 256-bucket histogram `counts` (the top 8 bits of
    id * GOLDEN); returns how many references it added."""
    n = 0
    for i in range(lo, hi, stride):
        counts[(np.uint64(block[i]) * GOLDEN) >> np.uint64(56)] += 1
        n += 1
    return n


@njit(cache=True)
def entropy_bits(counts, n):
    """Shannon entropy (bits) of a histogram of `n` items: the one entropy of the adaptive policies."""
    h = 0.0
    for c in counts:
        if c > 0:
            q = c / n
            h -= q * np.log2(q)
    return h


@njit(cache=True)
def window_entropy(block, lo, hi, stride=1):
    """Access-pattern entropy H of block[lo:hi:stride]: ids hashed into 256 buckets, so 0 <= H <= 8 bits."""
    counts = np.zeros(256, dtype=np.int64)
    return entropy_bits(counts, count_buckets(block, lo, hi, stride, counts))


@njit(cache=True)
def window_signals(block, lo, hi, r0, r1, offsets, hit, tokens, block_tokens, index, table, prefix_only, sample):
    """A window's latency sensitivity d (P99 TTFT in ms) and entropy H (bits), in one compiled
    call. Small windows use every request / reference; larger ones SAMPLE_RUNS evenly spaced
    runs of consecutive ones, P99_SAMPLE requests and ENTROPY_SAMPLE references in all
    (consecutive runs read a few cache lines where a strided sample reads one per item)."""
    n_req = r1 - r0
    if n_req <= P99_SAMPLE:
        ttft_kernel(r0, r1, np.int64(1), offsets, hit, tokens, block_tokens, index, table, prefix_only, sample)
        m = n_req
    else:
        run = P99_SAMPLE // SAMPLE_RUNS
        for c in range(SAMPLE_RUNS):
            s = r0 + c * (n_req - run) // (SAMPLE_RUNS - 1)
            ttft_kernel(s, s + run, np.int64(1), offsets, hit, tokens, block_tokens, index, table, prefix_only,
                        sample[c * run:(c + 1) * run])
        m = P99_SAMPLE
    d_ms = p99(sample, m) * 1e3
    n_ref = hi - lo
    if n_ref <= ENTROPY_SAMPLE:
        return d_ms, window_entropy(block, lo, hi, 1)
    counts = np.zeros(256, dtype=np.int64)
    run = ENTROPY_SAMPLE // SAMPLE_RUNS
    for c in range(SAMPLE_RUNS):
        s = lo + c * (n_ref - run) // (SAMPLE_RUNS - 1)
        count_buckets(block, s, s + run, 1, counts)
    return d_ms, entropy_bits(counts, run * SAMPLE_RUNS)


# ---------------------------------------------------------------------------- windows


def window_bounds(trace: Trace, window_s: float, window_refs: int, offsets: np.ndarray | None = None) -> np.ndarray:
    """Reference offsets of windows: a new window starts at the first request at or after
    window_start + window_s (window_s <= 0: time is ignored), or once the window holds
    window_refs references."""
    offsets = trace.request_offsets if offsets is None else offsets
    if len(offsets) <= 1:
        return np.array([0, 0], dtype=np.int64)
    refs = max(int(window_refs), 1)
    if window_s <= 0:
        return reference_windows(offsets, refs)
    # a zero-stride time column (no times) stays a view: the loop reads one value per request
    return time_windows(np.asarray(trace.time, dtype=np.float64), offsets, float(window_s), refs)


@njit(cache=True)
def time_windows(times, offsets, window_s, refs):
    """window_bounds with time, in two compiled passes over the requests (count, then fill)
    and no per-request temporary. Request r starts at t = times[offsets[r]] in time slot
    floor((t - t0) / window_s); within a run of one slot, sub-window (offsets[r] - the run's
    first reference) // refs. A window starts where either changes."""
    n_req = offsets.shape[0] - 1
    t0 = times[offsets[0]]
    out = np.empty(0, dtype=np.int64)
    for fill in range(2):
        m = 0
        slot_prev = np.int64(0)
        sub_prev = np.int64(0)
        run_start = offsets[0]
        for r in range(n_req):
            first = offsets[r]
            slot = np.int64(np.floor((times[first] - t0) / window_s))
            if r > 0 and slot != slot_prev:
                run_start = first
            sub = (first - run_start) // refs
            if r == 0 or slot != slot_prev or sub != sub_prev:
                if fill:
                    out[m] = first
                m += 1
            slot_prev = slot
            sub_prev = sub
        if fill:
            out[m] = offsets[n_req]
        else:
            out = np.empty(m + 1, dtype=np.int64)
    return out


def reference_windows(offsets: np.ndarray, window_refs: int) -> np.ndarray:
    """Window offsets by reference count: each window starts at the first request starting at
    or after a multiple of window_refs."""
    first = offsets[:-1]
    if len(first) == 0:
        return np.array([0, 0], dtype=np.int64)
    targets = np.arange(0, int(offsets[-1]), max(int(window_refs), 1), dtype=np.int64)
    req_starts = np.unique(np.searchsorted(first, targets, side="left"))
    req_starts = req_starts[req_starts < len(first)]
    return np.concatenate((first[req_starts], [offsets[-1]])).astype(np.int64)
