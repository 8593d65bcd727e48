"""LIRS (Jiang & Zhang, SIGMETRICS 2002) with libCacheSim's `LIRS` semantics (LIRS.c).

Three LRU lists, each over its own link arrays since a block can be in several at once:
stack S (LIR blocks, resident HIR blocks and non-resident HIR ids, recency order), list Q
(resident HIR blocks, 1% of the capacity, at least 1) and NH (non-resident HIR ids in S, in
the order they lost residence). The LIR set holds the rest of the capacity.

- A hit on an LIR block moves it to the top of S, then S is pruned (HIR entries at the
  bottom are dropped until an LIR block is the bottom).
- A hit on a resident HIR block in S makes it LIR (leaving Q); a hit on a resident HIR block
  that is only in Q moves it to Q's top and puts it back on S as HIR. Either way, while the
  LIR set is full, the bottom LIR block of S is demoted to Q's top (evicting Q's bottom when
  Q is full) and S is pruned. As in libCacheSim, the Q-only hit demotes an LIR block without
  promoting one, so the LIR set can run below its share; later misses refill it.
- A miss on a non-resident HIR id in S (moved to S's top by the lookup) turns it into a
  resident LIR block after the same demotions, evicting Q's bottom as needed.
- A miss on an unknown block makes it LIR while the LIR set has room, else a resident HIR on
  the tops of S and Q (evicting Q's bottom when the cache is full).
- An evicted HIR block that is still in S stays there as a non-resident id (and enters NH).
  After every reference, while S holds more than twice the capacity, the oldest NH id is
  dropped from S and NH, which bounds the metadata.

Pruning removes each S entry once after it was pushed, so every step is amortised O(1).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._structs import NIL, move_to_head, new_lists, pop_tail, push_head, unlink

NAME = "lirs"
DESCRIPTION = "LIRS: inter-reference recency; LIR blocks in stack S, resident HIR blocks in a 1% queue"

# Indices into the `st` counter array shared by the helpers.
_LIRS, _HIRS, _OCC, _S_N, _EVICT = 0, 1, 2, 3, 4


@njit(cache=True)
def _s_drop(sp, sn, sh, stl, in_s, s_lir, s_res, st, x):
    """Remove `x` from stack S and clear the flags of its S entry."""
    unlink(sp, sn, sh, stl, 0, x)
    in_s[x] = 0
    s_lir[x] = 0
    s_res[x] = 0
    st[_S_N] -= 1


@njit(cache=True)
def _to_top(prev, nxt, head, tail, member, x):
    """Move `x` to the top of a list, pushing it when it is not a member; True when pushed."""
    if member[x]:
        move_to_head(prev, nxt, head, tail, 0, x)
        return False
    push_head(prev, nxt, head, tail, 0, x)
    member[x] = 1
    return True


@njit(cache=True)
def _prune(sp, sn, sh, stl, in_s, s_lir, s_res, np_, nn, nh, nt, in_nh, st):
    """Drop HIR entries from the bottom of S until the bottom is LIR (or S has one entry)."""
    x = stl[0]
    while x != sh[0]:
        if s_lir[x]:
            break
        if not s_res[x] and in_nh[x]:
            unlink(np_, nn, nh, nt, 0, x)
            in_nh[x] = 0
        _s_drop(sp, sn, sh, stl, in_s, s_lir, s_res, st, x)
        x = stl[0]


@njit(cache=True)
def _evict_hir(sp, sn, sh, stl, in_s, s_res, qp, qn, qh, qt, in_q, np_, nn, nh, nt, in_nh, st):
    """Evict the bottom of Q; if the block is still in S it stays there as a non-resident id."""
    x = pop_tail(qp, qn, qh, qt, 0)
    if x == NIL:
        return
    in_q[x] = 0
    st[_HIRS] -= 1
    if in_s[x]:
        s_res[x] = 0
        if in_nh[x]:
            unlink(np_, nn, nh, nt, 0, x)
        push_head(np_, nn, nh, nt, 0, x)
        in_nh[x] = 1
    st[_OCC] -= 1
    st[_EVICT] += 1


@njit(cache=True)
def _evict_lir(sp, sn, sh, stl, in_s, s_lir, s_res, qp, qn, qh, qt, in_q,
               np_, nn, nh, nt, in_nh, st, hirs_limit):
    """Demote the bottom of S to the top of Q (evicting Q's bottom if Q is full), then prune."""
    x = stl[0]
    if x == NIL:
        return
    _s_drop(sp, sn, sh, stl, in_s, s_lir, s_res, st, x)
    st[_LIRS] -= 1
    st[_OCC] -= 1
    while st[_HIRS] + 1 > hirs_limit:
        _evict_hir(sp, sn, sh, stl, in_s, s_res, qp, qn, qh, qt, in_q, np_, nn, nh, nt, in_nh, st)
    _to_top(qp, qn, qh, qt, in_q, x)
    st[_HIRS] += 1
    st[_OCC] += 1
    _prune(sp, sn, sh, stl, in_s, s_lir, s_res, np_, nn, nh, nt, in_nh, st)


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit, hir_ratio=0.01):
    n = max(n_blocks, 1)
    sp, sn, sh, stl = new_lists(n_blocks, 1)  # stack S
    qp, qn, qh, qt = new_lists(n_blocks, 1)  # list Q
    np_, nn, nh, nt = new_lists(n_blocks, 1)  # NH: non-resident HIR ids in S
    in_s = np.zeros(n, dtype=np.uint8)
    s_lir = np.zeros(n, dtype=np.uint8)  # flags of the S entry
    s_res = np.zeros(n, dtype=np.uint8)
    in_q = np.zeros(n, dtype=np.uint8)
    in_nh = np.zeros(n, dtype=np.uint8)
    st = np.zeros(5, dtype=np.int64)  # LIR count, HIR count, occupied, |S|, evictions
    hirs_limit = max(np.int64(1), np.int64(hir_ratio * capacity))
    lirs_limit = capacity - hirs_limit
    max_resident = 0
    for i in range(block.shape[0]):
        b = block[i]
        was_s = in_s[b]
        was_q = in_q[b]
        if was_s:
            move_to_head(sp, sn, sh, stl, 0, b)
        if was_q:
            move_to_head(qp, qn, qh, qt, 0, b)
        is_hit = False
        if was_s:
            if s_lir[b]:
                is_hit = True
                _prune(sp, sn, sh, stl, in_s, s_lir, s_res, np_, nn, nh, nt, in_nh, st)
            elif s_res[b]:
                # Resident HIR in S: becomes LIR.
                is_hit = True
                if was_q:
                    unlink(qp, qn, qh, qt, 0, b)
                    in_q[b] = 0
                    st[_HIRS] -= 1
                    st[_OCC] -= 1
                while st[_LIRS] + 1 > lirs_limit:
                    _evict_lir(sp, sn, sh, stl, in_s, s_lir, s_res, qp, qn, qh, qt, in_q,
                               np_, nn, nh, nt, in_nh, st, hirs_limit)
                s_lir[b] = 1
                st[_LIRS] += 1
                st[_OCC] += 1
        elif was_q:
            # Resident HIR only in Q: back onto S as HIR (libCacheSim demotes an LIR first).
            is_hit = True
            while st[_LIRS] + 1 > lirs_limit:
                _evict_lir(sp, sn, sh, stl, in_s, s_lir, s_res, qp, qn, qh, qt, in_q,
                           np_, nn, nh, nt, in_nh, st, hirs_limit)
            if _to_top(sp, sn, sh, stl, in_s, b):
                st[_S_N] += 1
            s_lir[b] = 0
            s_res[b] = 1
        if is_hit:
            hit[i] = 1
        else:
            hit[i] = 0
            nonres_in_s = in_s[b] and not s_lir[b] and not s_res[b]
            if nonres_in_s:
                while st[_LIRS] + 1 > lirs_limit:
                    _evict_lir(sp, sn, sh, stl, in_s, s_lir, s_res, qp, qn, qh, qt, in_q,
                               np_, nn, nh, nt, in_nh, st, hirs_limit)
                if in_nh[b]:
                    unlink(np_, nn, nh, nt, 0, b)
                    in_nh[b] = 0
                admit = True
            else:
                admit = lirs_limit >= 1 and hirs_limit >= 1
                if admit and st[_LIRS] + 1 > lirs_limit and st[_HIRS] + 1 > hirs_limit:
                    while st[_HIRS] + 1 > hirs_limit:
                        _evict_hir(sp, sn, sh, stl, in_s, s_res, qp, qn, qh, qt, in_q,
                                   np_, nn, nh, nt, in_nh, st)
            if admit:
                while st[_OCC] + 1 > capacity:
                    s_now = in_s[b]
                    if s_now and not s_lir[b] and not s_res[b]:
                        while st[_HIRS] >= hirs_limit:
                            _evict_hir(sp, sn, sh, stl, in_s, s_res, qp, qn, qh, qt, in_q,
                                       np_, nn, nh, nt, in_nh, st)
                        _evict_lir(sp, sn, sh, stl, in_s, s_lir, s_res, qp, qn, qh, qt, in_q,
                                   np_, nn, nh, nt, in_nh, st, hirs_limit)
                    elif not s_now and not in_q[b]:
                        if st[_LIRS] + 1 > lirs_limit and st[_HIRS] + 1 > hirs_limit:
                            _evict_hir(sp, sn, sh, stl, in_s, s_res, qp, qn, qh, qt, in_q,
                                       np_, nn, nh, nt, in_nh, st)
                        else:
                            break  # nothing libCacheSim would evict here
                    else:
                        break
                if in_s[b]:
                    if not s_lir[b] and not s_res[b]:
                        s_lir[b] = 1
                        s_res[b] = 1
                        st[_LIRS] += 1
                        st[_OCC] += 1
                elif not in_q[b]:
                    push_head(sp, sn, sh, stl, 0, b)
                    in_s[b] = 1
                    st[_S_N] += 1
                    s_res[b] = 1
                    if st[_LIRS] + 1 <= lirs_limit:
                        s_lir[b] = 1
                        st[_LIRS] += 1
                    else:
                        s_lir[b] = 0
                        push_head(qp, qn, qh, qt, 0, b)
                        in_q[b] = 1
                        st[_HIRS] += 1
                    st[_OCC] += 1
        # Bound the metadata: S may hold at most twice the capacity.
        while st[_S_N] > 2 * capacity:
            x = pop_tail(np_, nn, nh, nt, 0)
            if x == NIL:
                break
            in_nh[x] = 0
            if in_s[x]:
                _s_drop(sp, sn, sh, stl, in_s, s_lir, s_res, st, x)
        if st[_OCC] > max_resident:
            max_resident = st[_OCC]
    return st[_EVICT], max_resident
