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

from ._structs import NIL, move_to_head, new_lists, pop_tail, push_head, unlink

NAME = "2q"
DESCRIPTION = "2Q: first-time blocks in a FIFO (A1in), re-referenced ones in an LRU (Am), ghost A1out"

_AIN, _AM = 0, 1


@njit(cache=True)
def ghost_take(gprev, gnxt, ghead, gtail, in_ghost, x):
    """Remove id `x` from a ghost FIFO (list 0) if it is there; True when it was."""
    if not in_ghost[x]:
        return False
    unlink(gprev, gnxt, ghead, gtail, 0, x)
    in_ghost[x] = 0
    return True


@njit(cache=True)
def ghost_add(gprev, gnxt, ghead, gtail, in_ghost, n_ghost, limit, x):
    """libCacheSim's FIFO `get` on a ghost queue of ids: add `x` unless present, dropping the
    oldest ids to stay within `limit` (nothing when `limit` < 1). Returns the new count."""
    if limit < 1 or in_ghost[x]:
        return n_ghost
    while n_ghost + 1 > limit:
        g = pop_tail(gprev, gnxt, ghead, gtail, 0)
        in_ghost[g] = 0
        n_ghost -= 1
    push_head(gprev, gnxt, ghead, gtail, 0, x)
    in_ghost[x] = 1
    return n_ghost + 1


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit, ain_ratio=0.25, aout_ratio=0.5):
    n = max(n_blocks, 1)
    prev, nxt, head, tail = new_lists(n_blocks, 2)  # A1in and Am
    gprev, gnxt, ghead, gtail = new_lists(n_blocks, 1)  # A1out ids
    where = np.full(n, NIL, dtype=np.int8)
    in_out = np.zeros(n, dtype=np.uint8)
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
        if where[b] == _AIN:
            hit[i] = 1
            continue
        hit_on_ghost = ghost_take(gprev, gnxt, ghead, gtail, in_out, b)
        if hit_on_ghost:
            n_out -= 1
        if where[b] == _AM:
            hit[i] = 1
            move_to_head(prev, nxt, head, tail, _AM, b)
            continue
        hit[i] = 0
        if ain_size < 1:
            continue  # libCacheSim admits only blocks that fit A1in
        while n_in + n_am + 1 > capacity:
            evictions += 1
            if n_in > ain_size:
                x = pop_tail(prev, nxt, head, tail, _AIN)
                where[x] = NIL
                n_in -= 1
                n_out = ghost_add(gprev, gnxt, ghead, gtail, in_out, n_out, aout_size, x)
            else:
                x = pop_tail(prev, nxt, head, tail, _AM)
                where[x] = NIL
                n_am -= 1
        if hit_on_ghost:
            if am_size < 1:
                continue
            # Am is a cache of its own here: it makes room within its share first.
            while n_am + 1 > am_size:
                x = pop_tail(prev, nxt, head, tail, _AM)
                where[x] = NIL
                n_am -= 1
                evictions += 1
            push_head(prev, nxt, head, tail, _AM, b)
            where[b] = _AM
            n_am += 1
        else:
            push_head(prev, nxt, head, tail, _AIN, b)
            where[b] = _AIN
            n_in += 1
        resident = n_in + n_am
        if resident > max_resident:
            max_resident = resident
    return evictions, max_resident
