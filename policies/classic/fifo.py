"""FIFO: evict the block inserted first; hits change nothing (libCacheSim `FIFO` semantics)."""
from __future__ import annotations

import numpy as np
from numba import njit

NAME = "fifo"
DESCRIPTION = "First in, first out: insertion order only, hits do not reorder"


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    # Only eviction removes blocks, always the oldest, so a ring of `capacity` slots is the
    # whole queue: the slot being overwritten holds the victim.
    slots = min(capacity, max(n_blocks, 1))
    ring = np.empty(slots, dtype=np.int32)
    resident = np.zeros(max(n_blocks, 1), dtype=np.uint8)
    n_resident = 0
    pos = 0
    evictions = 0
    for i in range(block.shape[0]):
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
    return evictions, n_resident
