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

from ._structs import NIL, new_lists, pop_tail, push_head
from .twoq import ghost_add, ghost_take

NAME = "s3fifo"
DESCRIPTION = "S3-FIFO: small probationary FIFO, main clock FIFO and a ghost queue of evicted ids"

_SMALL, _MAIN = 0, 1


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit, small_ratio=0.1, ghost_ratio=0.9,
           move_to_main_threshold=2):
    n = max(n_blocks, 1)
    prev, nxt, head, tail = new_lists(n_blocks, 2)  # small and main queues
    gprev, gnxt, ghead, gtail = new_lists(n_blocks, 1)  # ghost ids
    where = np.full(n, NIL, dtype=np.int8)
    in_ghost = np.zeros(n, dtype=np.uint8)
    freq = np.zeros(n, dtype=np.int32)
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
        if where[b] == _SMALL:
            hit[i] = 1
            freq[b] += 1
            continue
        hit_on_ghost = ghost_take(gprev, gnxt, ghead, gtail, in_ghost, b)
        if hit_on_ghost:
            n_ghost -= 1
        if where[b] == _MAIN:
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
                    x = pop_tail(prev, nxt, head, tail, _MAIN)
                    f = freq[x]
                    if f >= 1:
                        push_head(prev, nxt, head, tail, _MAIN, x)
                        freq[x] = min(f, 3) - 1
                    else:
                        where[x] = NIL
                        n_main -= 1
                        evictions += 1
                        break
            else:
                while n_small > 0:
                    x = pop_tail(prev, nxt, head, tail, _SMALL)
                    n_small -= 1
                    if freq[x] >= move_to_main_threshold:
                        push_head(prev, nxt, head, tail, _MAIN, x)
                        where[x] = _MAIN
                        freq[x] = 0
                        n_main += 1
                    else:
                        where[x] = NIL
                        evictions += 1
                        n_ghost = ghost_add(gprev, gnxt, ghead, gtail, in_ghost, n_ghost,
                                            ghost_size, x)
                        break
        if not hit_on_ghost and small_size <= 1:
            continue  # libCacheSim never puts a block into a small queue it would fill alone
        if hit_on_ghost or (not has_evicted and n_small >= small_size):
            push_head(prev, nxt, head, tail, _MAIN, b)
            where[b] = _MAIN
            n_main += 1
        else:
            push_head(prev, nxt, head, tail, _SMALL, b)
            where[b] = _SMALL
            n_small += 1
        freq[b] = 0
        resident = n_small + n_main
        if resident > max_resident:
            max_resident = resident
    return evictions, max_resident
