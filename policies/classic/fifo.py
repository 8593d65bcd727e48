"""FIFO: evict the block inserted first; hits change nothing (libCacheSim `FIFO` semantics)."""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit

from ._structs import grow

__all__ = [
    "DESCRIPTION",
    "KERNEL",
    "NAME",
    "NUMBA_CACHE_DEPENDS",
    "grow_state",
    "max_resident",
    "new_state",
    "new_stream_state",
    "replay_window",
    "stream_window",
]

#: inlined into this module's kernels: part of their cache key (common/numba_locator.py)
NUMBA_CACHE_DEPENDS = ("_structs.py",)

NAME = "fifo"
DESCRIPTION = "First in, first out: insertion order only, hits do not reorder"


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    # Only eviction removes blocks, always the oldest, so a ring of `capacity` slots is the
    # whole queue: the slot being overwritten holds the victim.
    ring = np.empty(min(capacity, max(n_blocks, 1)), dtype=np.int32)
    resident = np.zeros(max(n_blocks, 1), dtype=np.uint8)
    sc = np.zeros(2, dtype=np.int64)
    evictions = replay_window(block, 0, block.shape[0], ring, resident, sc, capacity, hit)
    return evictions, sc[_NRES]


# ----------------------------------------------------------------- resumable form (streaming)
# The loop over references lo..hi-1 with its state kept between calls: KERNEL is one window
# over the whole trace, engine/stream.py calls it chunk by chunk.
# The ring has min(capacity, blocks so far) slots: until it reaches the capacity nothing is
# evicted, so it holds ring[0:n_resident] and growing it keeps that.
_POS, _NRES = 0, 1


def new_state(n_blocks, capacity):
    """ring, resident (one entry per block), scalars (pos, n_resident)."""
    n = max(int(n_blocks), 1)
    return (np.empty(max(min(int(capacity), n), 1), dtype=np.int32), np.zeros(n, dtype=np.uint8),
            np.zeros(2, dtype=np.int64))


def grow_state(state, n_blocks, capacity):
    ring, resident, sc = state
    slots = max(min(int(capacity), int(n_blocks)), 1)
    if slots > ring.shape[0]:
        ring = grow(ring, slots, 0)
        sc[_POS] = sc[_NRES] % slots
    return ring, grow(resident, n_blocks, 0), sc


def max_resident(state):
    return int(state[2][_NRES])


@njit(cache=True)
def replay_window(block, lo, hi, ring, resident, sc, capacity, hit):
    """Serve references lo..hi-1; returns the evictions."""
    slots = ring.shape[0]
    pos, n_resident = sc[_POS], sc[_NRES]
    evictions = 0
    for i in range(lo, hi):
        b = block[i]
        if resident[b]:
            hit[i] = 1
            continue
        hit[i] = 0
        if n_resident >= capacity:
            resident[ring[pos]] = 0
            evictions += 1
        else:
            n_resident += 1
        ring[pos] = b
        resident[b] = 1
        pos += 1
        if pos == slots:
            pos = 0
    sc[_POS], sc[_NRES] = pos, n_resident
    return evictions


def stream_window(state, block, lo, hi, capacity, hit):
    return replay_window(block, np.int64(lo), np.int64(hi), *state, np.int64(capacity), hit)


new_stream_state = new_state
