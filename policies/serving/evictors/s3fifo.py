"""S3-FIFO (Yang et al., SOSP 2023) for the serving pool, with libCacheSim's rules.

A small FIFO (small_ratio of the capacity) takes new blocks, a main FIFO (the rest) the blocks
reused while in small (a counter per block, from hits, at least `threshold`) and the blocks
found in the ghost FIFO (ids small evicted, ghost_ratio of the capacity); main is a clock (a
block with a non-zero counter goes round again, counter - 1, capped at 3). Until the first
eviction, a new block goes to main once small is full (libCacheSim's warm-up). The queues are
rings (classic/twoq.py's); the ghost ring keeps tombstones (twoq's ghost queue).

Pinned blocks: a pinned block popped from a queue's tail is PARKED (off the ring, still counted
in its queue, its counter kept) and goes back to that queue's oldest end when unpinned, so each
is passed once per pin. With nothing pinned, this is policies/classic/s3fifo.py hit for hit.

State: per block the flag byte (SMALL / MAIN / GHOST membership, a ghost hit pending admission,
pinned, parked), its counter `freq` and ghost ring position `gpos`; the rings `small`, `main`,
`ghost`; the scalars in `v[0]` (named fields, below).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from sitsprof.common.jit import njit

from ...classic._structs import NIL
from ...classic.twoq import ghost_add, ghost_take, new_ghost, new_ring, ring_pop, ring_push
from ._lists import NOT_PARKED, NOT_PINNED, PARKED, PINNED
from ._lists import pin as pin  # the pool's pin: set the bit (_lists.py)

__all__ = ["MAIN", "PEND_G", "SCALARS", "SMALL", "S3FifoState", "admit", "hit", "miss", "new", "unpin", "victim"]

SMALL, MAIN = 1, 2  # (GHOST = 4: twoq's, the bit ghost_take / ghost_add keep)
PEND_G = 16  # looked up as a miss that was a ghost hit: admitted to main

#: The scalars: queue sizes (parked blocks included) and ring positions, the ghost queue's
#: (live ids, head, tail, ring entries), the limits, the parked counts, the warm-up flag.
SCALARS = np.dtype([
    ("n_small", np.int64), ("n_main", np.int64), ("small_head", np.int64), ("small_tail", np.int64),
    ("main_head", np.int64), ("main_tail", np.int64), ("ghost_live", np.int64), ("ghost_head", np.int64),
    ("ghost_tail", np.int64), ("ghost_used", np.int64), ("small_size", np.int64), ("main_size", np.int64),
    ("ghost_size", np.int64), ("threshold", np.int64), ("parked_small", np.int64), ("parked_main", np.int64),
    ("has_evicted", np.int64)], align=True)

S3FifoState = namedtuple("S3FifoState", "flag freq gpos small main ghost v")


def new(n_ids: int, capacity: int, small_ratio: float = 0.1, ghost_ratio: float = 0.9,
        move_to_main_threshold: int = 2) -> S3FifoState:
    n = max(int(n_ids), 1)
    v = np.zeros(1, dtype=SCALARS).view(np.recarray)
    c = v[0]
    c.small_size = np.int64(capacity * small_ratio)
    c.main_size = capacity - c.small_size
    c.ghost_size = np.int64(capacity * ghost_ratio)
    c.threshold = move_to_main_threshold
    return S3FifoState(np.zeros(n, dtype=np.uint8), np.zeros(n, dtype=np.int32), np.zeros(n, dtype=np.int32),
                       new_ring(capacity, n), new_ring(capacity, n), new_ghost(int(c.ghost_size)), v)


@njit(cache=True)
def hit(st, x):
    st.freq[x] += 1
    return np.int32(NIL)


@njit(cache=True)
def miss(st, x):
    if ghost_take(st.flag, x):
        st.v[0].ghost_live -= 1
        st.flag[x] |= PEND_G


@njit(cache=True)
def admit(st, x):
    flag, c = st.flag, st.v[0]
    flag[x] |= PINNED
    if flag[x] & PEND_G or (c.has_evicted == 0 and c.n_small >= c.small_size):
        c.main_head = ring_push(st.main, c.main_head, x)
        flag[x] |= MAIN
        c.n_main += 1
    else:
        c.small_head = ring_push(st.small, c.small_head, x)
        flag[x] |= SMALL
        c.n_small += 1
    st.freq[x] = 0
    flag[x] &= 0xFF ^ PEND_G


@njit(cache=True)
def unpin(st, x):
    """A parked block goes back to its ring's oldest end."""
    flag, c = st.flag, st.v[0]
    flag[x] &= NOT_PINNED
    if flag[x] & PARKED:
        flag[x] &= NOT_PARKED
        if flag[x] & SMALL:
            t = c.small_tail - 1 if c.small_tail > 0 else st.small.shape[0] - 1
            st.small[t] = x
            c.small_tail = t
            c.parked_small -= 1
        else:
            t = c.main_tail - 1 if c.main_tail > 0 else st.main.shape[0] - 1
            st.main[t] = x
            c.main_tail = t
            c.parked_main -= 1


@njit(cache=True)
def victim(st):
    flag, freq, small, main, c = st.flag, st.freq, st.small, st.main, st.v[0]
    c.has_evicted = 1
    while True:
        ls = c.n_small - c.parked_small  # blocks on the rings (parked ones are off them)
        lm = c.n_main - c.parked_main
        if (c.n_main > c.main_size or c.n_small == 0 or ls == 0) and lm > 0:
            # main is a clock: recycle blocks with a non-zero counter, evict the first zero
            while lm > 0:
                x, t = ring_pop(main, c.main_tail)
                c.main_tail = t
                if flag[x] & PINNED:
                    flag[x] |= PARKED
                    c.parked_main += 1
                    lm -= 1
                    continue
                f = freq[x]
                if f >= 1:
                    c.main_head = ring_push(main, c.main_head, x)
                    freq[x] = min(f, 3) - 1
                else:
                    flag[x] &= 0xFF ^ MAIN
                    c.n_main -= 1
                    return x
            continue
        if ls == 0:
            return np.int32(NIL)  # the pool promised an evictable block
        while ls > 0:
            x, t = ring_pop(small, c.small_tail)
            c.small_tail = t
            ls -= 1
            if flag[x] & PINNED:
                flag[x] |= PARKED
                c.parked_small += 1
                continue
            c.n_small -= 1
            if freq[x] >= c.threshold:
                c.main_head = ring_push(main, c.main_head, x)
                flag[x] = (flag[x] & (0xFF ^ SMALL)) | MAIN
                freq[x] = 0
                c.n_main += 1
                continue
            flag[x] &= 0xFF ^ SMALL
            gq = ghost_add(st.ghost, st.gpos, flag, (c.ghost_live, c.ghost_head, c.ghost_tail, c.ghost_used),
                           c.ghost_size, x)
            c.ghost_live, c.ghost_head, c.ghost_tail, c.ghost_used = gq[0], gq[1], gq[2], gq[3]
            return x
