"""2Q (Johnson & Shasha, VLDB 1994) with libCacheSim's `TwoQ` semantics (TwoQ.c).

A1in is a FIFO of first-time blocks (25% of the capacity), A1out a FIFO of ids evicted from
A1in (50% of the capacity, ids only) and Am an LRU of blocks re-referenced after leaving
A1in. A hit in A1in changes nothing; a hit in Am moves the block to Am's head. A miss whose
id is in A1out goes to Am (which keeps itself within capacity - |A1in share| by dropping its
tail); any other miss goes to A1in. To make room: when A1in holds more than its share, its
oldest block leaves for A1out, otherwise Am's least recently used block is evicted.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._structs import NIL, move_to_head_s, push_head_s, unlink_s

NAME = "2q"
DESCRIPTION = "2Q: first-time blocks in a FIFO (A1in), re-referenced ones in an LRU (Am), ghost A1out"

# Per-block state bits, shared with S3-FIFO: which queue holds the block, and whether its id
# is in the ghost queue.
IN_A, IN_B, GHOST = 1, 2, 4
# Columns of the per-block row: links of the resident queues, links of the ghost queue, state.
_PREV, _NXT, _GPREV, _GNXT, _STATE = 0, 1, 2, 3, 4


@njit(cache=True)
def new_rows(n_blocks):
    """(n, 8) int32 rows: columns 0-3 are links (NIL), the rest start at 0."""
    rows = np.zeros((max(n_blocks, 1), 8), dtype=np.int32)
    rows[:, :4] = NIL
    return rows


@njit(cache=True, inline="always")
def ghost_take(gprev, gnxt, ghead, gtail, state, x):
    """Remove id `x` from a ghost FIFO if it is there; returns (was there, head, tail)."""
    if not state[x] & GHOST:
        return False, ghead, gtail
    ghead, gtail = unlink_s(gprev, gnxt, ghead, gtail, x)
    state[x] &= ~GHOST
    return True, ghead, gtail


@njit(cache=True, inline="always")
def ghost_add(gprev, gnxt, ghead, gtail, state, n_ghost, limit, x):
    """libCacheSim's FIFO `get` on a ghost queue of ids: add `x` unless present, dropping the
    oldest ids to stay within `limit` (nothing when `limit` < 1). Returns (count, head, tail)."""
    if limit < 1 or state[x] & GHOST:
        return n_ghost, ghead, gtail
    while n_ghost + 1 > limit:
        g = gtail
        ghead, gtail = unlink_s(gprev, gnxt, ghead, gtail, g)
        state[g] &= ~GHOST
        n_ghost -= 1
    ghead, gtail = push_head_s(gprev, gnxt, ghead, gtail, x)
    state[x] |= GHOST
    return n_ghost + 1, ghead, gtail


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit, ain_ratio=0.25, aout_ratio=0.5):
    rows = new_rows(n_blocks)
    prev, nxt, gprev, gnxt = rows[:, _PREV], rows[:, _NXT], rows[:, _GPREV], rows[:, _GNXT]
    state = rows[:, _STATE]  # IN_A: in A1in, IN_B: in Am, GHOST: id in A1out
    hi = ti = hm = tm = ho = to = np.int32(NIL)  # ends of A1in, Am, A1out
    ain_size = np.int64(capacity * ain_ratio)
    aout_size = np.int64(capacity * aout_ratio)
    am_size = capacity - ain_size
    n_in = 0
    n_am = 0
    n_out = 0
    evictions = 0
    max_resident = 0
    for i in range(block.shape[0]):
        b = block[i]
        if state[b] & IN_A:
            hit[i] = 1
            continue
        hit_on_ghost, ho, to = ghost_take(gprev, gnxt, ho, to, state, b)
        if hit_on_ghost:
            n_out -= 1
        if state[b] & IN_B:
            hit[i] = 1
            hm, tm = move_to_head_s(prev, nxt, hm, tm, b)
            continue
        hit[i] = 0
        if ain_size < 1:
            continue  # libCacheSim admits only blocks that fit A1in
        while n_in + n_am + 1 > capacity:
            evictions += 1
            if n_in > ain_size:
                x = ti
                hi, ti = unlink_s(prev, nxt, hi, ti, x)
                state[x] &= ~IN_A
                n_in -= 1
                n_out, ho, to = ghost_add(gprev, gnxt, ho, to, state, n_out, aout_size, x)
            else:
                x = tm
                hm, tm = unlink_s(prev, nxt, hm, tm, x)
                state[x] &= ~IN_B
                n_am -= 1
        if hit_on_ghost:
            if am_size < 1:
                continue
            # Am is a cache of its own here: it makes room within its share first.
            while n_am + 1 > am_size:
                x = tm
                hm, tm = unlink_s(prev, nxt, hm, tm, x)
                state[x] &= ~IN_B
                n_am -= 1
                evictions += 1
            hm, tm = push_head_s(prev, nxt, hm, tm, b)
            state[b] |= IN_B
            n_am += 1
        else:
            hi, ti = push_head_s(prev, nxt, hi, ti, b)
            state[b] |= IN_A
            n_in += 1
        if n_in + n_am > max_resident:
            max_resident = n_in + n_am
    return evictions, max_resident
