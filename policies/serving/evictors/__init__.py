"""Incremental forms of the replacement policies, for a pool whose blocks come and go.

The pool (pool.py, radix.py) tells the evictor what happens to a cached block, in the manner
of libCacheSim's get/find/insert/evict/remove:

- `ev_hit(pid, S, x)`: a cached block is found again (libCacheSim's find with update);
- `ev_miss(pid, S, x)`: a block about to be cached was looked up and not found (ghost
  lists learn of it here, before any victim is chosen for it, as in the kernels);
- `ev_admit(pid, S, x)`: it becomes cached (its KV is written into a slot), pinned;
- `ev_pin(pid, S, x)` / `ev_unpin(pid, S, x)`: its reference count leaves / reaches 0;
- `ev_victim(pid, S) -> x`: choose an unpinned cached block, forget it (keeping a ghost where
  the policy keeps ghosts) and return it; the pool guarantees one exists.

`pid` is the policy id; `S` the state tuple from `new_state`. With nothing ever pinned (the
pool's all-evictable mode), hit / miss-admit-victim per reference is exactly the whole-trace
kernel of `policies/classic/<name>.py` (tests/test_serving.py checks it hit for hit).

How a pinned block is passed over, per policy:
- LRU is vLLM's free block queue: pinned blocks are not in it (pin unlinks, unpin appends
  at the most recently used end, in the order the pool frees them: tail first); O(1).
- FIFO keeps insertion order; the victim is the oldest unpinned block. Pinned blocks the
  walk from the tail passes are parked (off the list) and go back to its oldest end when
  unpinned, so each is passed once per pin.
- SIEVE's hand walks past pinned blocks without clearing their visited bit.
- S3-FIFO: a pinned block popped from a queue's tail is parked (off the ring, still counted in
  its queue, its counter kept) and goes back to that queue's oldest end when unpinned.

The replay (scheduler.py) compiles these into its own numba cache, which numba keys on
scheduler.py alone; scheduler.py drops that cache when this file, pool.py, radix.py or the step
model changed (a digest of their sources beside the cache).
- LIRS (lirs_form.py): Q's oldest unpinned block (pinned ones parked as in FIFO), else S's
  bottom LIR blocks demoted into Q until one is unpinned.
- ARC: REPLACE takes the oldest unpinned block of the list it chose (T1 or T2), the other
  list when that one has none; pinned blocks passed are parked as in FIFO (still counted in
  their list's size; a hit moves a parked block to T2's head).
- LFU (lfu_form.py): the oldest unpinned block of the lowest frequency; pinned blocks the walk
  meets are parked off their frequency's list (keeping their count, their node kept alive) and
  go back to its oldest end when unpinned; a hit moves a parked block, counted, to the tail of
  its new frequency's list.
- SITS (pid 6): ARC's four lists and `p`, served in the behaviour sc[_BEHAV] (adaptive/sits.py's
  two): SCAN is ARC above, call for call; RECENCY is one LRU list over T2: admissions and
  freed blocks (unpin) go to T2's head, as vLLM's free queue appends a freed block, the victim
  is T1's oldest unpinned block while T1 holds any (what a scan period left), else T2's, and
  it is forgotten (no ghost); ghost hits adapt `p` in both. Pinned to SCAN it is the serving
  ARC; pinned to RECENCY, T1 stays empty and the unpinned blocks of T2 are in vLLM's free
  queue order, so it is the serving LRU, hit for hit, with pinning (tests/test_serving_sits.py).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from sitsprof.common.jit import njit

from ...classic._structs import NIL
from ...classic.twoq import ghost_add, ghost_take, new_ghost, new_ring, ring_pop, ring_push
from ..lfu_form import lfu_admit, lfu_arrays, lfu_hit, lfu_unpark, lfu_victim
from ..lirs_form import lirs_admit, lirs_hit, lirs_miss, lirs_victim
from . import lru as _lru

#: The files numba compiles into this package's kernels besides this one (their cache key,
#: common/numba_locator.py): an edit to any policy's module compiles the dispatcher afresh.
NUMBA_CACHE_DEPENDS = ("_lists.py", "lru.py", "../lirs_form.py", "../lfu_form.py", "../../classic/_structs.py",
                       "../../classic/twoq.py")

LRU, FIFO, SIEVE, S3FIFO, ARC, LIRS = 0, 1, 2, 3, 4, 5
LFU = 7  # (6 is SITS)
POLICY_IDS = {"lru": LRU, "fifo": FIFO, "sieve": SIEVE, "s3fifo": S3FIFO, "arc": ARC, "lirs": LIRS}
POLICY_IDS["lfu"] = LFU
SITS = 6  # ARC's lists served in one of two behaviours, sc[_BEHAV] (below; adaptive.py switches it)
POLICY_IDS["sits"] = SITS
RECENCY, SCAN = 0, 1  # SITS behaviours (classic/arc.py's codes)

# flag bits (S3-FIFO's SMALL/MAIN/GHOST are twoq's and s3fifo's: 1, 2, 4)
_SMALL, _MAIN, _GHOST = 1, 2, 4
_VISITED = 8
_PEND_G, _PEND_B2 = 16, 32  # a looked-up miss that was a ghost hit (B1 or S3-FIFO's ghost), ARC's B2
_PINNED = 128
_PARKED = 64  # pinned, taken off its list by a victim walk; back at the list's tail when unpinned
# ARC list codes in cnt
_T1, _T2, _B1, _B2 = 0, 1, 2, 3
# scalars in sc
_H0, _T0, _H1, _TL1, _H2, _TL2, _H3, _TL3 = 0, 1, 2, 3, 4, 5, 6, 7  # list ends (LRU/FIFO/SIEVE use 0)
_N0, _N1, _N2, _N3 = 8, 9, 10, 11  # list sizes
_HAND = 12
_CAP = 13
_HAS_EVICTED = 14
_MISS_GHOST = 15  # the pending miss: 0 none, 1 ghost hit (S3-FIFO; ARC: B1), 2 ARC B2 hit
_HS, _TS, _HM, _TM = 16, 17, 18, 19
_GQ = 20  # 4 entries: S3-FIFO ghost (live, head, tail, used)
_SMALL_SIZE, _MAIN_SIZE, _GHOST_SIZE, _THRESH = 24, 25, 26, 27
_PS, _PM = 28, 29  # S3-FIFO: parked blocks of small, of main
_BEHAV = 30  # SITS: RECENCY or SCAN
_NSC = 32


#: The evictor state: one field per policy, each that policy's named state; only the policy
#: served has its full size, the others are one-block placeholders. One type for every policy,
#: so numba compiles `replay` once, not once per policy.
Evictor = namedtuple("Evictor", "lru legacy")


def new_state(pid: int, n_ids: int, capacity: int, **params) -> Evictor:
    """The evictor state for `n_ids` block ids and a pool of `capacity` blocks (`Evictor`)."""
    return Evictor(_lru.new(n_ids if pid == LRU else 1, capacity),
                   _legacy_state(pid, n_ids if pid != LRU else 1, capacity, **params))


def _legacy_state(pid: int, n_ids: int, capacity: int, small_ratio: float = 0.1, ghost_ratio: float = 0.9,
                  move_to_main_threshold: int = 2, hir_ratio: float = 0.01):
    n = max(int(n_ids), 1)
    prev = np.full(n, NIL, dtype=np.int32)
    nxt = np.full(n, NIL, dtype=np.int32)
    flag = np.zeros(n, dtype=np.uint8)
    cnt = (np.full(n, NIL, dtype=np.int32) if pid in (ARC, SITS)
           else np.zeros(n if pid == S3FIFO else 1, dtype=np.int32))
    gpos = np.zeros(n if pid == S3FIFO else 1, dtype=np.int32)
    sc = np.zeros(_NSC, dtype=np.int64)
    sc[:8] = NIL
    sc[_HAND] = NIL
    sc[_CAP] = capacity
    sc[_BEHAV] = SCAN
    fp = np.zeros(2, dtype=np.float64)
    if pid == S3FIFO:
        small = new_ring(capacity, n)
        main = new_ring(capacity, n)
        ss = np.int64(capacity * small_ratio)
        gs = np.int64(capacity * ghost_ratio)
        ghost = new_ghost(gs)
        sc[_SMALL_SIZE], sc[_MAIN_SIZE], sc[_GHOST_SIZE] = ss, capacity - ss, gs
        sc[_THRESH] = move_to_main_threshold
    elif pid == LIRS:  # Q links in small/main, NH links in ghost/gpos, LIRS flags in cnt
        cnt = np.zeros(n, dtype=np.int32)
        small = np.full(n, NIL, dtype=np.int32)
        main = np.full(n, NIL, dtype=np.int32)
        ghost = np.full(n, NIL, dtype=np.int32)
        gpos = np.full(n, NIL, dtype=np.int32)
        hirs = max(1, int(hir_ratio * capacity))
        sc[_SMALL_SIZE], sc[_MAIN_SIZE] = capacity - hirs, hirs  # LIR set, resident HIR (Q)
    elif pid == LFU:  # node of each block, then per frequency node (lfu_form.py)
        cnt, gpos, small, main, ghost = lfu_arrays(n, capacity, sc)
    else:
        small = main = ghost = np.zeros(1, dtype=np.int32)
    return prev, nxt, flag, cnt, gpos, small, main, ghost, sc, fp


# ---------------------------------------------------------------- list helpers over sc ends


@njit(cache=True, inline="always")
def _push_head(prev, nxt, sc, q, x):
    h = np.int32(sc[2 * q])
    prev[x] = NIL
    nxt[x] = h
    if h == NIL:
        sc[2 * q + 1] = x
    else:
        prev[h] = x
    sc[2 * q] = x
    sc[_N0 + q] += 1


@njit(cache=True, inline="always")
def _unlink(prev, nxt, sc, q, x):
    p = prev[x]
    n = nxt[x]
    if p == NIL:
        sc[2 * q] = n
    else:
        nxt[p] = n
    if n == NIL:
        sc[2 * q + 1] = p
    else:
        prev[n] = p
    prev[x] = NIL
    nxt[x] = NIL
    sc[_N0 + q] -= 1


@njit(cache=True, inline="always")
def _oldest_unpinned(prev, nxt, flag, sc, q):
    """The oldest unpinned member of list q (NIL if none); pinned blocks at the tail are
    parked on the way (unlinked, still counted in the list's size), so each pinned block is
    passed over once per pin, not once per eviction."""
    x = np.int32(sc[2 * q + 1])
    while x != NIL and flag[x] & _PINNED:
        p = prev[x]
        sc[2 * q + 1] = p
        if p == NIL:
            sc[2 * q] = NIL
        else:
            nxt[p] = NIL
        prev[x] = NIL
        flag[x] |= _PARKED
        x = p
    return x


@njit(cache=True, inline="always")
def _unpark(prev, nxt, flag, sc, q, x):
    """A parked block, unpinned: back at list q's tail (the oldest end), where it was."""
    t = np.int32(sc[2 * q + 1])
    nxt[x] = NIL
    prev[x] = t
    if t == NIL:
        sc[2 * q] = x
    else:
        nxt[t] = x
    sc[2 * q + 1] = x
    flag[x] &= (0xFF ^ _PARKED)


# ---------------------------------------------------------------- the operations


@njit(cache=True, inline="always")
def ev_hit(pid, S, x):
    """Returns a block the hit evicted (LIRS only: a Q-only hit can push out Q's bottom), else NIL."""
    if pid == LRU:
        return _lru.hit(S.lru, x)
    prev, nxt, flag, cnt, gpos, small, main, ghost, sc, fp = S.legacy
    if pid == LIRS:
        return lirs_hit(S.legacy, x)
    if pid == LFU:
        lfu_hit(S.legacy, x)
        return np.int32(NIL)
    if pid == SIEVE:
        flag[x] |= _VISITED
    elif pid == S3FIFO:
        cnt[x] += 1
    elif pid == ARC or pid == SITS:  # noqa: SIM109
        if flag[x] & _PARKED:
            flag[x] &= (0xFF ^ _PARKED)
            sc[_N0 + cnt[x]] -= 1
        else:
            _unlink(prev, nxt, sc, cnt[x], x)  # T1 or T2, to the head of T2
        _push_head(prev, nxt, sc, _T2, x)
        cnt[x] = _T2
    return np.int32(NIL)


@njit(cache=True, inline="always")
def ev_miss(pid, S, x):
    if pid == LRU:
        _lru.miss(S.lru, x)
        return
    prev, nxt, flag, cnt, gpos, small, main, ghost, sc, fp = S.legacy
    sc[_MISS_GHOST] = 0
    if pid == LIRS:
        lirs_miss(S.legacy, x)
    elif pid == S3FIFO:
        if ghost_take(flag, x):
            sc[_GQ] -= 1
            sc[_MISS_GHOST] = 1
            flag[x] |= _PEND_G
    elif pid == ARC or pid == SITS:  # noqa: SIM109 (SITS: ghost hits adapt p in both behaviours)
        sc[_MISS_GHOST] = _arc_ghost_hit(prev, nxt, flag, cnt, sc, fp, x)


@njit(cache=True, inline="always")
def _arc_ghost_hit(prev, nxt, flag, cnt, sc, fp, x):
    """ARC / SITS: x in B1 or B2 leaves its ghost list, adapting p, marked to be admitted to T2;
    returns 1 (B1), 2 (B2) or 0 (no ghost)."""
    w = cnt[x]
    if w == _B1:
        fp[0] = min(fp[0] + max(sc[_N3] / sc[_N2], 1.0), float(sc[_CAP]))
        _unlink(prev, nxt, sc, _B1, x)
        cnt[x] = NIL
        flag[x] |= _PEND_G
        return 1
    if w == _B2:
        fp[0] = max(fp[0] - max(sc[_N2] / sc[_N3], 1.0), 0.0)
        _unlink(prev, nxt, sc, _B2, x)
        cnt[x] = NIL
        flag[x] |= _PEND_G | _PEND_B2
        return 2
    return 0


@njit(cache=True, inline="always")
def ev_admit(pid, S, x):
    """`x` becomes cached, pinned (the pool's ref count is 1)."""
    if pid == LRU:
        _lru.admit(S.lru, x)
        return
    prev, nxt, flag, cnt, gpos, small, main, ghost, sc, fp = S.legacy
    flag[x] |= _PINNED
    if pid == LIRS:
        lirs_admit(S.legacy, x)
    elif pid == LFU:
        lfu_admit(S.legacy, x)
    elif pid == FIFO or pid == SIEVE:  # noqa: SIM109
        _push_head(prev, nxt, sc, 0, x)
        flag[x] &= (0xFF ^ _VISITED)
    elif pid == S3FIFO:
        if flag[x] & _PEND_G or (sc[_HAS_EVICTED] == 0 and sc[_N0] >= sc[_SMALL_SIZE]):
            sc[_HM] = ring_push(main, sc[_HM], x)
            flag[x] |= _MAIN
            sc[_N1] += 1
        else:
            sc[_HS] = ring_push(small, sc[_HS], x)
            flag[x] |= _SMALL
            sc[_N0] += 1
        cnt[x] = 0
    elif pid == ARC or pid == SITS:  # noqa: SIM109
        # x may have become a ghost since its miss was looked up: the pool looks a block up when
        # it allocates its slot and caches it when the block is full, steps later; meanwhile
        # another request's cached copy of the id (which a request past its prefix's first miss
        # recomputes privately) can be evicted into B1/B2, and the LIRS -> SITS back buffer puts
        # the NH blocks still being computed into B1. Its admission is then its ghost hit
        # (`_arc_ghost_hit`); pushed onto T1/T2 while still linked in a ghost list it would
        # corrupt both lists and their counts (issue 11: B1's count 0 with a block in B1).
        _arc_ghost_hit(prev, nxt, flag, cnt, sc, fp, x)
        if flag[x] & _PEND_G or (pid == SITS and sc[_BEHAV] == RECENCY):  # recency: one LRU list, T2
            _push_head(prev, nxt, sc, _T2, x)
            cnt[x] = _T2
        else:
            _push_head(prev, nxt, sc, _T1, x)
            cnt[x] = _T1
    flag[x] &= (0xFF ^ (_PEND_G | _PEND_B2))
    sc[_MISS_GHOST] = 0


@njit(cache=True, inline="always")
def ev_pin(pid, S, x):
    if pid == LRU:
        _lru.pin(S.lru, x)
        return
    prev, nxt, flag, cnt, gpos, small, main, ghost, sc, fp = S.legacy
    flag[x] |= _PINNED


@njit(cache=True, inline="always")
def ev_unpin(pid, S, x):
    if pid == LRU:
        _lru.unpin(S.lru, x)
        return
    prev, nxt, flag, cnt, gpos, small, main, ghost, sc, fp = S.legacy
    flag[x] &= (0xFF ^ _PINNED)
    if pid == SITS and sc[_BEHAV] == RECENCY:
        _sits_to_t2_head(prev, nxt, flag, cnt, sc, x)
    elif flag[x] & _PARKED:
        if pid == S3FIFO:  # back at its ring's oldest end
            flag[x] &= (0xFF ^ _PARKED)
            if flag[x] & _SMALL:
                t = sc[_TS] - 1 if sc[_TS] > 0 else small.shape[0] - 1
                small[t] = x
                sc[_TS] = t
                sc[_PS] -= 1
            else:
                t = sc[_TM] - 1 if sc[_TM] > 0 else main.shape[0] - 1
                main[t] = x
                sc[_TM] = t
                sc[_PM] -= 1
        elif pid == LIRS:  # back at Q's oldest end (Q's links are small/main, its ends sc[2], sc[3])
            _unpark(small, main, flag, sc, 1, x)
        elif pid == LFU:
            lfu_unpark(S.legacy, x)
        else:
            _unpark(prev, nxt, flag, sc, cnt[x] if pid == ARC or pid == SITS else 0, x)  # noqa: SIM109


@njit(cache=True, inline="always")
def _sits_to_t2_head(prev, nxt, flag, cnt, sc, x):
    """SITS recency: a block freed (unpinned) goes to T2's head, as vLLM's free queue appends it."""
    if flag[x] & _PARKED:
        flag[x] &= (0xFF ^ _PARKED)
        sc[_N0 + cnt[x]] -= 1
    else:
        _unlink(prev, nxt, sc, cnt[x], x)
    _push_head(prev, nxt, sc, _T2, x)
    cnt[x] = _T2


@njit(cache=True)
def _sits_recency_victim(prev, nxt, flag, cnt, sc):
    """SITS recency: T1's oldest unpinned block (what a scan period left drains first), else
    T2's; forgotten, no ghost (as classic/arc.py's RECENCY)."""
    q = _T1
    x = _oldest_unpinned(prev, nxt, flag, sc, _T1)
    if x == NIL:
        q = _T2
        x = _oldest_unpinned(prev, nxt, flag, sc, _T2)
    _unlink(prev, nxt, sc, q, x)
    cnt[x] = NIL
    return x


@njit(cache=True)
def _arc_drop_tail(prev, nxt, flag, cnt, sc, q):
    x = _oldest_unpinned(prev, nxt, flag, sc, q) if q <= _T2 else np.int32(sc[2 * q + 1])
    _unlink(prev, nxt, sc, q, x)
    cnt[x] = NIL
    return x


@njit(cache=True)
def ev_victim(pid, S):
    if pid == LRU:
        return _lru.victim(S.lru)
    prev, nxt, flag, cnt, gpos, small, main, ghost, sc, fp = S.legacy
    if pid == LIRS:
        return lirs_victim(S.legacy)
    if pid == LFU:
        return lfu_victim(S.legacy)
    if pid == FIFO:
        x = _oldest_unpinned(prev, nxt, flag, sc, 0)
        _unlink(prev, nxt, sc, 0, x)
        return x
    if pid == SIEVE:
        tail = np.int32(sc[_T0])
        obj = np.int32(sc[_HAND]) if sc[_HAND] != NIL else tail
        while flag[obj] & (_VISITED | _PINNED):
            if not flag[obj] & _PINNED:
                flag[obj] &= (0xFF ^ _VISITED)
            obj = prev[obj] if prev[obj] != NIL else tail
        sc[_HAND] = prev[obj]
        _unlink(prev, nxt, sc, 0, obj)
        flag[obj] &= (0xFF ^ _VISITED)
        return obj
    if pid == S3FIFO:
        sc[_HAS_EVICTED] = 1
        while True:
            ls = sc[_N0] - sc[_PS]  # blocks on the rings (parked ones are off them)
            lm = sc[_N1] - sc[_PM]
            if (sc[_N1] > sc[_MAIN_SIZE] or sc[_N0] == 0 or ls == 0) and lm > 0:
                # main is a clock: recycle blocks with a non-zero counter, evict the first zero
                while lm > 0:
                    x, sc[_TM] = ring_pop(main, sc[_TM])
                    if flag[x] & _PINNED:
                        flag[x] |= _PARKED
                        sc[_PM] += 1
                        lm -= 1
                        continue
                    f = cnt[x]
                    if f >= 1:
                        sc[_HM] = ring_push(main, sc[_HM], x)
                        cnt[x] = min(f, 3) - 1
                    else:
                        flag[x] &= (0xFF ^ _MAIN)
                        sc[_N1] -= 1
                        return x
                continue
            if ls == 0:
                return np.int32(NIL)  # the pool promised an evictable block
            while ls > 0:
                x, sc[_TS] = ring_pop(small, sc[_TS])
                ls -= 1
                if flag[x] & _PINNED:
                    flag[x] |= _PARKED
                    sc[_PS] += 1
                    continue
                sc[_N0] -= 1
                if cnt[x] >= sc[_THRESH]:
                    sc[_HM] = ring_push(main, sc[_HM], x)
                    flag[x] = (flag[x] & (0xFF ^ _SMALL)) | _MAIN
                    cnt[x] = 0
                    sc[_N1] += 1
                    continue
                flag[x] &= (0xFF ^ _SMALL)
                gq = ghost_add(ghost, gpos, flag, (sc[_GQ], sc[_GQ + 1], sc[_GQ + 2], sc[_GQ + 3]),
                               sc[_GHOST_SIZE], x)
                sc[_GQ], sc[_GQ + 1], sc[_GQ + 2], sc[_GQ + 3] = gq[0], gq[1], gq[2], gq[3]
                return x
    if pid == SITS and sc[_BEHAV] == RECENCY:
        return _sits_recency_victim(prev, nxt, flag, cnt, sc)
    # ARC (and SITS in its SCAN behaviour)
    cap = sc[_CAP]
    ghost_hit = sc[_MISS_GHOST] != 0
    in_b2_hit = sc[_MISS_GHOST] == 2
    p = fp[0]
    if not ghost_hit:
        n1, nb1 = sc[_N0], sc[_N2]
        if n1 + nb1 + 1 > cap:
            if nb1 == 0:
                if _oldest_unpinned(prev, nxt, flag, sc, _T1) != NIL:
                    return _arc_drop_tail(prev, nxt, flag, cnt, sc, _T1)
            else:
                _arc_drop_tail(prev, nxt, flag, cnt, sc, _B1)
        elif n1 + nb1 + sc[_N1] + sc[_N3] >= 2 * cap and sc[_N3] > 0:
            _arc_drop_tail(prev, nxt, flag, cnt, sc, _B2)
    n1, n2 = sc[_N0], sc[_N1]
    x1 = _oldest_unpinned(prev, nxt, flag, sc, _T1)
    x2 = _oldest_unpinned(prev, nxt, flag, sc, _T2)
    if x2 == NIL or (x1 != NIL and ((n1 > 0 and (n1 > p or (n1 == p and in_b2_hit))) or n2 == 0)):
        x = x1
        _unlink(prev, nxt, sc, _T1, x)
        _push_head(prev, nxt, sc, _B1, x)
        cnt[x] = _B1
    else:
        x = x2
        _unlink(prev, nxt, sc, _T2, x)
        _push_head(prev, nxt, sc, _B2, x)
        cnt[x] = _B2
    return x
