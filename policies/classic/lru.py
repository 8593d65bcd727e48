"""LRU: evict the least recently used block (libCacheSim `LRU` semantics)."""
from __future__ import annotations

import numpy as np
from numba import njit

from ._structs import NIL, move_to_head_s, new_lists, push_head_s, unlink_s

NAME = "lru"
DESCRIPTION = "Least recently used: a hit moves the block to the head, evict from the tail"


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    prev, nxt, _, _ = new_lists(n_blocks, 1)
    head = tail = np.int32(NIL)
    resident = np.zeros(max(n_blocks, 1), dtype=np.uint8)
    n_resident = 0
    evictions = 0
    for i in range(block.shape[0]):
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
    # residency only grows until the cache is full, then stays there
    return evictions, n_resident
