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

from ._structs import NIL, move_to_head_s, push_head_s, unlink_s

NAME = "lirs"
DESCRIPTION = "LIRS: inter-reference recency; LIR blocks in stack S, resident HIR blocks in a 1% queue"

# Per-block flag bits (one byte per block): the S entry exists / is LIR / is resident, the
# block is in Q, its id is in NH.
IN_S, LIR, RES, IN_Q, IN_NH = 1, 2, 4, 8, 16
S_BITS = IN_S | LIR | RES

# The list ends and counters travel through the helpers as plain values (they stay in
# registers once numba inlines the helpers): ends = (S head, S tail, Q head, Q tail, NH head,
# NH tail); counts = (LIR blocks, HIR blocks in Q, resident blocks, entries in S, evictions).


@njit(cache=True, inline="always")
def _nh_out(np_, nn, fl, nhh, nht, x):
    """Take `x` out of NH if it is there; returns NH's ends."""
    if fl[x] & IN_NH:
        nhh, nht = unlink_s(np_, nn, nhh, nht, x)
        fl[x] &= ~IN_NH
    return nhh, nht


@njit(cache=True)
def _prune(sp, sn, np_, nn, fl, ends, counts):
    """Drop HIR entries from the bottom of S until the bottom is LIR (or S has one entry)."""
    sh, stl, qh, qt, nhh, nht = ends
    lirs, hirs, occ, s_n, ev = counts
    x = stl
    while x != sh and not fl[x] & LIR:
        if not fl[x] & RES:
            nhh, nht = _nh_out(np_, nn, fl, nhh, nht, x)
        sh, stl = unlink_s(sp, sn, sh, stl, x)
        fl[x] &= ~S_BITS
        s_n -= 1
        x = stl
    return (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev)


@njit(cache=True, inline="always")
def _evict_hir(qp, qn, np_, nn, fl, ends, counts):
    """Evict the bottom of Q; if the block is still in S it stays there as a non-resident id."""
    sh, stl, qh, qt, nhh, nht = ends
    lirs, hirs, occ, s_n, ev = counts
    x = qt
    if x != NIL:
        qh, qt = unlink_s(qp, qn, qh, qt, x)
        fl[x] &= ~IN_Q
        if fl[x] & IN_S:
            fl[x] &= ~RES
            nhh, nht = _nh_out(np_, nn, fl, nhh, nht, x)
            nhh, nht = push_head_s(np_, nn, nhh, nht, x)
            fl[x] |= IN_NH
        hirs -= 1
        occ -= 1
        ev += 1
    return (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev)


@njit(cache=True)
def _evict_lir(sp, sn, qp, qn, np_, nn, fl, ends, counts, hirs_limit):
    """Demote the bottom of S to the top of Q (evicting Q's bottom if Q is full), then prune."""
    sh, stl, qh, qt, nhh, nht = ends
    lirs, hirs, occ, s_n, ev = counts
    x = stl
    if x == NIL:
        return ends, counts
    sh, stl = unlink_s(sp, sn, sh, stl, x)
    fl[x] &= ~S_BITS
    counts = (lirs - 1, hirs, occ - 1, s_n - 1, ev)
    ends = (sh, stl, qh, qt, nhh, nht)
    while counts[1] + 1 > hirs_limit and ends[3] != NIL:
        ends, counts = _evict_hir(qp, qn, np_, nn, fl, ends, counts)
    sh, stl, qh, qt, nhh, nht = ends
    lirs, hirs, occ, s_n, ev = counts
    if fl[x] & IN_Q:
        qh, qt = move_to_head_s(qp, qn, qh, qt, x)
    else:
        qh, qt = push_head_s(qp, qn, qh, qt, x)
        fl[x] |= IN_Q
    return _prune(sp, sn, np_, nn, fl, (sh, stl, qh, qt, nhh, nht), (lirs, hirs + 1, occ + 1, s_n, ev))


@njit(cache=True)
def _make_lir_room(sp, sn, qp, qn, np_, nn, fl, ends, counts, lirs_limit, hirs_limit):
    """Demote LIR blocks while the LIR set has no room for one more."""
    while counts[0] + 1 > lirs_limit and ends[1] != NIL:
        ends, counts = _evict_lir(sp, sn, qp, qn, np_, nn, fl, ends, counts, hirs_limit)
    return ends, counts


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit, hir_ratio=0.01):
    # Everything about one block shares a 32-byte row (so one cache line): the links of the
    # three lists and the flag bits.
    links = np.full((max(n_blocks, 1), 8), NIL, dtype=np.int32)
    links[:, 6] = 0
    sp, sn = links[:, 0], links[:, 1]  # stack S
    qp, qn = links[:, 2], links[:, 3]  # list Q
    np_, nn = links[:, 4], links[:, 5]  # NH: non-resident HIR ids in S
    fl = links[:, 6]
    sh = stl = qh = qt = nhh = nht = np.int32(NIL)
    lirs = hirs = occ = s_n = ev = np.int64(0)
    hirs_limit = max(np.int64(1), np.int64(hir_ratio * capacity))
    lirs_limit = capacity - hirs_limit
    max_resident = 0
    for i in range(block.shape[0]):
        b = block[i]
        f = fl[b]
        if f & IN_Q:
            qh, qt = move_to_head_s(qp, qn, qh, qt, b)
        if f & IN_S:
            sh, stl = move_to_head_s(sp, sn, sh, stl, b)
            if f & LIR:
                hit[i] = 1
                if not fl[stl] & LIR:
                    (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev) = _prune(
                        sp, sn, np_, nn, fl, (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev))
                continue
        if f & IN_S and f & RES:
            # Resident HIR in S: becomes LIR.
            hit[i] = 1
            if f & IN_Q:
                qh, qt = unlink_s(qp, qn, qh, qt, b)
                fl[b] &= ~IN_Q
                hirs -= 1
                occ -= 1
            (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev) = _make_lir_room(
                sp, sn, qp, qn, np_, nn, fl, (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev),
                lirs_limit, hirs_limit)
            fl[b] |= LIR
            lirs += 1
            occ += 1
        elif f & IN_Q:
            # Resident HIR only in Q: back onto S as HIR (libCacheSim demotes an LIR first).
            hit[i] = 1
            (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev) = _make_lir_room(
                sp, sn, qp, qn, np_, nn, fl, (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev),
                lirs_limit, hirs_limit)
            if fl[b] & IN_S:
                sh, stl = move_to_head_s(sp, sn, sh, stl, b)
            else:
                sh, stl = push_head_s(sp, sn, sh, stl, b)
                s_n += 1
            fl[b] = (fl[b] & ~LIR) | IN_S | RES
        else:
            hit[i] = 0
            admit = True
            if f & IN_S:
                # A non-resident HIR id in S: make room in the LIR set, leave NH.
                (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev) = _make_lir_room(
                    sp, sn, qp, qn, np_, nn, fl, (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev),
                    lirs_limit, hirs_limit)
                nhh, nht = _nh_out(np_, nn, fl, nhh, nht, b)
            else:
                admit = lirs_limit >= 1 and hirs_limit >= 1
                if admit and lirs + 1 > lirs_limit:
                    while hirs + 1 > hirs_limit and qt != NIL:
                        (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev) = _evict_hir(
                            qp, qn, np_, nn, fl, (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev))
            if admit:
                while occ + 1 > capacity:
                    if fl[b] & S_BITS == IN_S:
                        while hirs >= hirs_limit and qt != NIL:
                            (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev) = _evict_hir(
                                qp, qn, np_, nn, fl, (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev))
                        (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev) = _evict_lir(
                            sp, sn, qp, qn, np_, nn, fl, (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev),
                            hirs_limit)
                    elif (fl[b] & (IN_S | IN_Q)) == 0 and lirs + 1 > lirs_limit \
                            and hirs + 1 > hirs_limit and qt != NIL:
                        (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev) = _evict_hir(
                            qp, qn, np_, nn, fl, (sh, stl, qh, qt, nhh, nht), (lirs, hirs, occ, s_n, ev))
                    else:
                        break  # nothing libCacheSim would evict here
                if fl[b] & IN_S:
                    if fl[b] & S_BITS == IN_S:
                        fl[b] |= LIR | RES
                        lirs += 1
                        occ += 1
                elif not fl[b] & IN_Q:
                    sh, stl = push_head_s(sp, sn, sh, stl, b)
                    s_n += 1
                    occ += 1
                    if lirs + 1 <= lirs_limit:
                        fl[b] |= IN_S | LIR | RES
                        lirs += 1
                    else:
                        qh, qt = push_head_s(qp, qn, qh, qt, b)
                        fl[b] |= IN_S | RES | IN_Q
                        hirs += 1
        # Bound the metadata: S may hold at most twice the capacity.
        while s_n > 2 * capacity and nht != NIL:
            x = nht
            nhh, nht = unlink_s(np_, nn, nhh, nht, x)
            fl[x] &= ~IN_NH
            if fl[x] & IN_S:
                sh, stl = unlink_s(sp, sn, sh, stl, x)
                fl[x] &= ~S_BITS
                s_n -= 1
        if occ > max_resident:
            max_resident = occ
    return ev, max_resident
