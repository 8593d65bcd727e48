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

from .engine import as_trace, check_capacity
from .trace import Trace


@njit(cache=True)
def _stack_distances(block, n_blocks):
    n = block.shape[0]
    last = np.full(max(n_blocks, 1), -1, dtype=np.int64)
    tree = np.zeros(n + 1, dtype=np.int32)  # Fenwick tree over positions 1..n
    dist = np.empty(n, dtype=np.int64)
    marks = 0
    for i in range(n):
        b = block[i]
        p = last[b]
        if p < 0:
            dist[i] = -1
        else:
            j = p + 1  # marks at positions <= p
            before = 0
            while j > 0:
                before += tree[j]
                j -= j & -j
            dist[i] = marks - before + 1
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
    return dist


def _blocks(trace_or_blocks) -> tuple[np.ndarray, int]:
    trace = trace_or_blocks if isinstance(trace_or_blocks, Trace) else as_trace(trace_or_blocks)
    return np.ascontiguousarray(trace.block, dtype=np.int32), int(trace.n_blocks)


def lru_stack_distances(block) -> np.ndarray:
    """LRU stack distance of every reference (int64; -1 for a block's first reference).

    `block` is a Trace or a 1-D array of block ids (factorised when they are not dense).
    """
    blocks, n_blocks = _blocks(block)
    return _stack_distances(blocks, n_blocks)


def lru_hit_counts(trace_or_blocks, capacities: Iterable) -> np.ndarray:
    """LRU hits at each capacity (int64), identical to simulating LRU at each one."""
    caps = np.asarray([check_capacity(c) for c in capacities], dtype=np.int64)
    dist = lru_stack_distances(trace_or_blocks)
    warm = dist[dist > 0]
    if len(warm) == 0:
        return np.zeros(len(caps), dtype=np.int64)
    # hits(C) = number of references with 1 <= distance <= C
    cumulative = np.cumsum(np.bincount(warm))
    return cumulative[np.minimum(caps, len(cumulative) - 1)].astype(np.int64)


def lru_hit_ratio_curve(trace_or_blocks, capacities: Iterable) -> np.ndarray:
    """LRU block hit ratio at each capacity (float64), from one pass over the trace."""
    caps = list(capacities)
    trace = trace_or_blocks if isinstance(trace_or_blocks, Trace) else as_trace(trace_or_blocks)
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
