"""LFU: evict the least frequently used block (libCacheSim `LFU` semantics, LFU.c).

Exactly as libCacheSim: a block enters with frequency 1 and forgets its count when evicted;
each frequency keeps a FIFO list (a hit appends the block to the tail of its new frequency's
list); the victim is the oldest entry of the lowest non-empty frequency.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._structs import NIL, new_lists, push_tail_s, unlink_s

NAME = "lfu"
DESCRIPTION = "Least frequently used, FIFO among equal counts, counts forgotten on eviction"


@njit(cache=True)
def _max_references(block, n_blocks):
    """The most references any one block gets: the highest frequency a block can reach."""
    count = np.zeros(max(n_blocks, 1), dtype=np.int32)
    most = 0
    for i in range(block.shape[0]):
        c = count[block[i]] + 1
        count[block[i]] = c
        if c > most:
            most = c
    return most


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    # list f holds the resident blocks with frequency f
    prev, nxt, head, tail = new_lists(n_blocks, _max_references(block, n_blocks) + 2)
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
            head[f], tail[f] = unlink_s(prev, nxt, head[f], tail[f], b)
            f += 1
            head[f], tail[f] = push_tail_s(prev, nxt, head[f], tail[f], b)
            freq[b] = f
            if f > max_freq:
                max_freq = f
            if min_freq == f - 1 and head[f - 1] == NIL:
                min_freq = f
            continue
        hit[i] = 0
        if n_resident >= capacity:
            victim = head[min_freq]
            head[min_freq], tail[min_freq] = unlink_s(prev, nxt, victim, tail[min_freq], victim)
            freq[victim] = 0
            n_resident -= 1
            evictions += 1
            if head[min_freq] == NIL:
                g = min_freq + 1
                while g <= max_freq and head[g] == NIL:
                    g += 1
                if g <= max_freq:
                    min_freq = g
        head[1], tail[1] = push_tail_s(prev, nxt, head[1], tail[1], b)
        freq[b] = 1
        min_freq = 1
        n_resident += 1
        if n_resident > max_resident:
            max_resident = n_resident
    return evictions, max_resident
