"""SIEVE (Zhang et al., NSDI 2024) with libCacheSim's `Sieve` semantics (Sieve.c).

New blocks enter at the head with their visited bit clear; a hit only sets the bit. The hand
walks from the tail towards the head (wrapping to the tail), clearing set bits, and evicts
the first block whose bit is clear; it then rests on that block's head-side neighbour.
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit

from ._structs import NIL, grow, push_head_s, unlink_s

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

NAME = "sieve"
DESCRIPTION = "SIEVE: FIFO queue with a visited bit and a hand that sifts from tail to head"


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    n = max(n_blocks, 1)
    prev = np.full(n, NIL, dtype=np.int32)
    nxt = np.full(n, NIL, dtype=np.int32)
    # 0: not resident, 1: resident, 2: resident and visited
    state = np.zeros(n, dtype=np.uint8)
    sc = np.array([NIL, NIL, NIL, 0], dtype=np.int64)
    evictions = replay_window(block, 0, block.shape[0], prev, nxt, state, sc, capacity, hit)
    return evictions, sc[_NRES]


# ----------------------------------------------------------------- resumable form (streaming)
# The loop over references lo..hi-1 with its state kept between calls: KERNEL is one window
# over the whole trace, engine/stream.py calls it chunk by chunk.
_HEAD, _TAIL, _HAND, _NRES = 0, 1, 2, 3


def new_state(n_blocks, capacity):
    """prev, nxt, state (one entry per block), scalars (head, tail, hand, n_resident)."""
    n = max(int(n_blocks), 1)
    return (np.full(n, NIL, dtype=np.int32), np.full(n, NIL, dtype=np.int32), np.zeros(n, dtype=np.uint8),
            np.array([NIL, NIL, NIL, 0], dtype=np.int64))


def grow_state(state, n_blocks, capacity):
    prev, nxt, st, sc = state
    return grow(prev, n_blocks, NIL), grow(nxt, n_blocks, NIL), grow(st, n_blocks, 0), sc


def max_resident(state):
    return int(state[3][_NRES])


@njit(cache=True)
def replay_window(block, lo, hi, prev, nxt, state, sc, capacity, hit):
    """Serve references lo..hi-1; returns the evictions."""
    head, tail, hand = np.int32(sc[_HEAD]), np.int32(sc[_TAIL]), np.int32(sc[_HAND])
    n_resident = sc[_NRES]
    evictions = 0
    for i in range(lo, hi):
        b = block[i]
        if state[b]:
            hit[i] = 1
            state[b] = 2
            continue
        hit[i] = 0
        if n_resident >= capacity:
            obj = hand if hand != NIL else tail
            while state[obj] == 2:
                state[obj] = 1
                obj = prev[obj] if prev[obj] != NIL else tail
            hand = prev[obj]
            head, tail = unlink_s(prev, nxt, head, tail, obj)
            state[obj] = 0
            evictions += 1
        else:
            n_resident += 1
        head, tail = push_head_s(prev, nxt, head, tail, b)
        state[b] = 1
    sc[_HEAD], sc[_TAIL], sc[_HAND], sc[_NRES] = head, tail, hand, n_resident
    return evictions


def stream_window(state, block, lo, hi, capacity, hit):
    return replay_window(block, np.int64(lo), np.int64(hi), *state, np.int64(capacity), hit)


new_stream_state = new_state
