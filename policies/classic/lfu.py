"""LFU: evict the least frequently used block (libCacheSim `LFU` semantics, LFU.c).

Exactly as libCacheSim: a block enters with frequency 1 and forgets its count when evicted;
each frequency keeps a FIFO list (a hit appends the block to the tail of its new frequency's
list); the victim is the oldest entry of the lowest non-empty frequency.

Layout (the O(1) LFU of Shah, Mitra and Matani, 2010): only frequencies that have blocks get
a node, the nodes form a list in increasing frequency, and each node holds its blocks' list.
Nodes come from a small recycled pool, so the hot ones stay in cache; a list per possible
frequency would touch a fresh cache line on almost every hit of a popular block.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._structs import NIL, insert_after_s, new_lists, push_head_s, push_tail_s, unlink_s

NAME = "lfu"
DESCRIPTION = "Least frequently used, FIFO among equal counts, counts forgotten on eviction"


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    n_nodes = min(capacity, max(n_blocks, 1)) + 2  # non-empty frequencies, plus one spare
    # blocks: list links within their frequency node, and their node (NIL: not resident)
    prev, nxt, _, _ = new_lists(n_blocks, 1)
    node_of = np.full(max(n_blocks, 1), NIL, dtype=np.int32)
    # nodes: frequency, their blocks' list, and links in increasing frequency
    freq = np.zeros(n_nodes, dtype=np.int64)
    first = np.full(n_nodes, NIL, dtype=np.int32)
    last = np.full(n_nodes, NIL, dtype=np.int32)
    node_prev, node_next, _, _ = new_lists(n_nodes, 1)
    lowest = highest = np.int32(NIL)  # the node list, in increasing frequency
    spare = np.arange(n_nodes - 1, -1, -1).astype(np.int32)  # stack of free node ids
    n_spare = n_nodes
    n_resident = 0
    evictions = 0
    for i in range(block.shape[0]):
        b = block[i]
        nd = node_of[b]
        if nd != NIL:
            hit[i] = 1
            f = freq[nd] + 1
            to = node_next[nd]
            if to == NIL or freq[to] != f:  # no node for f yet
                if first[nd] == last[nd]:  # b is alone at its count: the node moves up with it
                    freq[nd] = f
                    continue
                # a new node right after nd
                n_spare -= 1
                to = spare[n_spare]
                freq[to] = f
                first[to] = last[to] = NIL
                lowest, highest = insert_after_s(node_prev, node_next, lowest, highest, nd, to)
            first[nd], last[nd] = unlink_s(prev, nxt, first[nd], last[nd], b)
            first[to], last[to] = push_tail_s(prev, nxt, first[to], last[to], b)
            node_of[b] = to
            if first[nd] == NIL:
                lowest, highest = unlink_s(node_prev, node_next, lowest, highest, nd)
                spare[n_spare] = nd
                n_spare += 1
            continue
        hit[i] = 0
        if n_resident >= capacity:
            nd = lowest
            victim = first[nd]
            first[nd], last[nd] = unlink_s(prev, nxt, victim, last[nd], victim)
            node_of[victim] = NIL
            evictions += 1
            if first[nd] == NIL:
                lowest, highest = unlink_s(node_prev, node_next, lowest, highest, nd)
                spare[n_spare] = nd
                n_spare += 1
        else:
            n_resident += 1
        nd = lowest
        if nd == NIL or freq[nd] != 1:
            n_spare -= 1
            nd = spare[n_spare]
            freq[nd] = 1
            first[nd] = last[nd] = NIL
            lowest, highest = push_head_s(node_prev, node_next, lowest, highest, nd)
        first[nd], last[nd] = push_tail_s(prev, nxt, first[nd], last[nd], b)
        node_of[b] = nd
    return evictions, n_resident
