"""S3-FIFO (Yang et al., SOSP 2023) with libCacheSim's `S3FIFO` semantics (S3FIFO.c).

A small FIFO (10% of the capacity), a main FIFO (the rest) run as a clock with a 2-bit
counter, and a ghost FIFO of ids (90% of the capacity). Every hit adds one to the block's
counter. A miss whose id is in the ghost goes to the main queue; any other miss goes to the
small queue, except that before the first eviction a full small queue sends new blocks to
main. To make room: when main holds more than its share (or small is empty), main's tail
is re-inserted at the head with counter min(c, 3) - 1 while its counter is non-zero, else
evicted; otherwise small's tail moves to main (counter reset to 0) when its counter reached
the threshold (2), else it is evicted and its id enters the ghost, until one block has left.

Like libCacheSim, a block enters the small queue only when it is smaller than that queue,
so below 20 blocks only ghost hits are admitted, and below 10 blocks (no small queue at all,
a configuration libCacheSim rejects) nothing is cached.

Small and main only ever lose their oldest block, so they are rings; the ghost, which loses
ids anywhere, is a ring with tombstones (twoq.py).
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit
from sitsprof.common.prefetch import AHEAD, prefetch

from ._structs import grow
from .twoq import ghost_add, ghost_take, grow_ring, new_ghost, new_ring, new_rows, ring_pop, ring_push

__all__ = [
    "DESCRIPTION",
    "KERNEL",
    "MAIN",
    "NAME",
    "NUMBA_CACHE_DEPENDS",
    "PARAM_RANGES",
    "SMALL",
    "grow_state",
    "max_resident",
    "new_state",
    "new_stream_state",
    "replay_window",
    "stream_window",
]

#: inlined into this module's kernels: part of their cache key (common/numba_locator.py)
NUMBA_CACHE_DEPENDS = ("_structs.py", "twoq.py")

NAME = "s3fifo"
DESCRIPTION = "S3-FIFO: small probationary FIFO, main clock FIFO and a ghost queue of evicted ids"
# Valid values of the KERNEL's parameters (engine/params.py reads them; refused with the reason).
PARAM_RANGES = {
    "small_ratio": ("(0, 1)", "the small FIFO's share of the capacity; the main FIFO gets the rest, so each needs "
                              "some (at 0 nothing is admitted)"),
    "ghost_ratio": ("[0, 10]", "evicted ids the ghost remembers, as a multiple of the capacity; its ring is "
                               "allocated up front, and past 10x it only costs memory"),
    "move_to_main_threshold": ("int [1, inf)", "hits in the small FIFO that promote a block to main; at 0 every "
                                               "block is promoted and the small FIFO filters nothing"),
}

SMALL, MAIN = 1, 2  # state bits besides twoq.GHOST
# Columns of the per-block row: state bits, access counter, position in the ghost ring.
_STATE, _FREQ, _GPOS = 0, 1, 2


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit, small_ratio=0.1, ghost_ratio=0.9,
           move_to_main_threshold=2):
    rows = new_rows(n_blocks, np.int64(4), np.int64(0))  # per block: state bits, access counter, ghost position
    # Small and main only ever lose their oldest block (a main block with a non-zero counter
    # goes straight back to the head), so each is a ring; the ghost loses ids anywhere.
    small = new_ring(capacity, n_blocks)
    main = new_ring(capacity, n_blocks)
    ghost = new_ghost(np.int64(capacity * ghost_ratio))
    sc = np.zeros(12, dtype=np.int64)
    evictions = replay_window(block, 0, block.shape[0], rows, small, main, ghost, sc, capacity, hit, small_ratio,
                              ghost_ratio, move_to_main_threshold)
    return evictions, sc[_MAXRES]


# ----------------------------------------------------------------- resumable form (streaming)
# The loop over references lo..hi-1 with its state kept between calls: KERNEL is one window
# over the whole trace, engine/stream.py calls it chunk by chunk.
# The small and main rings have min(capacity, blocks so far) + 1 slots; until they reach
# capacity + 1 nothing has left them (twoq.grow_ring), so growing keeps their contents.
# Scalars: hs, ts, hm, tm, ghost (4), n_small, n_main, has_evicted, max_resident.
_HS, _TS, _HM, _TM, _GQ, _NSMALL, _NMAIN, _EVICTED, _MAXRES = 0, 1, 2, 3, 4, 8, 9, 10, 11


def new_state(n_blocks, capacity, small_ratio=0.1, ghost_ratio=0.9, move_to_main_threshold=2):
    """rows (state bits, counter, ghost position: one row per block), small, main, ghost rings, scalars."""
    n = max(int(n_blocks), 1)
    return (new_rows(n, 4, 0), new_ring(int(capacity), n), new_ring(int(capacity), n),
            new_ghost(int(np.int64(capacity * ghost_ratio))), np.zeros(12, dtype=np.int64))


def grow_state(state, n_blocks, capacity, small_ratio=0.1, ghost_ratio=0.9, move_to_main_threshold=2):
    rows, small, main, ghost, sc = state
    return (grow(rows, n_blocks, 0), grow_ring(small, n_blocks, capacity), grow_ring(main, n_blocks, capacity),
            ghost, sc)


def max_resident(state):
    return int(state[4][_MAXRES])


@njit(cache=True)
def replay_window(block, lo, hi, rows, small, main, ghost, sc, capacity, hit, small_ratio=0.1, ghost_ratio=0.9,
                  move_to_main_threshold=2):
    """Serve references lo..hi-1; returns the evictions."""
    state, freq, gpos = rows[:, _STATE], rows[:, _FREQ], rows[:, _GPOS]
    hs, ts, hm, tm = sc[_HS], sc[_TS], sc[_HM], sc[_TM]
    small_size = np.int64(capacity * small_ratio)
    main_size = capacity - small_size
    ghost_size = np.int64(capacity * ghost_ratio)
    gq = (sc[_GQ], sc[_GQ + 1], sc[_GQ + 2], sc[_GQ + 3])
    n_small, n_main = sc[_NSMALL], sc[_NMAIN]
    has_evicted = sc[_EVICTED] != 0
    max_resident = sc[_MAXRES]
    evictions = 0
    for i in range(lo, hi):
        if i + AHEAD < hi:  # the block served AHEAD references from now: its row on the way
            prefetch(state, block[i + AHEAD])
        b = block[i]
        if state[b] & SMALL:
            hit[i] = 1
            freq[b] += 1
            continue
        hit_on_ghost = ghost_take(state, b)
        if hit_on_ghost:
            gq = (gq[0] - 1, gq[1], gq[2], gq[3])
        if state[b] & MAIN:
            hit[i] = 1
            freq[b] += 1
            continue
        hit[i] = 0
        # libCacheSim admits a block only when it fits the small queue.
        if small_size < 1:
            continue
        while n_small + n_main + 1 > capacity:
            has_evicted = True
            if n_main > main_size or n_small == 0:
                # Main is a clock: recycle blocks with a non-zero counter, evict the first zero.
                while n_main > 0:
                    x, tm = ring_pop(main, tm)
                    f = freq[x]
                    if f >= 1:
                        hm = ring_push(main, hm, x)
                        freq[x] = min(f, 3) - 1
                    else:
                        state[x] &= ~MAIN
                        n_main -= 1
                        evictions += 1
                        break
            else:
                while n_small > 0:
                    x, ts = ring_pop(small, ts)
                    n_small -= 1
                    if freq[x] >= move_to_main_threshold:
                        hm = ring_push(main, hm, x)
                        state[x] = (state[x] & ~SMALL) | MAIN
                        freq[x] = 0
                        n_main += 1
                    else:
                        state[x] &= ~SMALL
                        evictions += 1
                        gq = ghost_add(ghost, gpos, state, gq, ghost_size, x)
                        break
        if not hit_on_ghost and small_size <= 1:
            continue  # libCacheSim never puts a block into a small queue it would fill alone
        if hit_on_ghost or (not has_evicted and n_small >= small_size):
            hm = ring_push(main, hm, b)
            state[b] |= MAIN
            n_main += 1
        else:
            hs = ring_push(small, hs, b)
            state[b] |= SMALL
            n_small += 1
        freq[b] = 0
        if n_small + n_main > max_resident:
            max_resident = n_small + n_main
    sc[_HS], sc[_TS], sc[_HM], sc[_TM] = hs, ts, hm, tm
    sc[_GQ], sc[_GQ + 1], sc[_GQ + 2], sc[_GQ + 3] = gq
    sc[_NSMALL], sc[_NMAIN], sc[_EVICTED], sc[_MAXRES] = n_small, n_main, 1 if has_evicted else 0, max_resident
    return evictions


def stream_window(state, block, lo, hi, capacity, hit, small_ratio=0.1, ghost_ratio=0.9, move_to_main_threshold=2):
    return replay_window(block, np.int64(lo), np.int64(hi), *state, np.int64(capacity), hit, float(small_ratio),
                         float(ghost_ratio), np.int64(move_to_main_threshold))


new_stream_state = new_state
