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

from sitsprof.common.jit import njit
from sitsprof.common.prefetch import AHEAD, prefetch

from ._structs import NIL, grow, insert_after_s, push_head_s, push_tail_s, unlink_s

__all__ = [
    "DESCRIPTION",
    "KERNEL",
    "NAME",
    "NUMBA_CACHE_DEPENDS",
    "grow_state",
    "max_resident",
    "new_state",
    "new_stream_state",
    "replay_window",
    "stream_window",
]

#: inlined into this module's kernels: part of their cache key (common/numba_locator.py)
NUMBA_CACHE_DEPENDS = ("_structs.py",)

NAME = "lfu"
DESCRIPTION = "Least frequently used, FIFO among equal counts, counts forgotten on eviction"


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    n = max(n_blocks, 1)
    m = min(capacity, n) + 2  # nodes: non-empty frequencies, plus one spare
    # blocks: list links within their frequency node, and their node (NIL: not resident)
    prev = np.full(n, NIL, dtype=np.int32)
    nxt = np.full(n, NIL, dtype=np.int32)
    node_of = np.full(n, NIL, dtype=np.int32)
    # nodes: frequency, their blocks' list, and links in increasing frequency
    freq = np.zeros(m, dtype=np.int64)
    first = np.full(m, NIL, dtype=np.int32)
    last = np.full(m, NIL, dtype=np.int32)
    node_prev = np.full(m, NIL, dtype=np.int32)
    node_next = np.full(m, NIL, dtype=np.int32)
    spare = np.arange(m - 1, -1, -1).astype(np.int32)  # stack of free node ids
    sc = np.array([NIL, NIL, m, 0], dtype=np.int64)  # lowest, highest node, n_spare, n_resident
    evictions = replay_window(block, 0, block.shape[0], prev, nxt, node_of, freq, first, last, node_prev,
                              node_next, spare, sc, capacity, hit)
    return evictions, sc[_NRES]


# ----------------------------------------------------------------- resumable form (streaming)
# The loop over references lo..hi-1 with its state kept between calls: KERNEL is one window
# over the whole trace, engine/stream.py calls it chunk by chunk. Node ids are internal
# (results depend on the lists, not on which id a node has), so the pool grows by stacking the
# new ids under the free ones.
_LOWEST, _HIGHEST, _NSPARE, _NRES = 0, 1, 2, 3


def _n_nodes(n_blocks, capacity):
    return min(int(capacity), max(int(n_blocks), 1)) + 2


def new_state(n_blocks, capacity):
    """Per block: prev, nxt, node_of; per node: freq, first, last, node_prev, node_next, spare;
    scalars (lowest, highest, n_spare, n_resident)."""
    n = max(int(n_blocks), 1)
    m = _n_nodes(n, capacity)
    return (np.full(n, NIL, dtype=np.int32), np.full(n, NIL, dtype=np.int32), np.full(n, NIL, dtype=np.int32),
            np.zeros(m, dtype=np.int64), np.full(m, NIL, dtype=np.int32), np.full(m, NIL, dtype=np.int32),
            np.full(m, NIL, dtype=np.int32), np.full(m, NIL, dtype=np.int32),
            np.arange(m - 1, -1, -1).astype(np.int32), np.array([NIL, NIL, m, 0], dtype=np.int64))


def grow_state(state, n_blocks, capacity):
    prev, nxt, node_of, freq, first, last, node_prev, node_next, spare, sc = state
    m_old = freq.shape[0]
    m = _n_nodes(n_blocks, capacity)
    if m > m_old:
        freq, first, last = grow(freq, m, 0), grow(first, m, NIL), grow(last, m, NIL)
        node_prev, node_next = grow(node_prev, m, NIL), grow(node_next, m, NIL)
        n_spare = int(sc[_NSPARE])
        spare = np.concatenate([np.arange(m - 1, m_old - 1, -1, dtype=np.int32), spare[:n_spare],
                                np.empty(m_old - n_spare, dtype=np.int32)])
        sc[_NSPARE] = n_spare + m - m_old
    return (grow(prev, n_blocks, NIL), grow(nxt, n_blocks, NIL), grow(node_of, n_blocks, NIL), freq, first, last,
            node_prev, node_next, spare, sc)


def max_resident(state):
    return int(state[9][_NRES])


@njit(cache=True)
def replay_window(block, lo, hi, prev, nxt, node_of, freq, first, last, node_prev, node_next, spare, sc,
                  capacity, hit):
    """Serve references lo..hi-1; returns the evictions."""
    lowest, highest = np.int32(sc[_LOWEST]), np.int32(sc[_HIGHEST])
    n_spare, n_resident = sc[_NSPARE], sc[_NRES]
    evictions = 0
    for i in range(lo, hi):
        if i + AHEAD < hi:  # the block served AHEAD references from now: its lines on the way
            ahead = block[i + AHEAD]
            prefetch(node_of, ahead)
            prefetch(prev, ahead)
            prefetch(nxt, ahead)
        b = block[i]
        nd = node_of[b]
        if nd != NIL:
            hit[i] = 1
            f = freq[nd] + 1
            to = node_next[nd]
            if to == NIL or freq[to] != f:
                if first[nd] == last[nd]:
                    freq[nd] = f
                    continue
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
    sc[_LOWEST], sc[_HIGHEST], sc[_NSPARE], sc[_NRES] = lowest, highest, n_spare, n_resident
    return evictions


def stream_window(state, block, lo, hi, capacity, hit):
    return replay_window(block, np.int64(lo), np.int64(hi), *state, np.int64(capacity), hit)


new_stream_state = new_state
