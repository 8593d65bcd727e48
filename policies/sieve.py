"""SIEVE (Zhang et al., NSDI 2024) with libCacheSim's `Sieve` semantics (Sieve.c).

New blocks enter at the head with their visited bit clear; a hit only sets the bit. The hand
walks from the tail towards the head (wrapping to the tail), clearing set bits, and evicts
the first block whose bit is clear; it then rests on that block's head-side neighbour.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._structs import NIL, new_lists, push_head, unlink

NAME = "sieve"
DESCRIPTION = "SIEVE: FIFO queue with a visited bit and a hand that sifts from tail to head"


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    prev, nxt, head, tail = new_lists(n_blocks, 1)
    resident = np.zeros(max(n_blocks, 1), dtype=np.uint8)
    visited = np.zeros(max(n_blocks, 1), dtype=np.uint8)
    hand = NIL
    n_resident = 0
    evictions = 0
    max_resident = 0
    for i in range(block.shape[0]):
        b = block[i]
        if resident[b]:
            hit[i] = 1
            visited[b] = 1
            continue
        hit[i] = 0
        if n_resident >= capacity:
            obj = hand if hand != NIL else tail[0]
            while visited[obj]:
                visited[obj] = 0
                obj = prev[obj] if prev[obj] != NIL else tail[0]
            hand = prev[obj]
            unlink(prev, nxt, head, tail, 0, obj)
            resident[obj] = 0
            n_resident -= 1
            evictions += 1
        push_head(prev, nxt, head, tail, 0, b)
        resident[b] = 1
        visited[b] = 0
        n_resident += 1
        if n_resident > max_resident:
            max_resident = n_resident
    return evictions, max_resident
