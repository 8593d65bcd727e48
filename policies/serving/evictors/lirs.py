"""LIRS for the serving pool: the incremental form of policies/classic/lirs.py.

The rules are policies/classic/lirs.py's (libCacheSim's LIRS), step for step: stack S (LIR
blocks, resident HIR blocks, non-resident HIR ids), list Q (resident HIR blocks, hir_ratio of
the capacity, at least 1) and NH (non-resident HIR ids in S). The kernel's reference splits
into the evictor's calls: `hit` (it may evict Q's bottom, when a Q-only hit demotes an LIR
block into a full Q, and returns that block), `miss` (the lookup's moves), `victim` (Q's
bottom, evicted before the admission that needs its slot, as the kernel evicts it before the
demoted block enters Q) and `admit` (the rest of the miss).

State (`LirsState`): the three lists over their own links (a block can be in S and in Q or NH
at once): S over prev/nxt, Q over qp/qn, NH over hp/hn, their ends `head[L]`/`tail[L]` (L: S,
Q, NH); the LIRS bits of classic/lirs.py per block in `lf`, the pin bits in `flag`; in `v[0]`
the LIR and HIR counts, S's entries, the capacity and the LIR set's and Q's limits. The list
operations are classic/_structs.py's and the bits classic/lirs.py's: written once, here used
with array ends (the classic kernel writes them out in its loop, for speed; see its docstring).

With pins, eviction takes Q's oldest unpinned block (pinned ones passed are parked off Q,
still counted in it, and return to Q's oldest end when unpinned); when Q has none, S's bottom
LIR blocks are demoted into Q until an unpinned one is there; a hit that finds only pinned
blocks in Q leaves Q over its share.

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

from collections import namedtuple

import numpy as np

from sitsprof.common.jit import njit

from ...classic._structs import NIL, move_to_head, push_head, unlink
from ...classic.lirs import IN_NH, IN_Q, IN_S, LIR, RES, S_BITS
from ._lists import NOT_PARKED, NOT_PINNED, PARKED, PINNED, oldest_unpinned, unpark
from ._lists import pin as pin  # the pool's pin: set the bit (_lists.py)

__all__ = ["NH", "Q", "S", "SCALARS", "LirsState", "admit", "hit", "miss", "new", "unpin", "victim"]

S, Q, NH = 0, 1, 2  # the lists, as indexes of head / tail

SCALARS = np.dtype([("n_lir", np.int64), ("n_hir", np.int64), ("s_n", np.int64), ("capacity", np.int64),
                    ("lim_lir", np.int64), ("lim_hir", np.int64)], align=True)

LirsState = namedtuple("LirsState", "prev nxt qp qn hp hn flag lf head tail v")


def new(n_ids: int, capacity: int, hir_ratio: float = 0.01) -> LirsState:
    n = max(int(n_ids), 1)
    links = [np.full(n, NIL, dtype=np.int32) for _ in range(6)]
    v = np.zeros(1, dtype=SCALARS).view(np.recarray)
    hirs = max(1, int(hir_ratio * capacity))
    v[0].capacity = capacity
    v[0].lim_lir, v[0].lim_hir = capacity - hirs, hirs  # LIR set, resident HIR (Q)
    return LirsState(*links, np.zeros(n, dtype=np.uint8), np.zeros(n, dtype=np.int32),
                     np.full(3, NIL, dtype=np.int32), np.full(3, NIL, dtype=np.int32), v)


@njit(cache=True, inline="always")
def _q_unlink(st, x):
    if st.flag[x] & PARKED:
        st.flag[x] &= NOT_PARKED
    else:
        unlink(st.qp, st.qn, st.head, st.tail, Q, x)


@njit(cache=True, inline="always")
def _q_to_head(st, x):
    if st.flag[x] & PARKED:
        st.flag[x] &= NOT_PARKED
        push_head(st.qp, st.qn, st.head, st.tail, Q, x)
    else:
        move_to_head(st.qp, st.qn, st.head, st.tail, Q, x)


@njit(cache=True, inline="always")
def _oldest_unpinned_q(st):
    """Q's oldest unpinned block (NIL: none); pinned ones passed are parked, once per pin."""
    return oldest_unpinned(st.qp, st.qn, st.flag, st.head, st.tail, Q)


@njit(cache=True)
def _prune(st):
    lf, c = st.lf, st.v[0]
    x = st.tail[S]
    while x != NIL and x != st.head[S] and not lf[x] & LIR:
        if lf[x] & IN_NH:
            unlink(st.hp, st.hn, st.head, st.tail, NH, x)
            lf[x] &= (0xFF ^ IN_NH)
        unlink(st.prev, st.nxt, st.head, st.tail, S, x)
        lf[x] &= (0xFF ^ S_BITS)
        c.s_n -= 1
        x = st.tail[S]


@njit(cache=True)
def _evict_q(st, y):
    """Evict resident HIR block y (in Q); it stays in S as a non-resident id when it is there."""
    lf = st.lf
    _q_unlink(st, y)
    lf[y] &= (0xFF ^ IN_Q)
    if lf[y] & IN_S:
        lf[y] = (lf[y] & (0xFF ^ RES)) | IN_NH
        push_head(st.hp, st.hn, st.head, st.tail, NH, y)
    else:
        lf[y] &= (0xFF ^ RES)
    st.v[0].n_hir -= 1


@njit(cache=True)
def _bottom_to_q(st):
    """S's bottom (an LIR block) leaves S for Q's top, a resident HIR block; then S is pruned."""
    lf, c = st.lf, st.v[0]
    x = st.tail[S]
    unlink(st.prev, st.nxt, st.head, st.tail, S, x)
    lf[x] &= (0xFF ^ S_BITS)
    c.s_n -= 1
    c.n_lir -= 1
    return x


@njit(cache=True)
def _into_q(st, x):
    lf = st.lf
    if lf[x] & IN_Q:
        _q_to_head(st, x)
    else:
        push_head(st.qp, st.qn, st.head, st.tail, Q, x)
        lf[x] |= IN_Q
    lf[x] |= RES
    st.v[0].n_hir += 1
    _prune(st)


@njit(cache=True)
def _demote(st, allow_evict):
    """While the LIR set is full: S's bottom to Q's top (evicting Q's bottom while Q is full),
    then prune. Returns the block evicted (NIL if none)."""
    c = st.v[0]
    out = np.int32(NIL)
    while c.n_lir + 1 > c.lim_lir and st.tail[S] != NIL:
        x = _bottom_to_q(st)
        while allow_evict and c.n_hir + 1 > c.lim_hir and st.tail[Q] != NIL:
            y = _oldest_unpinned_q(st)
            if y == NIL:
                break
            _evict_q(st, y)
            out = y
        _into_q(st, x)
    return out


@njit(cache=True)
def _bound(st):
    lf, c = st.lf, st.v[0]
    while c.s_n > 2 * c.capacity and st.tail[NH] != NIL:
        x = st.tail[NH]
        unlink(st.hp, st.hn, st.head, st.tail, NH, x)
        lf[x] &= (0xFF ^ IN_NH)
        if lf[x] & IN_S:
            unlink(st.prev, st.nxt, st.head, st.tail, S, x)
            lf[x] &= (0xFF ^ S_BITS)
            c.s_n -= 1


@njit(cache=True)
def hit(st, x):
    lf, c = st.lf, st.v[0]
    f = lf[x]
    out = np.int32(NIL)
    if f & LIR:  # the kernel bounds S only after other references
        move_to_head(st.prev, st.nxt, st.head, st.tail, S, x)
        _prune(st)
        return out
    if f & IN_Q:
        _q_to_head(st, x)
    if f & IN_S:
        move_to_head(st.prev, st.nxt, st.head, st.tail, S, x)
        # resident HIR in S: it becomes LIR
        _q_unlink(st, x)
        lf[x] &= (0xFF ^ IN_Q)
        c.n_hir -= 1
        out = _demote(st, True)
        lf[x] |= LIR | RES
        c.n_lir += 1
    else:
        # resident HIR only in Q: back onto S as HIR (the kernel demotes an LIR block anyway)
        out = _demote(st, True)
        if lf[x] & IN_S:
            move_to_head(st.prev, st.nxt, st.head, st.tail, S, x)
        else:
            push_head(st.prev, st.nxt, st.head, st.tail, S, x)
            c.s_n += 1
        lf[x] = (lf[x] & (0xFF ^ LIR)) | IN_S | RES
    _bound(st)
    return out


@njit(cache=True)
def miss(st, x):
    if st.lf[x] & IN_S:  # a non-resident HIR id in S: the lookup moves it to S's top
        move_to_head(st.prev, st.nxt, st.head, st.tail, S, x)


@njit(cache=True)
def victim(st):
    y = _oldest_unpinned_q(st)
    if y != NIL:
        _evict_q(st, y)
        return y
    # Q holds only pinned blocks: demote S's bottom LIR blocks into Q until an unpinned one is there
    while st.tail[S] != NIL:
        _into_q(st, _bottom_to_q(st))
        y = _oldest_unpinned_q(st)
        if y != NIL:
            _evict_q(st, y)
            return y
    return np.int32(NIL)


@njit(cache=True)
def admit(st, x):
    lf, c = st.lf, st.v[0]
    st.flag[x] |= PINNED
    if c.lim_lir < 1:
        return
    if lf[x] & IN_S:  # non-resident HIR id in S: becomes LIR (its Q-bottom eviction came first)
        _demote(st, False)
        if lf[x] & IN_NH:
            unlink(st.hp, st.hn, st.head, st.tail, NH, x)
            lf[x] &= (0xFF ^ IN_NH)
        lf[x] |= LIR | RES
        c.n_lir += 1
    else:
        push_head(st.prev, st.nxt, st.head, st.tail, S, x)
        c.s_n += 1
        if c.n_lir + 1 <= c.lim_lir:
            lf[x] |= IN_S | LIR | RES
            c.n_lir += 1
        else:  # a resident HIR block (the victim call made room in Q when the pool was full)
            push_head(st.qp, st.qn, st.head, st.tail, Q, x)
            lf[x] |= IN_S | RES | IN_Q
            c.n_hir += 1
    _bound(st)


@njit(cache=True)
def unpin(st, x):
    """A parked block goes back to Q's oldest end."""
    st.flag[x] &= NOT_PINNED
    if st.flag[x] & PARKED:
        unpark(st.qp, st.qn, st.flag, st.head, st.tail, Q, x)
