"""S3-FIFO (Yang et al., SOSP 2023) with libCacheSim's `S3FIFO` semantics (S3FIFO.c).

A small FIFO (10% of the capacity), a main FIFO (the rest) run as a clock with a 2-bit
counter, and a ghost FIFO of ids (90% of the capacity). Every hit adds one to the block's
counter. A miss whose id is in the ghost goes to the main queue; any other miss goes to the
small queue, except that before the first eviction a full small queue sends new blocks to
main. To make room: when main holds more than its share (or small is empty), main's tail
is re-inserted at the head with counter min(c, 3) - 1 while its counter is non-zero, else
evicted; otherwise small's tail moves to main (counter reset to 0) when its counter reached
the threshold (2), else it is evicted and its id enters the ghost, until one block has left.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._structs import NIL, push_head_s, unlink_s
from .twoq import ghost_add, ghost_take, new_rows

NAME = "s3fifo"
DESCRIPTION = "S3-FIFO: small probationary FIFO, main clock FIFO and a ghost queue of evicted ids"

SMALL, MAIN = 1, 2  # state bits besides twoq.GHOST
# Columns of the per-block row: queue links, ghost links, state bits, access counter.
_PREV, _NXT, _GPREV, _GNXT, _STATE, _FREQ = 0, 1, 2, 3, 4, 5


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit, small_ratio=0.1, ghost_ratio=0.9,
           move_to_main_threshold=2):
    rows = new_rows(n_blocks)
    prev, nxt, gprev, gnxt = rows[:, _PREV], rows[:, _NXT], rows[:, _GPREV], rows[:, _GNXT]
    state, freq = rows[:, _STATE], rows[:, _FREQ]
    hs = ts = hm = tm = hg = tg = np.int32(NIL)  # ends of small, main, ghost
    small_size = np.int64(capacity * small_ratio)
    main_size = capacity - small_size
    ghost_size = np.int64(capacity * ghost_ratio)
    n_small = 0
    n_main = 0
    n_ghost = 0
    has_evicted = False
    evictions = 0
    max_resident = 0
    for i in range(block.shape[0]):
        b = block[i]
        if state[b] & SMALL:
            hit[i] = 1
            freq[b] += 1
            continue
        hit_on_ghost, hg, tg = ghost_take(gprev, gnxt, hg, tg, state, b)
        if hit_on_ghost:
            n_ghost -= 1
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
                    x = tm
                    hm, tm = unlink_s(prev, nxt, hm, tm, x)
                    f = freq[x]
                    if f >= 1:
                        hm, tm = push_head_s(prev, nxt, hm, tm, x)
                        freq[x] = min(f, 3) - 1
                    else:
                        state[x] &= ~MAIN
                        n_main -= 1
                        evictions += 1
                        break
            else:
                while n_small > 0:
                    x = ts
                    hs, ts = unlink_s(prev, nxt, hs, ts, x)
                    n_small -= 1
                    if freq[x] >= move_to_main_threshold:
                        hm, tm = push_head_s(prev, nxt, hm, tm, x)
                        state[x] = (state[x] & ~SMALL) | MAIN
                        freq[x] = 0
                        n_main += 1
                    else:
                        state[x] &= ~SMALL
                        evictions += 1
                        n_ghost, hg, tg = ghost_add(gprev, gnxt, hg, tg, state, n_ghost, ghost_size, x)
                        break
        if not hit_on_ghost and small_size <= 1:
            continue  # libCacheSim never puts a block into a small queue it would fill alone
        if hit_on_ghost or (not has_evicted and n_small >= small_size):
            hm, tm = push_head_s(prev, nxt, hm, tm, b)
            state[b] |= MAIN
            n_main += 1
        else:
            hs, ts = push_head_s(prev, nxt, hs, ts, b)
            state[b] |= SMALL
            n_small += 1
        freq[b] = 0
        if n_small + n_main > max_resident:
            max_resident = n_small + n_main
    return evictions, max_resident
