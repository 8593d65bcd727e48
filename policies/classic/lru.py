"""LRU: evict the least recently used block (libCacheSim `LRU` semantics)."""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit
from sitsprof.common.prefetch import AHEAD, prefetch

from ._structs import NIL, grow, move_to_head_s, push_head_s, unlink_s

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

NAME = "lru"
DESCRIPTION = "Least recently used: a hit moves the block to the head, evict from the tail"


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    n = max(n_blocks, 1)
    prev = np.full(n, NIL, dtype=np.int32)
    nxt = np.full(n, NIL, dtype=np.int32)
    resident = np.zeros(n, dtype=np.uint8)
    sc = np.array([NIL, NIL, 0], dtype=np.int64)
    evictions = replay_window(block, 0, block.shape[0], prev, nxt, resident, sc, capacity, hit)
    # residency only grows until the cache is full, then stays there
    return evictions, sc[_NRES]


# ----------------------------------------------------------------- resumable form (streaming)
# The loop over references lo..hi-1 with its state kept between calls: KERNEL is one window
# over the whole trace, engine/stream.py calls it chunk by chunk.
_HEAD, _TAIL, _NRES = 0, 1, 2


def new_state(n_blocks, capacity):
    """prev, nxt, resident (one entry per block, grown by `grow_state`), scalars."""
    n = max(int(n_blocks), 1)
    sc = np.array([NIL, NIL, 0], dtype=np.int64)
    return (np.full(n, NIL, dtype=np.int32), np.full(n, NIL, dtype=np.int32), np.zeros(n, dtype=np.uint8), sc)


def grow_state(state, n_blocks, capacity):
    prev, nxt, resident, sc = state
    return grow(prev, n_blocks, NIL), grow(nxt, n_blocks, NIL), grow(resident, n_blocks, 0), sc


def max_resident(state):
    return int(state[3][_NRES])


@njit(cache=True)
def replay_window(block, lo, hi, prev, nxt, resident, sc, capacity, hit):
    """Serve references lo..hi-1 (hit flags at the same indices); returns the evictions."""
    head, tail, n_resident = np.int32(sc[_HEAD]), np.int32(sc[_TAIL]), sc[_NRES]
    evictions = 0
    for i in range(lo, hi):
        if i + AHEAD < hi:  # the block served AHEAD references from now: its lines on the way
            ahead = block[i + AHEAD]
            prefetch(resident, ahead)
            prefetch(prev, ahead)
            prefetch(nxt, ahead)
        b = block[i]
        if resident[b]:
            hit[i] = 1
            head, tail = move_to_head_s(prev, nxt, head, tail, b)
            continue
        hit[i] = 0
        if n_resident >= capacity:
            victim = tail
            head, tail = unlink_s(prev, nxt, head, tail, victim)
            resident[victim] = 0
            evictions += 1
        else:
            n_resident += 1
        head, tail = push_head_s(prev, nxt, head, tail, b)
        resident[b] = 1
    sc[_HEAD], sc[_TAIL], sc[_NRES] = head, tail, n_resident
    return evictions


def stream_window(state, block, lo, hi, capacity, hit):
    return replay_window(block, np.int64(lo), np.int64(hi), *state, np.int64(capacity), hit)


new_stream_state = new_state
