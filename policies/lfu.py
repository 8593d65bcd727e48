"""LFU: evict the least frequently used block (libCacheSim `LFU` semantics, LFU.c).

Exactly as libCacheSim: a block enters with frequency 1 and forgets its count when evicted;
each frequency keeps a FIFO list (a hit appends the block to the tail of its new frequency's
list); the victim is the oldest entry of the lowest non-empty frequency.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._structs import NIL, new_lists, pop_head, push_tail, unlink

NAME = "lfu"
DESCRIPTION = "Least frequently used, FIFO among equal counts, counts forgotten on eviction"


@njit(cache=True)
def _grow(ends, size):
    out = np.full(size, NIL, dtype=np.int32)
    out[: ends.shape[0]] = ends
    return out


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    # list f holds the resident blocks with frequency f; grown on demand
    prev, nxt, head, tail = new_lists(n_blocks, 64)
    freq = np.zeros(max(n_blocks, 1), dtype=np.int32)  # 0 = not resident
    min_freq = 1
    max_freq = 1
    n_resident = 0
    evictions = 0
    max_resident = 0
    for i in range(block.shape[0]):
        b = block[i]
        f = freq[b]
        if f > 0:
            hit[i] = 1
            unlink(prev, nxt, head, tail, f, b)
            f += 1
            if f >= head.shape[0]:
                head = _grow(head, 2 * head.shape[0])
                tail = _grow(tail, 2 * tail.shape[0])
            push_tail(prev, nxt, head, tail, f, b)
            freq[b] = f
            if f > max_freq:
                max_freq = f
            if min_freq == f - 1 and head[f - 1] == NIL:
                min_freq = f
            continue
        hit[i] = 0
        if n_resident >= capacity:
            victim = pop_head(prev, nxt, head, tail, min_freq)
            freq[victim] = 0
            n_resident -= 1
            evictions += 1
            if head[min_freq] == NIL:
                g = min_freq + 1
                while g <= max_freq and head[g] == NIL:
                    g += 1
                if g <= max_freq:
                    min_freq = g
        push_tail(prev, nxt, head, tail, 1, b)
        freq[b] = 1
        min_freq = 1
        n_resident += 1
        if n_resident > max_resident:
            max_resident = n_resident
    return evictions, max_resident
