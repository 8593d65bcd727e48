"""ARC (Megiddo & Modha, FAST 2003) with libCacheSim's `ARC` semantics (ARC.c).

Four LRU lists over one pair of link arrays: T1 (seen once), T2 (seen twice or more) hold
resident blocks; B1 and B2 are their ghosts. The target size `p` of T1 is a float, as in
libCacheSim: a ghost hit in B1 grows it by max(|B2|/|B1|, 1) (capped at the capacity), a
ghost hit in B2 shrinks it by max(|B1|/|B2|, 1) (floored at 0). A ghost hit is a miss; the
block is re-inserted at the head of T2 after REPLACE made room. A miss on all four lists
follows the paper's case IV: when |T1|+|B1| would exceed the capacity, drop B1's tail and
REPLACE (or, with B1 empty, drop T1's tail outright); otherwise, when all four lists hold 2c
entries, drop B2's tail, then REPLACE. REPLACE demotes T1's tail to B1 when T1 is non-empty
and larger than p (or equal to p on a B2 hit), or when T2 is empty; else T2's tail to B2.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._structs import NIL, move_to_head, new_lists, pop_tail, push_head, unlink

NAME = "arc"
DESCRIPTION = "Adaptive replacement cache: recency (T1) and frequency (T2) lists tuned by ghost hits"

_T1, _T2, _B1, _B2 = 0, 1, 2, 3


@njit(cache=True)
def _replace(prev, nxt, head, tail, where, size, p, in_b2_hit):
    """REPLACE: demote the tail of T1 or T2 to its ghost list; returns the demoted block."""
    t1 = size[_T1]
    if (t1 > 0 and (t1 > p or (t1 == p and in_b2_hit))) or size[_T2] == 0:
        x = pop_tail(prev, nxt, head, tail, _T1)
        size[_T1] -= 1
        push_head(prev, nxt, head, tail, _B1, x)
        size[_B1] += 1
        where[x] = _B1
    else:
        x = pop_tail(prev, nxt, head, tail, _T2)
        size[_T2] -= 1
        push_head(prev, nxt, head, tail, _B2, x)
        size[_B2] += 1
        where[x] = _B2
    return x


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    prev, nxt, head, tail = new_lists(n_blocks, 4)
    where = np.full(max(n_blocks, 1), NIL, dtype=np.int8)
    size = np.zeros(4, dtype=np.int64)  # entries in T1, T2, B1, B2
    p = 0.0
    evictions = 0
    max_resident = 0
    if capacity <= 0:
        hit[: block.shape[0]] = 0
        return evictions, max_resident
    cap_f = float(capacity)
    for i in range(block.shape[0]):
        b = block[i]
        w = where[b]
        if w == _T1:
            hit[i] = 1
            unlink(prev, nxt, head, tail, _T1, b)
            size[_T1] -= 1
            push_head(prev, nxt, head, tail, _T2, b)
            size[_T2] += 1
            where[b] = _T2
            continue
        if w == _T2:
            hit[i] = 1
            move_to_head(prev, nxt, head, tail, _T2, b)
            continue
        hit[i] = 0
        if w == _B1 or w == _B2:
            # Ghost hit: adapt p (ratio taken before the ghost shrinks), then make room.
            in_b2_hit = w == _B2
            if w == _B1:
                delta = max(size[_B2] / size[_B1], 1.0)
                p = min(p + delta, cap_f)
            else:
                delta = max(size[_B1] / size[_B2], 1.0)
                p = max(p - delta, 0.0)
            unlink(prev, nxt, head, tail, w, b)
            size[w] -= 1
            while size[_T1] + size[_T2] + 1 > capacity:
                _replace(prev, nxt, head, tail, where, size, p, in_b2_hit)
                evictions += 1
            push_head(prev, nxt, head, tail, _T2, b)
            size[_T2] += 1
            where[b] = _T2
        else:
            # Case IV: a miss on all four lists.
            while size[_T1] + size[_T2] + 1 > capacity:
                if size[_T1] + size[_B1] + 1 > capacity:
                    if size[_B1] > 0:
                        g = pop_tail(prev, nxt, head, tail, _B1)
                        size[_B1] -= 1
                        where[g] = NIL
                        _replace(prev, nxt, head, tail, where, size, p, False)
                    else:
                        x = pop_tail(prev, nxt, head, tail, _T1)
                        size[_T1] -= 1
                        where[x] = NIL
                else:
                    if size[_T1] + size[_B1] + size[_T2] + size[_B2] >= 2 * capacity and size[_B2] > 0:
                        g = pop_tail(prev, nxt, head, tail, _B2)
                        size[_B2] -= 1
                        where[g] = NIL
                    _replace(prev, nxt, head, tail, where, size, p, False)
                evictions += 1
            push_head(prev, nxt, head, tail, _T1, b)
            size[_T1] += 1
            where[b] = _T1
        resident = size[_T1] + size[_T2]
        if resident > max_resident:
            max_resident = resident
    return evictions, max_resident
