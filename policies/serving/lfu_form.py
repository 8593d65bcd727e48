"""LFU's incremental form for the serving evictor (evictors.py dispatches here for pid LFU).

The rules are policies/classic/lfu.py's (libCacheSim's LFU): a block is cached with frequency
1 and forgets its count when evicted; each frequency keeps a FIFO list (a hit appends the block
to the tail of its new frequency's list); the victim is the oldest entry of the lowest
frequency. The layout is the kernel's (Shah, Mitra and Matani's O(1) LFU): a node per
frequency that has blocks, the nodes in a list of increasing frequency, each node holding its
blocks' list; nodes come from a fixed pool of min(capacity, ids) + 2, recycled through a stack.

Arrays (borrowed from the evictor's state tuple S, indexed, not unpacked): S[0]/S[1] the blocks'
list links, S[2] the pin bits, S[3] each block's node (NIL: not cached), S[4] each node's
frequency, S[5]/S[6] each node's first/last block, S[7] four node-sized segments: node
prev, node next, the free-node stack, and each node's members (listed + parked blocks); the
lowest/highest node, the free-stack depth and the node count in S[8] (sc[16..19]).

Pinned blocks: the victim walk starts at the lowest node's oldest block; a pinned block it meets
is parked (taken off its node's list, still a member of the node and keeping its count) and goes
back to the oldest end of its node's list when unpinned, so each pinned block is passed once per
pin. A hit on a parked block moves it, counted, to the tail of its new frequency's list. A node
lives while it has members, parked ones included; a node with only parked members stays in the
node list and the walk steps over it (one step per such node and eviction).
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit

from ..classic._structs import NIL, push_head, push_tail_s, unlink

_PINNED = 128
_PARKED = 64
# scalars in sc (S[8])
LOW, HIGH, NSPARE, NNODES = 16, 17, 18, 19


def lfu_arrays(n: int, capacity: int, sc):
    """S[3..7] for `n` block ids and a pool of `capacity` blocks; sets the scalars in sc."""
    m = min(int(capacity), int(n)) + 2
    node_of = np.full(n, NIL, dtype=np.int32)
    freq = np.zeros(m, dtype=np.int32)
    first = np.full(m, NIL, dtype=np.int32)
    last = np.full(m, NIL, dtype=np.int32)
    links = np.full(4 * m, NIL, dtype=np.int32)
    links[2 * m:3 * m] = np.arange(m - 1, -1, -1, dtype=np.int32)  # free-node stack
    links[3 * m:] = 0  # members
    sc[LOW] = sc[HIGH] = NIL
    sc[NSPARE] = m
    sc[NNODES] = m
    return node_of, freq, first, last, links


# ---------------------------------------------------------------- nodes


@njit(cache=True, inline="always")
def _new_node_after(S, a, f):
    """A fresh node of frequency f, linked right after node a (NIL: at the lowest end)."""
    freq, first, last, links, sc = S[4], S[5], S[6], S[7], S[8]
    m = sc[NNODES]
    sc[NSPARE] -= 1
    nd = links[2 * m + sc[NSPARE]]
    freq[nd] = f
    first[nd] = NIL
    last[nd] = NIL
    links[3 * m + nd] = 0
    b = np.int32(sc[LOW]) if a == NIL else links[m + a]  # the node after nd
    links[nd] = a
    links[m + nd] = b
    if a == NIL:
        sc[LOW] = nd
    else:
        links[m + a] = nd
    if b == NIL:
        sc[HIGH] = nd
    else:
        links[b] = nd
    return nd


@njit(cache=True, inline="always")
def _leave(S, x):
    """x leaves its node (off the list unless parked); the node is freed when it has no member."""
    prev, nxt, flag, node_of, first, last, links, sc = S[0], S[1], S[2], S[3], S[5], S[6], S[7], S[8]
    m = sc[NNODES]
    nd = node_of[x]
    if flag[x] & _PARKED:
        flag[x] &= (0xFF ^ _PARKED)
    else:
        unlink(prev, nxt, first, last, nd, x)
    links[3 * m + nd] -= 1
    if links[3 * m + nd] == 0:
        a, b = links[nd], links[m + nd]
        if a == NIL:
            sc[LOW] = b
        else:
            links[m + a] = b
        if b == NIL:
            sc[HIGH] = a
        else:
            links[b] = a
        links[2 * m + sc[NSPARE]] = nd
        sc[NSPARE] += 1
    node_of[x] = NIL


# ---------------------------------------------------------------- the operations


@njit(cache=True)
def lfu_hit(S, x):
    prev, nxt, node_of, freq, first, last, links, sc = S[0], S[1], S[3], S[4], S[5], S[6], S[7], S[8]
    m = sc[NNODES]
    nd = node_of[x]
    f = freq[nd] + 1
    to = links[m + nd]
    if to == NIL or freq[to] != f:
        if links[3 * m + nd] == 1:  # x is alone at its count: the node moves up with it
            freq[nd] = f
            if S[2][x] & _PARKED:  # (its list is empty): listed again, at the tail
                S[2][x] &= (0xFF ^ _PARKED)
                first[nd], last[nd] = push_tail_s(prev, nxt, first[nd], last[nd], x)
            return
        to = _new_node_after(S, nd, f)
    _leave(S, x)
    first[to], last[to] = push_tail_s(prev, nxt, first[to], last[to], x)
    links[3 * m + to] += 1
    node_of[x] = to


@njit(cache=True)
def lfu_admit(S, x):
    """x is cached with frequency 1, at the tail of frequency 1's list."""
    prev, nxt, node_of, freq, first, last, links, sc = S[0], S[1], S[3], S[4], S[5], S[6], S[7], S[8]
    m = sc[NNODES]
    nd = np.int32(sc[LOW])
    if nd == NIL or freq[nd] != 1:
        nd = _new_node_after(S, NIL, 1)
    first[nd], last[nd] = push_tail_s(prev, nxt, first[nd], last[nd], x)
    links[3 * m + nd] += 1
    node_of[x] = nd


@njit(cache=True)
def lfu_victim(S):
    """The oldest unpinned block of the lowest frequency, forgotten (NIL if every block is pinned)."""
    prev, nxt, flag, first, last, links, sc = S[0], S[1], S[2], S[5], S[6], S[7], S[8]
    m = sc[NNODES]
    nd = np.int32(sc[LOW])
    while nd != NIL:
        x = first[nd]
        while x != NIL and flag[x] & _PINNED:  # park it: off the list, still a member
            unlink(prev, nxt, first, last, nd, x)
            flag[x] |= _PARKED
            x = first[nd]
        if x != NIL:
            _leave(S, x)
            return x
        nd = links[m + nd]
    return np.int32(NIL)


@njit(cache=True)
def lfu_unpark(S, x):
    """A parked block, unpinned: back at the oldest end of its frequency's list."""
    prev, nxt, flag, node_of, first, last = S[0], S[1], S[2], S[3], S[5], S[6]
    push_head(prev, nxt, first, last, node_of[x], x)
    flag[x] &= (0xFF ^ _PARKED)
