"""LFU for the serving pool: the incremental form of policies/classic/lfu.py.

The rules are policies/classic/lfu.py's (libCacheSim's LFU): a block is cached with frequency
1 and forgets its count when evicted; each frequency keeps a FIFO list (a hit appends the block
to the tail of its new frequency's list); the victim is the oldest entry of the lowest
frequency. The layout is the kernel's (Shah, Mitra and Matani's O(1) LFU): a node per
frequency that has blocks, the nodes in a list of increasing frequency, each node holding its
blocks' list; nodes come from a fixed pool of min(capacity, ids) + 2, recycled through a stack.

State (`LfuState`): per block the list links `prev`/`nxt`, the pin bits `flag` and its node
`node_of` (NIL: not cached); per node its `freq`, its list's `first`/`last` block, its
neighbours `node_prev`/`node_next` in the node list, its `members` (listed + parked blocks),
and the stack of free nodes `free`; in `v[0]` the lowest and highest node and the free stack's
depth.

Pinned blocks: the victim walk starts at the lowest node's oldest block; a pinned block it meets
is parked (taken off its node's list, still a member of the node and keeping its count) and goes
back to the oldest end of its node's list when unpinned, so each pinned block is passed once per
pin. A hit on a parked block moves it, counted, to the tail of its new frequency's list. A node
lives while it has members, parked ones included; a node with only parked members stays in the
node list and the walk steps over it (one step per such node and eviction).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from sitsprof.common.jit import njit

from ...classic._structs import NIL, push_head, push_tail_s, unlink
from ._lists import NOT_PARKED, NOT_PINNED, PARKED, PINNED
from ._lists import pin as pin  # the pool's pin: set the bit (_lists.py)

__all__ = ["SCALARS", "LfuState", "admit", "hit", "miss", "new", "unpin", "victim"]

SCALARS = np.dtype([("low", np.int64), ("high", np.int64), ("n_spare", np.int64)], align=True)

LfuState = namedtuple("LfuState", "prev nxt flag node_of freq first last node_prev node_next free members v")


def new(n_ids: int, capacity: int) -> LfuState:
    n = max(int(n_ids), 1)
    m = min(int(capacity), n) + 2
    v = np.zeros(1, dtype=SCALARS).view(np.recarray)
    v[0].low = v[0].high = NIL
    v[0].n_spare = m
    return LfuState(np.full(n, NIL, dtype=np.int32), np.full(n, NIL, dtype=np.int32), np.zeros(n, dtype=np.uint8),
                    np.full(n, NIL, dtype=np.int32), np.zeros(m, dtype=np.int32), np.full(m, NIL, dtype=np.int32),
                    np.full(m, NIL, dtype=np.int32), np.full(m, NIL, dtype=np.int32), np.full(m, NIL, dtype=np.int32),
                    np.arange(m - 1, -1, -1, dtype=np.int32), np.zeros(m, dtype=np.int32), v)


# ---------------------------------------------------------------- nodes


@njit(cache=True, inline="always")
def _new_node_after(st, a, f):
    """A fresh node of frequency f, linked right after node a (NIL: at the lowest end)."""
    c = st.v[0]
    c.n_spare -= 1
    nd = st.free[c.n_spare]
    st.freq[nd] = f
    st.first[nd] = NIL
    st.last[nd] = NIL
    st.members[nd] = 0
    b = np.int32(c.low) if a == NIL else st.node_next[a]  # the node after nd
    st.node_prev[nd] = a
    st.node_next[nd] = b
    if a == NIL:
        c.low = nd
    else:
        st.node_next[a] = nd
    if b == NIL:
        c.high = nd
    else:
        st.node_prev[b] = nd
    return nd


@njit(cache=True, inline="always")
def _leave(st, x):
    """x leaves its node (off the list unless parked); the node is freed when it has no member."""
    c = st.v[0]
    nd = st.node_of[x]
    if st.flag[x] & PARKED:
        st.flag[x] &= NOT_PARKED
    else:
        unlink(st.prev, st.nxt, st.first, st.last, nd, x)
    st.members[nd] -= 1
    if st.members[nd] == 0:
        a, b = st.node_prev[nd], st.node_next[nd]
        if a == NIL:
            c.low = b
        else:
            st.node_next[a] = b
        if b == NIL:
            c.high = a
        else:
            st.node_prev[b] = a
        st.free[c.n_spare] = nd
        c.n_spare += 1
    st.node_of[x] = NIL


# ---------------------------------------------------------------- the operations


@njit(cache=True)
def _hit(st, x):
    first, last = st.first, st.last
    nd = st.node_of[x]
    f = st.freq[nd] + 1
    to = st.node_next[nd]
    if to == NIL or st.freq[to] != f:
        if st.members[nd] == 1:  # x is alone at its count: the node moves up with it
            st.freq[nd] = f
            if st.flag[x] & PARKED:  # (its list is empty): listed again, at the tail
                st.flag[x] &= NOT_PARKED
                first[nd], last[nd] = push_tail_s(st.prev, st.nxt, first[nd], last[nd], x)
            return
        to = _new_node_after(st, nd, f)
    _leave(st, x)
    first[to], last[to] = push_tail_s(st.prev, st.nxt, first[to], last[to], x)
    st.members[to] += 1
    st.node_of[x] = to


@njit(cache=True)
def hit(st, x):
    _hit(st, x)
    return np.int32(NIL)


@njit(cache=True)
def miss(st, x):
    """Nothing: LFU keeps no ghosts (an evicted block forgets its count)."""


@njit(cache=True)
def admit(st, x):
    """x is cached with frequency 1, at the tail of frequency 1's list."""
    st.flag[x] |= PINNED
    first, last = st.first, st.last
    nd = np.int32(st.v[0].low)
    if nd == NIL or st.freq[nd] != 1:
        nd = _new_node_after(st, NIL, 1)
    first[nd], last[nd] = push_tail_s(st.prev, st.nxt, first[nd], last[nd], x)
    st.members[nd] += 1
    st.node_of[x] = nd


@njit(cache=True)
def unpin(st, x):
    """A parked block goes back to the oldest end of its frequency's list."""
    st.flag[x] &= NOT_PINNED
    if st.flag[x] & PARKED:
        push_head(st.prev, st.nxt, st.first, st.last, st.node_of[x], x)
        st.flag[x] &= NOT_PARKED


@njit(cache=True)
def victim(st):
    """The oldest unpinned block of the lowest frequency, forgotten (NIL if every block is pinned)."""
    flag, first = st.flag, st.first
    nd = np.int32(st.v[0].low)
    while nd != NIL:
        x = first[nd]
        while x != NIL and flag[x] & PINNED:  # park it: off the list, still a member
            unlink(st.prev, st.nxt, first, st.last, nd, x)
            flag[x] |= PARKED
            x = first[nd]
        if x != NIL:
            _leave(st, x)
            return x
        nd = st.node_next[nd]
    return np.int32(NIL)
