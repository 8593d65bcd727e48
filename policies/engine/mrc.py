"""One-pass LRU miss-ratio curves from stack distances (Mattson et al. 1970).

The LRU stack distance of a reference is 1 + the number of distinct blocks referenced since
the previous reference to the same block (-1 for a first reference). LRU with capacity C hits
exactly the references whose distance is at most C, so one pass gives the hit ratio at every
capacity. Distances come from a Fenwick tree over reference positions in which only the
latest reference of each block is marked: the distinct blocks since position p are the marks
after p. O(n log n) time, O(n) memory, compiled with numba.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numba import njit

from .capacity import check_capacity
from .replay import as_trace, dense_blocks


@njit(cache=True)
def _stack_pass(block, n_blocks, dist, hist):
    """One pass over the trace: writes each reference's distance into `dist` (-1 when cold)
    and/or counts distances into `hist` (hist[d] = references at distance d); either may be
    an empty array to skip it, so a curve needs no per-reference output."""
    n = block.shape[0]
    keep = dist.shape[0] > 0
    count = hist.shape[0] > 0
    last = np.full(max(n_blocks, 1), -1, dtype=np.int64)
    tree = np.zeros(n + 1, dtype=np.int32)  # Fenwick tree over positions 1..n
    marks = 0
    for i in range(n):
        b = block[i]
        p = last[b]
        if p < 0:
            if keep:
                dist[i] = -1
        else:
            j = p + 1  # marks at positions <= p
            before = 0
            while j > 0:
                before += tree[j]
                j -= j & -j
            d = marks - before + 1
            if keep:
                dist[i] = d
            if count:
                hist[d] += 1
            j = p + 1  # unmark p: b's latest reference moves to i
            while j <= n:
                tree[j] -= 1
                j += j & -j
            marks -= 1
        j = i + 1
        while j <= n:
            tree[j] += 1
            j += j & -j
        marks += 1
        last[b] = i


def _blocks(trace_or_blocks) -> tuple[np.ndarray, int]:
    return dense_blocks(as_trace(trace_or_blocks))


def lru_stack_distances(block) -> np.ndarray:
    """LRU stack distance of every reference (int64; -1 for a block's first reference).

    `block` is a Trace or a 1-D array of any integer ids (factorised into dense ids first).
    """
    blocks, n_blocks = _blocks(block)
    dist = np.empty(len(blocks), dtype=np.int64)
    _stack_pass(blocks, n_blocks, dist, np.empty(0, dtype=np.int64))
    return dist


def lru_hit_counts(trace_or_blocks, capacities: Iterable) -> np.ndarray:
    """LRU hits at each capacity (int64), identical to simulating LRU at each one."""
    caps = np.asarray([check_capacity(c) for c in capacities], dtype=np.int64)
    blocks, n_blocks = _blocks(trace_or_blocks)
    hist = np.zeros(n_blocks + 1, dtype=np.int64)  # a distance is at most n_blocks
    _stack_pass(blocks, n_blocks, np.empty(0, dtype=np.int64), hist)
    # hits(C) = number of references with 1 <= distance <= C
    cumulative = np.cumsum(hist)
    return cumulative[np.minimum(caps, n_blocks)]


def lru_hit_ratio_curve(trace_or_blocks, capacities: Iterable) -> np.ndarray:
    """LRU block hit ratio at each capacity (float64), from one pass over the trace."""
    caps = list(capacities)
    trace = as_trace(trace_or_blocks)
    n = len(trace)
    hits = lru_hit_counts(trace, caps)
    return hits / n if n else np.zeros(len(caps))


def curve_capacities(n_blocks: int, points: int = 100) -> np.ndarray:
    """`points` capacities spread evenly from n_blocks/points to n_blocks (distinct, >= 1)."""
    if points < 1:
        raise ValueError(f"points must be at least 1, got {points}")
    top = max(int(n_blocks), 1)
    caps = np.unique(np.ceil(np.linspace(top / points, top, points)).astype(np.int64))
    return caps[caps >= 1]
