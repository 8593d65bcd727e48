"""LIRS (Jiang & Zhang, SIGMETRICS 2002) with libCacheSim's `LIRS` semantics (LIRS.c).

Three LRU lists, each with its own link arrays since a block can be in several at once:
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
  the tops of S and Q (evicting Q's bottom when Q is full).
- An evicted HIR block that is still in S stays there as a non-resident id (and enters NH).
  After every reference, while S holds more than twice the capacity, the oldest NH id is
  dropped from S and NH, which bounds the metadata.

Pruning removes each S entry once after it was pushed, so every step is amortised O(1).

libCacheSim's eviction loop (evict until the new block fits) never runs here: with objects
of size 1 the resident count is always |LIR| + |Q| <= capacity, and the demotions above
already leave room, so the kernel omits it. The kernel has no calls in its loop, keeps list
ends and counters in locals and writes every list operation out in place (see replay_window):
a call, even one never taken, makes numba's loop several times slower, and an inlined helper
costs reference counting of its array arguments.
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit
from sitsprof.common.prefetch import AHEAD, prefetch

from ._structs import NIL, grow, new_lists

__all__ = [
    "DESCRIPTION",
    "IN_NH",
    "IN_Q",
    "IN_S",
    "KERNEL",
    "LIR",
    "NAME",
    "NOT_IN_NH",
    "NOT_IN_Q",
    "NOT_IN_S",
    "NOT_LIR",
    "NOT_RES",
    "NOT_S_BITS",
    "NUMBA_CACHE_DEPENDS",
    "PARAM_RANGES",
    "RES",
    "S_BITS",
    "grow_state",
    "max_resident",
    "new_state",
    "new_stream_state",
    "replay_window",
    "stream_window",
]

#: inlined into this module's kernels: part of their cache key (common/numba_locator.py)
NUMBA_CACHE_DEPENDS = ("_structs.py",)

NAME = "lirs"
DESCRIPTION = "LIRS: inter-reference recency; LIR blocks in stack S, resident HIR blocks in a 1% queue"
# Valid values of the KERNEL's parameters (engine/params.py reads them; refused with the reason).
PARAM_RANGES = {
    "hir_ratio": ("(0, 1)", "the share of the capacity kept for resident HIR blocks; the LIR set gets the rest, "
                            "so at 1 it gets no room and nothing hits"),
}

# Per-block flag bits: the S entry exists / is LIR / is resident, the block is in Q, its id
# is in NH.
IN_S, LIR, RES, IN_Q, IN_NH = 1, 2, 4, 8, 16
S_BITS = IN_S | LIR | RES
# Their complements within the flag byte: `fl` is uint8, and numpy refuses `fl[x] & ~IN_Q`
# (a negative Python int) when the kernels run interpreted (common/jit.py); numba took it.
NOT_IN_S, NOT_LIR, NOT_RES, NOT_IN_Q, NOT_IN_NH, NOT_S_BITS = (0xFF ^ b for b in (IN_S, LIR, RES, IN_Q, IN_NH, S_BITS))


# What the reference needs once the LIR set has room (after the lookup).
_NOTHING, _HIR_TO_LIR, _Q_TO_S, _NONRES_TO_LIR = 0, 1, 2, 3


# Scalars kept between windows in `st` (int64): list ends, counters, the most ever resident.
_SH, _STL, _QH, _QT, _NHH, _NHT, _LIRS, _HIRS, _SN, _MAXRES = range(10)


@njit(cache=True)
def new_state(n_blocks):
    """Empty metadata for `replay_window`: links (S and NH, one row per block), qp, qn (Q),
    fl (flags), st (scalars)."""
    # A block's S and NH links share one 16-byte row: a miss that drops the oldest NH id
    # then unlinks it from S touches one cache line, not two (about twice as fast here).
    links = np.full((max(n_blocks, 1), 4), NIL, dtype=np.int32)
    qp, qn, _, _ = new_lists(n_blocks, np.int64(1))  # list Q
    fl = np.zeros(max(n_blocks, 1), dtype=np.uint8)
    st = np.zeros(10, dtype=np.int64)
    st[_SH] = st[_STL] = st[_QH] = st[_QT] = st[_NHH] = st[_NHT] = NIL
    return links, qp, qn, fl, st


@njit(cache=True)
def replay_window(block, lo, hi, links, qp, qn, fl, st, capacity, hir_ratio, hit):
    """Serve references lo..hi-1; the scalars in `st` are loaded into locals and stored back,
    so a run may be cut into windows (the dynamic threshold engine's LIRS baseline). Returns
    the evictions.

    Every list operation is written out in the loop rather than called, even inlined: numba
    binds an inlined helper's array arguments to new variables, and the reference counting of
    those (an atomic NRT_incref/NRT_decref pair per array per call, on the miss paths where
    LLVM's pruning gives up) took about 40% of the kernel's time on the bench trace."""
    sp, sn = links[:, 0], links[:, 1]  # stack S
    np_, nn = links[:, 2], links[:, 3]  # NH: non-resident HIR ids in S
    sh, stl, qh, qt = np.int32(st[_SH]), np.int32(st[_STL]), np.int32(st[_QH]), np.int32(st[_QT])
    nhh, nht = np.int32(st[_NHH]), np.int32(st[_NHT])
    lirs, hirs, s_n = st[_LIRS], st[_HIRS], st[_SN]  # LIR blocks, HIR blocks (all in Q), entries in S
    max_resident = st[_MAXRES]
    evictions = 0
    hirs_limit = max(np.int64(1), np.int64(hir_ratio * capacity))
    lirs_limit = capacity - hirs_limit
    for i in range(lo, hi):
        if i + AHEAD < hi:  # the block served AHEAD references from now: its lines on the way
            ahead = block[i + AHEAD]
            prefetch(fl, ahead)
            prefetch(sp, ahead)
        b = block[i]
        f = fl[b]
        if f & LIR:
            # A hit on an LIR block (always in S, never in Q): to the top of S, then prune.
            if sh != b:  # S: move b to the head
                p, n = sp[b], sn[b]
                sn[p] = n
                if n == NIL:
                    stl = p
                else:
                    sp[n] = p
                sp[b] = NIL
                sn[b] = sh
                sp[sh] = b
                sh = b
            hit[i] = 1
            # Prune: drop HIR entries from the bottom of S until the bottom is LIR.
            x = stl
            while x != sh and not fl[x] & LIR:
                if fl[x] & IN_NH:  # a non-resident id: NH: unlink x
                    p, n = np_[x], nn[x]
                    if p == NIL:
                        nhh = n
                    else:
                        nn[p] = n
                    if n == NIL:
                        nht = p
                    else:
                        np_[n] = p
                    np_[x] = NIL
                    nn[x] = NIL
                    fl[x] &= NOT_IN_NH
                p = sp[x]  # S: unlink x, the tail (x != sh, so p != NIL)
                sn[p] = NIL
                stl = p
                sp[x] = NIL
                fl[x] &= NOT_S_BITS
                s_n -= 1
                x = stl
            continue
        if f & IN_Q and qh != b:  # Q: move b to the head
            p, n = qp[b], qn[b]
            qn[p] = n
            if n == NIL:
                qt = p
            else:
                qp[n] = p
            qp[b] = NIL
            qn[b] = qh
            qp[qh] = b
            qh = b
        if f & IN_S and sh != b:  # S: move b to the head
            p, n = sp[b], sn[b]
            sn[p] = n
            if n == NIL:
                stl = p
            else:
                sp[n] = p
            sp[b] = NIL
            sn[b] = sh
            sp[sh] = b
            sh = b
        todo = _NOTHING
        if f & IN_S:
            if f & RES:
                todo = _HIR_TO_LIR  # resident HIR in S: a hit, it becomes LIR
                if f & IN_Q:  # Q: unlink b (now its head)
                    n = qn[b]
                    qh = n
                    if n == NIL:
                        qt = NIL
                    else:
                        qp[n] = NIL
                    qn[b] = NIL
                    fl[b] &= NOT_IN_Q
                    hirs -= 1
            else:
                todo = _NONRES_TO_LIR  # non-resident HIR id in S: a miss, it becomes LIR
        elif f & IN_Q:
            todo = _Q_TO_S  # resident HIR only in Q: a hit, back onto S as HIR
        hit[i] = 1 if todo == _HIR_TO_LIR or todo == _Q_TO_S else 0  # noqa: SIM109 (compiled loop)
        if todo != _NOTHING:
            # Make room in the LIR set: demote S's bottom to Q's top (evicting Q's bottom if
            # Q is full), then prune S. libCacheSim does this for a Q-only hit too, although
            # that hit adds no LIR block.
            while lirs + 1 > lirs_limit and stl != NIL:
                x = stl  # S: unlink x, the tail
                p = sp[x]
                stl = p
                if p == NIL:
                    sh = NIL
                else:
                    sn[p] = NIL
                sp[x] = NIL
                fl[x] &= NOT_S_BITS
                s_n -= 1
                lirs -= 1
                while hirs + 1 > hirs_limit and qt != NIL:
                    # Evict Q's bottom; if it is still in S it stays there as a non-resident
                    # id and enters NH.
                    y = qt  # Q: unlink y, the tail
                    p = qp[y]
                    qt = p
                    if p == NIL:
                        qh = NIL
                    else:
                        qn[p] = NIL
                    qp[y] = NIL
                    fl[y] &= NOT_IN_Q
                    if fl[y] & IN_S:
                        fl[y] = (fl[y] & NOT_RES) | IN_NH  # resident, so not in NH yet
                        np_[y] = NIL  # NH: push y at the head
                        nn[y] = nhh
                        if nhh == NIL:
                            nht = y
                        else:
                            np_[nhh] = y
                        nhh = y
                    hirs -= 1
                    evictions += 1
                if fl[x] & IN_Q:
                    if qh != x:  # Q: move x to the head
                        p, n = qp[x], qn[x]
                        qn[p] = n
                        if n == NIL:
                            qt = p
                        else:
                            qp[n] = p
                        qp[x] = NIL
                        qn[x] = qh
                        qp[qh] = x
                        qh = x
                else:  # Q: push x at the head
                    qp[x] = NIL
                    qn[x] = qh
                    if qh == NIL:
                        qt = x
                    else:
                        qp[qh] = x
                    qh = x
                    fl[x] |= IN_Q
                hirs += 1
                # Prune, as above.
                x = stl
                while x != sh and not fl[x] & LIR:
                    if fl[x] & IN_NH:
                        p, n = np_[x], nn[x]
                        if p == NIL:
                            nhh = n
                        else:
                            nn[p] = n
                        if n == NIL:
                            nht = p
                        else:
                            np_[n] = p
                        np_[x] = NIL
                        nn[x] = NIL
                        fl[x] &= NOT_IN_NH
                    p = sp[x]
                    sn[p] = NIL
                    stl = p
                    sp[x] = NIL
                    fl[x] &= NOT_S_BITS
                    s_n -= 1
                    x = stl
            if todo == _Q_TO_S:
                if fl[b] & IN_S:
                    if sh != b:  # S: move b to the head
                        p, n = sp[b], sn[b]
                        sn[p] = n
                        if n == NIL:
                            stl = p
                        else:
                            sp[n] = p
                        sp[b] = NIL
                        sn[b] = sh
                        sp[sh] = b
                        sh = b
                else:  # S: push b at the head
                    sp[b] = NIL
                    sn[b] = sh
                    if sh == NIL:
                        stl = b
                    else:
                        sp[sh] = b
                    sh = b
                    s_n += 1
                fl[b] = (fl[b] & NOT_LIR) | IN_S | RES
            else:
                if todo == _NONRES_TO_LIR and fl[b] & IN_NH:  # NH: unlink b
                    p, n = np_[b], nn[b]
                    if p == NIL:
                        nhh = n
                    else:
                        nn[p] = n
                    if n == NIL:
                        nht = p
                    else:
                        np_[n] = p
                    np_[b] = NIL
                    nn[b] = NIL
                    fl[b] &= NOT_IN_NH
                fl[b] |= LIR | RES
                lirs += 1
        elif lirs_limit >= 1:
            # A block in neither S nor Q: LIR while the LIR set has room, else a resident HIR
            # on the tops of S and Q, after evicting Q's bottom when Q is full.
            sp[b] = NIL  # S: push b at the head
            sn[b] = sh
            if sh == NIL:
                stl = b
            else:
                sp[sh] = b
            sh = b
            s_n += 1
            if lirs + 1 <= lirs_limit:
                fl[b] |= IN_S | LIR | RES
                lirs += 1
            else:
                while hirs + 1 > hirs_limit and qt != NIL:
                    y = qt  # evict Q's bottom, as above
                    p = qp[y]
                    qt = p
                    if p == NIL:
                        qh = NIL
                    else:
                        qn[p] = NIL
                    qp[y] = NIL
                    fl[y] &= NOT_IN_Q
                    if fl[y] & IN_S:
                        fl[y] = (fl[y] & NOT_RES) | IN_NH
                        np_[y] = NIL
                        nn[y] = nhh
                        if nhh == NIL:
                            nht = y
                        else:
                            np_[nhh] = y
                        nhh = y
                    hirs -= 1
                    evictions += 1
                qp[b] = NIL  # Q: push b at the head
                qn[b] = qh
                if qh == NIL:
                    qt = b
                else:
                    qp[qh] = b
                qh = b
                fl[b] |= IN_S | RES | IN_Q
                hirs += 1
        # Bound the metadata: S may hold at most twice the capacity.
        while s_n > 2 * capacity and nht != NIL:
            x = nht  # NH: unlink x, the tail
            p = np_[x]
            nht = p
            if p == NIL:
                nhh = NIL
            else:
                nn[p] = NIL
            np_[x] = NIL
            fl[x] &= NOT_IN_NH
            if fl[x] & IN_S:  # S: unlink x
                p, n = sp[x], sn[x]
                if p == NIL:
                    sh = n
                else:
                    sn[p] = n
                if n == NIL:
                    stl = p
                else:
                    sp[n] = p
                sp[x] = NIL
                sn[x] = NIL
                fl[x] &= NOT_S_BITS
                s_n -= 1
        if lirs + hirs > max_resident:
            max_resident = lirs + hirs
    st[_SH], st[_STL], st[_QH], st[_QT], st[_NHH], st[_NHT] = sh, stl, qh, qt, nhh, nht
    st[_LIRS], st[_HIRS], st[_SN], st[_MAXRES] = lirs, hirs, s_n, max_resident
    return evictions


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit, hir_ratio=0.01):
    links, qp, qn, fl, st = new_state(n_blocks)
    evictions = replay_window(block, 0, block.shape[0], links, qp, qn, fl, st, capacity, hir_ratio, hit)
    return evictions, st[_MAXRES]


# ----------------------------------------------------------------- streaming (engine/stream.py)
# new_state + replay_window are already resumable; these adapt them to the streaming shape.


def new_stream_state(n_blocks, capacity, hir_ratio=0.01):
    return new_state(max(int(n_blocks), 1))


def grow_state(state, n_blocks, capacity, hir_ratio=0.01):
    links, qp, qn, fl, st = state
    return grow(links, n_blocks, NIL), grow(qp, n_blocks, NIL), grow(qn, n_blocks, NIL), grow(fl, n_blocks, 0), st


def max_resident(state):
    return int(state[4][_MAXRES])


def stream_window(state, block, lo, hi, capacity, hit, hir_ratio=0.01):
    links, qp, qn, fl, st = state
    return replay_window(block, np.int64(lo), np.int64(hi), links, qp, qn, fl, st, np.int64(capacity),
                         float(hir_ratio), hit)
