"""ARC (Megiddo & Modha, FAST 2003) for the serving pool, with libCacheSim's rules.

Four lists: T1 (cached once), T2 (cached and reused), their ghosts B1 and B2 (ids only), and
the target size `p` of T1, adapted by ghost hits: a miss found in B1 grows p, in B2 shrinks
it; that block is then admitted to T2 (a new block to T1). REPLACE evicts T1's oldest block
(into B1) while T1 is over p (or at p on a B2 hit), else T2's (into B2); before it, a miss
that was no ghost hit trims B1 or B2 to keep |T1|+|B1| <= c and the four lists <= 2c.

Pinned blocks: REPLACE takes the oldest UNPINNED block of the list it chose, the other list's
when that one has none; the pinned blocks passed are parked (`_lists.py`: still counted in
their list's size; a hit moves a parked block to T2's head). A block can become a ghost between
its lookup (`miss`) and its admission (the pool caches a block when it is full, steps later):
its admission is then its ghost hit. With nothing pinned, this is policies/classic/arc.py.

State: the four lists over links `prev`/`nxt` (ends and sizes indexed by T1, T2, B1, B2),
`where[x]` the list x is in (NIL: none), a flag byte per block, and in `v[0]`: `p`, the
`capacity`, the pending miss's ghost hit (`miss_ghost`: 0 none, 1 B1, 2 B2, read by the victim
call that makes room for it) and SITS's `behaviour` (sits.py; ARC itself is always SCAN).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from sitsprof.common.jit import njit

from ...classic._structs import NIL
from ...classic.arc import SCAN
from ._lists import NOT_PINNED, PARKED, PINNED, new_lists, oldest_unpinned, push, remove, unpark
from ._lists import pin as pin  # the pool's pin: set the bit (_lists.py)

__all__ = [
    "B1",
    "B2",
    "NOT_PEND",
    "PEND_B2",
    "PEND_G",
    "SCALARS",
    "T1",
    "T2",
    "ArcState",
    "admit",
    "admit_to",
    "ghost_hit",
    "hit",
    "miss",
    "new",
    "to_t2_head",
    "unpin",
    "victim",
]

T1, T2, B1, B2 = 0, 1, 2, 3
PEND_G, PEND_B2 = 16, 32  # a looked-up miss that was a ghost hit (B1 or B2), in B2
NOT_PEND = 0xFF ^ (PEND_G | PEND_B2)

SCALARS = np.dtype([("p", np.float64), ("capacity", np.int64), ("miss_ghost", np.int64), ("behaviour", np.int64)],
                   align=True)

ArcState = namedtuple("ArcState", "prev nxt flag where head tail size v")


def new(n_ids: int, capacity: int) -> ArcState:
    prev, nxt, head, tail, size = new_lists(n_ids, 4)
    v = np.zeros(1, dtype=SCALARS).view(np.recarray)
    v[0].capacity = capacity
    v[0].behaviour = SCAN
    return ArcState(prev, nxt, np.zeros(len(prev), dtype=np.uint8), np.full(len(prev), NIL, dtype=np.int32),
                    head, tail, size, v)


@njit(cache=True, inline="always")
def to_t2_head(st, x):
    """Resident x (linked or parked in T1 or T2) to T2's head."""
    if st.flag[x] & PARKED:
        st.flag[x] &= 0xFF ^ PARKED
        st.size[st.where[x]] -= 1
    else:
        remove(st, st.where[x], x)
    push(st, T2, x)
    st.where[x] = T2


@njit(cache=True)
def hit(st, x):
    to_t2_head(st, x)
    return np.int32(NIL)


@njit(cache=True, inline="always")
def ghost_hit(st, x):
    """x in B1 or B2 leaves its ghost list, adapting p, marked to be admitted to T2; returns 1
    (B1), 2 (B2) or 0 (no ghost)."""
    size, c = st.size, st.v[0]
    w = st.where[x]
    if w == B1:
        c.p = min(c.p + max(size[B2] / size[B1], 1.0), float(c.capacity))
        remove(st, B1, x)
        st.where[x] = NIL
        st.flag[x] |= PEND_G
        return 1
    if w == B2:
        c.p = max(c.p - max(size[B1] / size[B2], 1.0), 0.0)
        remove(st, B2, x)
        st.where[x] = NIL
        st.flag[x] |= PEND_G | PEND_B2
        return 2
    return 0


@njit(cache=True)
def miss(st, x):
    st.v[0].miss_ghost = ghost_hit(st, x)


@njit(cache=True, inline="always")
def admit_to(st, x, recency):
    """x cached, pinned: to T2 after a ghost hit (or always, `recency`: SITS), else to T1."""
    st.flag[x] |= PINNED
    # x may have become a ghost since its miss was looked up: the pool looks a block up when
    # it allocates its slot and caches it when the block is full, steps later; meanwhile
    # another request's cached copy of the id (which a request past its prefix's first miss
    # recomputes privately) can be evicted into B1/B2, and the LIRS -> SITS back buffer puts
    # the NH blocks still being computed into B1. Its admission is then its ghost hit; pushed
    # onto T1/T2 while still linked in a ghost list it would corrupt both lists and their
    # counts (issue 11: B1's count 0 with a block in B1).
    ghost_hit(st, x)
    if st.flag[x] & PEND_G or recency:
        push(st, T2, x)
        st.where[x] = T2
    else:
        push(st, T1, x)
        st.where[x] = T1
    st.flag[x] &= NOT_PEND
    st.v[0].miss_ghost = 0


@njit(cache=True)
def admit(st, x):
    admit_to(st, x, False)


@njit(cache=True)
def unpin(st, x):
    st.flag[x] &= NOT_PINNED
    if st.flag[x] & PARKED:
        unpark(st.prev, st.nxt, st.flag, st.head, st.tail, st.where[x], x)


@njit(cache=True)
def _drop_tail(st, q):
    """The oldest (unpinned, for T1/T2) member of list q leaves it (to no list)."""
    x = oldest_unpinned(st.prev, st.nxt, st.flag, st.head, st.tail, q) if q <= T2 else st.tail[q]
    remove(st, q, x)
    st.where[x] = NIL
    return x


@njit(cache=True)
def victim(st):
    """REPLACE (module docstring)."""
    size, c = st.size, st.v[0]
    cap = c.capacity
    after_ghost = c.miss_ghost != 0
    in_b2_hit = c.miss_ghost == 2
    p = c.p
    if not after_ghost:
        n1, nb1 = size[T1], size[B1]
        if n1 + nb1 + 1 > cap:
            if nb1 == 0:
                if oldest_unpinned(st.prev, st.nxt, st.flag, st.head, st.tail, T1) != NIL:
                    return _drop_tail(st, T1)
            else:
                _drop_tail(st, B1)
        elif n1 + nb1 + size[T2] + size[B2] >= 2 * cap and size[B2] > 0:
            _drop_tail(st, B2)
    n1, n2 = size[T1], size[T2]
    x1 = oldest_unpinned(st.prev, st.nxt, st.flag, st.head, st.tail, T1)
    x2 = oldest_unpinned(st.prev, st.nxt, st.flag, st.head, st.tail, T2)
    if x2 == NIL or (x1 != NIL and ((n1 > 0 and (n1 > p or (n1 == p and in_b2_hit))) or n2 == 0)):
        x = x1
        remove(st, T1, x)
        push(st, B1, x)
        st.where[x] = B1
    else:
        x = x2
        remove(st, T2, x)
        push(st, B2, x)
        st.where[x] = B2
    return x
