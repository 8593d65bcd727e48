"""SIEVE (Zhang et al., NSDI 2024) with libCacheSim's `Sieve` semantics (Sieve.c).

New blocks enter at the head with their visited bit clear; a hit only sets the bit. The hand
walks from the tail towards the head (wrapping to the tail), clearing set bits, and evicts
the first block whose bit is clear; it then rests on that block's head-side neighbour.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._structs import NIL, new_lists, push_head_s, unlink_s

NAME = "sieve"
DESCRIPTION = "SIEVE: FIFO queue with a visited bit and a hand that sifts from tail to head"


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    prev, nxt, _, _ = new_lists(n_blocks, 1)
    head = tail = hand = np.int32(NIL)
    # 0: not resident, 1: resident, 2: resident and visited
    state = np.zeros(max(n_blocks, 1), dtype=np.uint8)
    n_resident = 0
    evictions = 0
    for i in range(block.shape[0]):
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
    return evictions, n_resident
