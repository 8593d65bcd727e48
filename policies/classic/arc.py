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

The loop is `replay_window`, resumable over any slice of references, with a second
*behaviour* for the SITS adaptive policy (sits.py) over the same lists: ``RECENCY`` serves as
one LRU list (misses enter T2, T1's leftovers drain first, victims are forgotten rather than
kept as ghosts). ``KERNEL`` is that loop pinned to ``SCAN`` (ARC, `replay_scan`) over the
whole trace, so ARC and SITS's ARC mode are one piece of code.
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit
from sitsprof.common.prefetch import AHEAD, prefetch

from ._structs import NIL, grow, move_to_head_s, push_head_s, unlink_s

__all__ = [
    "DESCRIPTION",
    "KERNEL",
    "NAME",
    "NUMBA_CACHE_DEPENDS",
    "RECENCY",
    "SCAN",
    "grow_state",
    "max_resident",
    "new_state",
    "new_stream_state",
    "replay_recency",
    "replay_scan",
    "replay_window",
    "stream_window",
]

#: inlined into this module's kernels: part of their cache key (common/numba_locator.py)
NUMBA_CACHE_DEPENDS = ("_structs.py",)

NAME = "arc"
DESCRIPTION = "Adaptive replacement cache: recency (T1) and frequency (T2) lists tuned by ghost hits"

_T1, _T2, _B1, _B2 = 0, 1, 2, 3  # list codes in `where`
RECENCY, SCAN = 0, 1  # behaviours of replay_window: one LRU list, or ARC


@njit(cache=True, inline="always")
def _move_tail(prev, nxt, where, src_head, src_tail, dst_head, dst_tail, dst):
    """Move the tail of one list to the head of list `dst`; returns both lists' new ends."""
    x = src_tail
    src_head, src_tail = unlink_s(prev, nxt, src_head, src_tail, x)
    dst_head, dst_tail = push_head_s(prev, nxt, dst_head, dst_tail, x)
    where[x] = dst
    return src_head, src_tail, dst_head, dst_tail


@njit(cache=True, inline="always")
def _drop_tail(prev, nxt, where, head, tail):
    """Forget the tail of a list altogether; returns the list's new ends."""
    x = tail
    head, tail = unlink_s(prev, nxt, head, tail, x)
    where[x] = NIL
    return head, tail


@njit(cache=True)
def new_state(n_blocks):
    """Empty metadata for `replay_window`: prev, nxt, where, ends, sizes, state.

    Links are written when a block joins a list and read only while it is on one, so they
    need no initial value; `where` (which list, NIL for none) does. Separate contiguous
    arrays measured faster than one row per block, and an int8 list code faster than int32."""
    n = max(n_blocks, 1)
    return (np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32), np.full(n, NIL, dtype=np.int8),
            np.full(8, NIL, dtype=np.int32),  # head, tail of T1, T2, B1, B2
            np.zeros(4, dtype=np.int64),  # entries in T1, T2, B1, B2
            np.zeros(2, dtype=np.float64))  # ARC's p, most blocks ever resident



@njit(cache=True)
def replay_window(block, lo, hi, prev, nxt, where, ends, sizes, state, behaviour, capacity, hit):
    """Serve references lo..hi-1 in `behaviour` (SCAN: ARC; RECENCY: one LRU list). List ends
    (`ends`, 8), sizes (`sizes`, 4), p and the most blocks ever resident (`state`) are loaded
    into locals (registers) and stored back. Returns the evictions."""
    h1, t1, h2, t2, hb1, tb1, hb2, tb2 = ends[0], ends[1], ends[2], ends[3], ends[4], ends[5], ends[6], ends[7]
    n1, n2, nb1, nb2 = sizes[0], sizes[1], sizes[2], sizes[3]
    p = state[0]
    max_resident = state[1]
    cap_f = float(capacity)
    evictions = 0
    for i in range(lo, hi):
        if i + AHEAD < hi:  # the block served AHEAD references from now: its lines on the way
            ahead = block[i + AHEAD]
            prefetch(where, ahead)
            prefetch(prev, ahead)
            prefetch(nxt, ahead)
        b = block[i]
        w = where[b]
        if w == _T2:
            hit[i] = 1
            h2, t2 = move_to_head_s(prev, nxt, h2, t2, b)
            continue
        if w == _T1:
            hit[i] = 1
            h1, t1 = unlink_s(prev, nxt, h1, t1, b)
            h2, t2 = push_head_s(prev, nxt, h2, t2, b)
            n1 -= 1
            n2 += 1
            where[b] = _T2
            continue
        hit[i] = 0
        ghost = w == _B1 or w == _B2  # noqa: SIM109 (two integer compares in the compiled loop)
        in_b2_hit = w == _B2
        if w == _B1:
            # Ghost hit: adapt p (ratio taken before the ghost shrinks); the block goes to T2.
            # Both behaviours adapt p, so SITS's `scan` stays warm while `recency` serves.
            p = min(p + max(nb2 / nb1, 1.0), cap_f)
            hb1, tb1 = unlink_s(prev, nxt, hb1, tb1, b)
            nb1 -= 1
        elif w == _B2:
            p = max(p - max(nb1 / nb2, 1.0), 0.0)
            hb2, tb2 = unlink_s(prev, nxt, hb2, tb2, b)
            nb2 -= 1
        if behaviour == RECENCY:
            # One LRU list (T2); T1, holding what a scan period admitted, drains first. Victims
            # are forgotten, not kept as ghosts: ghost upkeep would double the cost of a miss.
            while n1 + n2 + 1 > capacity:
                evictions += 1
                if n1 > 0:
                    h1, t1 = _drop_tail(prev, nxt, where, h1, t1)
                    n1 -= 1
                else:
                    h2, t2 = _drop_tail(prev, nxt, where, h2, t2)
                    n2 -= 1
            h2, t2 = push_head_s(prev, nxt, h2, t2, b)
            n2 += 1
            where[b] = _T2
        else:
            while n1 + n2 + 1 > capacity:
                evictions += 1
                if not ghost:
                    # Case IV, a miss on all four lists: first trim the ghosts.
                    if n1 + nb1 + 1 > capacity:
                        if nb1 == 0:
                            h1, t1 = _drop_tail(prev, nxt, where, h1, t1)
                            n1 -= 1
                            continue
                        hb1, tb1 = _drop_tail(prev, nxt, where, hb1, tb1)
                        nb1 -= 1
                    elif n1 + nb1 + n2 + nb2 >= 2 * capacity and nb2 > 0:
                        hb2, tb2 = _drop_tail(prev, nxt, where, hb2, tb2)
                        nb2 -= 1
                # REPLACE
                if (n1 > 0 and (n1 > p or (n1 == p and in_b2_hit))) or n2 == 0:
                    h1, t1, hb1, tb1 = _move_tail(prev, nxt, where, h1, t1, hb1, tb1, _B1)
                    n1 -= 1
                    nb1 += 1
                else:
                    h2, t2, hb2, tb2 = _move_tail(prev, nxt, where, h2, t2, hb2, tb2, _B2)
                    n2 -= 1
                    nb2 += 1
            if ghost:
                h2, t2 = push_head_s(prev, nxt, h2, t2, b)
                n2 += 1
                where[b] = _T2
            else:
                h1, t1 = push_head_s(prev, nxt, h1, t1, b)
                n1 += 1
                where[b] = _T1
        if n1 + n2 > max_resident:
            max_resident = n1 + n2
    ends[0], ends[1], ends[2], ends[3], ends[4], ends[5], ends[6], ends[7] = h1, t1, h2, t2, hb1, tb1, hb2, tb2
    sizes[0], sizes[1], sizes[2], sizes[3] = n1, n2, nb1, nb2
    state[0] = p
    state[1] = max_resident
    return evictions


# replay_window with the behaviour a compile-time constant: the compiler inlines the loop and
# drops the other behaviour's branch, about 10% faster on the bench trace than passing it.
# `lo` goes on as a plain int64: a literal 0 (KERNEL's, the shadows') would compile the whole
# loop once more for each behaviour, seconds of a first run for nothing.
@njit(cache=True)
def replay_scan(block, lo, hi, prev, nxt, where, ends, sizes, state, capacity, hit):
    return replay_window(block, np.int64(lo), hi, prev, nxt, where, ends, sizes, state, SCAN, capacity, hit)


@njit(cache=True)
def replay_recency(block, lo, hi, prev, nxt, where, ends, sizes, state, capacity, hit):
    return replay_window(block, np.int64(lo), hi, prev, nxt, where, ends, sizes, state, RECENCY, capacity, hit)


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    if capacity <= 0:
        hit[: block.shape[0]] = 0
        return 0, 0
    prev, nxt, where, ends, sizes, state = new_state(n_blocks)
    evictions = replay_scan(block, 0, block.shape[0], prev, nxt, where, ends, sizes, state, capacity, hit)
    return evictions, int(state[1])


# ----------------------------------------------------------------- streaming (engine/stream.py)
# new_state + replay_scan are already resumable; these adapt them to the streaming shape.


def new_stream_state(n_blocks, capacity):
    return new_state(max(int(n_blocks), 1))


def grow_state(state, n_blocks, capacity):
    prev, nxt, where, ends, sizes, st = state
    return grow(prev, n_blocks, NIL), grow(nxt, n_blocks, NIL), grow(where, n_blocks, NIL), ends, sizes, st


def max_resident(state):
    return int(state[5][1])


def stream_window(state, block, lo, hi, capacity, hit):
    if capacity <= 0:
        hit[lo:hi] = 0
        return 0
    return replay_scan(block, np.int64(lo), np.int64(hi), *state, np.int64(capacity), hit)
