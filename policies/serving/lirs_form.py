"""LIRS's incremental form for the serving evictor (evictors.py dispatches here for pid LIRS).

The rules are policies/classic/lirs.py's (libCacheSim's LIRS), step for step: stack S (LIR
blocks, resident HIR blocks, non-resident HIR ids), list Q (resident HIR blocks, hir_ratio of
the capacity, at least 1) and NH (non-resident HIR ids in S). The kernel's reference splits
into the evictor's calls: `lirs_hit` (a hit; it may evict Q's bottom, when a Q-only hit demotes
an LIR block into a full Q, and returns that block), `lirs_miss` (the lookup's moves),
`lirs_victim` (Q's bottom, evicted before the admission that needs its slot, as the kernel
evicts it before the demoted block enters Q) and `lirs_admit` (the rest of the miss).

Arrays (borrowed from the evictor's state tuple): S links prev/nxt, Q links qp/qn, NH links
hp/hn, LIRS flag bits in `lf`, pin bits in `flag`. With pins, eviction takes Q's oldest
unpinned block (pinned ones passed are parked off Q, still counted in it, and return to Q's
oldest end when unpinned); when Q has none, S's bottom LIR blocks are demoted into Q until an
unpinned one is there; a hit that finds only pinned blocks in Q leaves Q over its share.

Cost: each pinned block is passed at most once per pin (parked until an unpin or a hit puts
it back in Q) and each fallback demotion takes a block out of the LIR set, so a victim is
amortised O(1) however much of the pool is pinned (tests/test_lirs_pinned.py checks the
rules against a plain-Python statement of them, and the park count against unpins + hits).
Under a mostly pinned pool (Mooncake's first 2,000 requests, 16-token blocks, 50,000 blocks:
841 preemptions, peak pinned = the pool) the replay costs x2.1 of LRU (bench_replay.py part 4:
2.06 s against 0.97 s CPU); the same case before pinned blocks were parked (65b4a20) had not
finished after 900 s (bench/README.md).
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit

NIL = -1
IN_S, LIR, RES, IN_Q, IN_NH = 1, 2, 4, 8, 16
S_BITS = IN_S | LIR | RES
_PINNED = 128
_PARKED = 64  # a pinned block the victim walk took off Q (still counted in it); back at Q's tail when unpinned
# scalars in sc
SH, ST, QH, QT, NHH, NHT = 0, 1, 2, 3, 4, 5
NLIR, NHIR, SN = 8, 9, 10
CAP = 13
LIM_LIR, LIM_HIR = 24, 25


@njit(cache=True, inline="always")
def _push(p, n, sc, h, t, x):
    head = np.int32(sc[h])
    p[x] = NIL
    n[x] = head
    if head == NIL:
        sc[t] = x
    else:
        p[head] = x
    sc[h] = x


@njit(cache=True, inline="always")
def _unlink(p, n, sc, h, t, x):
    a, b = p[x], n[x]
    if a == NIL:
        sc[h] = b
    else:
        n[a] = b
    if b == NIL:
        sc[t] = a
    else:
        p[b] = a
    p[x] = NIL
    n[x] = NIL


@njit(cache=True, inline="always")
def _to_head(p, n, sc, h, t, x):
    if sc[h] != x:
        _unlink(p, n, sc, h, t, x)
        _push(p, n, sc, h, t, x)


@njit(cache=True, inline="always")
def _q_unlink(S, x):
    prev, nxt, flag, cnt, hn, qp, qn, hp, sc, fp = S
    if flag[x] & _PARKED:
        flag[x] &= (0xFF ^ _PARKED)
    else:
        _unlink(qp, qn, sc, QH, QT, x)


@njit(cache=True, inline="always")
def _q_to_head(S, x):
    prev, nxt, flag, cnt, hn, qp, qn, hp, sc, fp = S
    if flag[x] & _PARKED:
        flag[x] &= (0xFF ^ _PARKED)
        _push(qp, qn, sc, QH, QT, x)
    else:
        _to_head(qp, qn, sc, QH, QT, x)


@njit(cache=True)
def _prune(S, lf):
    prev, nxt, flag, cnt, hn, qp, qn, hp, sc, fp = S
    x = np.int32(sc[ST])
    while x != NIL and x != sc[SH] and not lf[x] & LIR:
        if lf[x] & IN_NH:
            _unlink(hp, hn, sc, NHH, NHT, x)
            lf[x] &= (0xFF ^ IN_NH)
        _unlink(prev, nxt, sc, SH, ST, x)
        lf[x] &= (0xFF ^ S_BITS)
        sc[SN] -= 1
        x = np.int32(sc[ST])


@njit(cache=True)
def _evict_q(S, lf, y):
    """Evict resident HIR block y (in Q); it stays in S as a non-resident id when it is there."""
    prev, nxt, flag, cnt, hn, qp, qn, hp, sc, fp = S
    _q_unlink(S, y)
    lf[y] &= (0xFF ^ IN_Q)
    if lf[y] & IN_S:
        lf[y] = (lf[y] & (0xFF ^ RES)) | IN_NH
        _push(hp, hn, sc, NHH, NHT, y)
    else:
        lf[y] &= (0xFF ^ RES)
    sc[NHIR] -= 1


@njit(cache=True)
def _oldest_unpinned_q(S):
    prev, nxt, flag, cnt, hn, qp, qn, hp, sc, fp = S
    y = np.int32(sc[QT])
    while y != NIL and flag[y] & _PINNED:  # park it: each pinned block is passed once per pin
        p = qp[y]
        sc[QT] = p
        if p == NIL:
            sc[QH] = NIL
        else:
            qn[p] = NIL
        qp[y] = NIL
        flag[y] |= _PARKED
        y = p
    return y


@njit(cache=True)
def _demote(S, lf, allow_evict):
    """While the LIR set is full: S's bottom to Q's top (evicting Q's bottom while Q is full),
    then prune. Returns the block evicted (NIL if none)."""
    prev, nxt, flag, cnt, hn, qp, qn, hp, sc, fp = S
    out = np.int32(NIL)
    while sc[NLIR] + 1 > sc[LIM_LIR] and sc[ST] != NIL:
        x = np.int32(sc[ST])
        _unlink(prev, nxt, sc, SH, ST, x)
        lf[x] &= (0xFF ^ S_BITS)
        sc[SN] -= 1
        sc[NLIR] -= 1
        while allow_evict and sc[NHIR] + 1 > sc[LIM_HIR] and sc[QT] != NIL:
            y = _oldest_unpinned_q(S)
            if y == NIL:
                break
            _evict_q(S, lf, y)
            out = y
        if lf[x] & IN_Q:
            _q_to_head(S, x)
        else:
            _push(qp, qn, sc, QH, QT, x)
            lf[x] |= IN_Q
        lf[x] |= RES
        sc[NHIR] += 1
        _prune(S, lf)
    return out


@njit(cache=True)
def _bound(S, lf):
    prev, nxt, flag, cnt, hn, qp, qn, hp, sc, fp = S
    while sc[SN] > 2 * sc[CAP] and sc[NHT] != NIL:
        x = np.int32(sc[NHT])
        _unlink(hp, hn, sc, NHH, NHT, x)
        lf[x] &= (0xFF ^ IN_NH)
        if lf[x] & IN_S:
            _unlink(prev, nxt, sc, SH, ST, x)
            lf[x] &= (0xFF ^ S_BITS)
            sc[SN] -= 1


@njit(cache=True)
def lirs_hit(S, x):
    prev, nxt, flag, cnt, hn, qp, qn, hp, sc, fp = S
    lf = cnt
    f = lf[x]
    out = np.int32(NIL)
    if f & LIR:  # the kernel bounds S only after other references
        _to_head(prev, nxt, sc, SH, ST, x)
        _prune(S, lf)
        return out
    if f & IN_Q:
        _q_to_head(S, x)
    if f & IN_S:
        _to_head(prev, nxt, sc, SH, ST, x)
        # resident HIR in S: it becomes LIR
        _q_unlink(S, x)
        lf[x] &= (0xFF ^ IN_Q)
        sc[NHIR] -= 1
        out = _demote(S, lf, True)
        lf[x] |= LIR | RES
        sc[NLIR] += 1
    else:
        # resident HIR only in Q: back onto S as HIR (the kernel demotes an LIR block anyway)
        out = _demote(S, lf, True)
        if lf[x] & IN_S:
            _to_head(prev, nxt, sc, SH, ST, x)
        else:
            _push(prev, nxt, sc, SH, ST, x)
            sc[SN] += 1
        lf[x] = (lf[x] & (0xFF ^ LIR)) | IN_S | RES
    _bound(S, lf)
    return out


@njit(cache=True)
def lirs_miss(S, x):
    prev, nxt, flag, cnt, hn, qp, qn, hp, sc, fp = S
    if cnt[x] & IN_S:  # a non-resident HIR id in S: the lookup moves it to S's top
        _to_head(prev, nxt, sc, SH, ST, x)


@njit(cache=True)
def lirs_victim(S):
    prev, nxt, flag, cnt, hn, qp, qn, hp, sc, fp = S
    lf = cnt
    y = _oldest_unpinned_q(S)
    if y != NIL:
        _evict_q(S, lf, y)
        return y
    # Q holds only pinned blocks: demote S's bottom LIR blocks into Q until an unpinned one is there
    while sc[ST] != NIL:
        x = np.int32(sc[ST])
        _unlink(prev, nxt, sc, SH, ST, x)
        lf[x] &= (0xFF ^ S_BITS)
        sc[SN] -= 1
        sc[NLIR] -= 1
        if lf[x] & IN_Q:
            _q_to_head(S, x)
        else:
            _push(qp, qn, sc, QH, QT, x)
            lf[x] |= IN_Q
        lf[x] |= RES
        sc[NHIR] += 1
        _prune(S, lf)
        y = _oldest_unpinned_q(S)
        if y != NIL:
            _evict_q(S, lf, y)
            return y
    return np.int32(NIL)


@njit(cache=True)
def lirs_admit(S, x):
    prev, nxt, flag, cnt, hn, qp, qn, hp, sc, fp = S
    lf = cnt
    if sc[LIM_LIR] < 1:
        return
    if lf[x] & IN_S:  # non-resident HIR id in S: becomes LIR (its Q-bottom eviction came first)
        _demote(S, lf, False)
        if lf[x] & IN_NH:
            _unlink(hp, hn, sc, NHH, NHT, x)
            lf[x] &= (0xFF ^ IN_NH)
        lf[x] |= LIR | RES
        sc[NLIR] += 1
    else:
        _push(prev, nxt, sc, SH, ST, x)
        sc[SN] += 1
        if sc[NLIR] + 1 <= sc[LIM_LIR]:
            lf[x] |= IN_S | LIR | RES
            sc[NLIR] += 1
        else:  # a resident HIR block (the victim call made room in Q when the pool was full)
            _push(qp, qn, sc, QH, QT, x)
            lf[x] |= IN_S | RES | IN_Q
            sc[NHIR] += 1
    _bound(S, lf)
