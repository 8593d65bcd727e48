"""LRU: evict the least recently used block (libCacheSim `LRU` semantics)."""
from __future__ import annotations

import numpy as np
from numba import njit

from ._structs import move_to_head, new_lists, pop_tail, push_head

NAME = "lru"
DESCRIPTION = "Least recently used: a hit moves the block to the head, evict from the tail"


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    prev, nxt, head, tail = new_lists(n_blocks, 1)
    resident = np.zeros(max(n_blocks, 1), dtype=np.uint8)
    n_resident = 0
    evictions = 0
    max_resident = 0
    for i in range(block.shape[0]):
        b = block[i]
        if resident[b]:
            hit[i] = 1
            move_to_head(prev, nxt, head, tail, 0, b)
            continue
        hit[i] = 0
        if n_resident >= capacity:
            victim = pop_tail(prev, nxt, head, tail, 0)
            resident[victim] = 0
            n_resident -= 1
            evictions += 1
        push_head(prev, nxt, head, tail, 0, b)
        resident[b] = 1
        n_resident += 1
        if n_resident > max_resident:
            max_resident = n_resident
    return evictions, max_resident
