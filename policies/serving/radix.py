"""SGLang radix-cache rules (RadixCache) at block granularity, in numba.

Tree nodes are cached blocks (content ids), each node's parent the previous block of its
prefix (the root for a first block). A running request locks its path (a lock count per node
for every running request holding it: the pool's `ref`). Only unlocked LEAVES are evictable,
the one with the smallest last-access stamp first (LRU); evicting a leaf may make its parent a
leaf, which then competes by its own stamp. Access stamps come from a counter that ticks once
per node stamped, root to leaf, so no two tie: a node is stamped when a request's lookup hits
it (admission), when it enters the tree, and along a finished request's whole path
(`cache_finished_req` inserts the finished sequence). Inserting a block whose id the tree
already holds keeps the tree's node and frees the request's copy (a radix tree holds no
duplicates).

Pool counters are pool.py's: N_CACHED = tree nodes, N_EVICTABLE = unlocked nodes (every
unlocked node is evictable eventually: a locked node's ancestors are locked too), N_PRIVATE =
blocks of running requests not in the tree. Candidate leaves sit in a binary min-heap of
(stamp, id), checked when popped (stale entries skipped) and compacted when it fills.
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit

from .pool import CAPACITY, EVICTIONS, LOG_N, LOG_ON, N_CACHED, N_EVICTABLE, N_PRIVATE

NIL = -1
_HN, _CLOCK = 0, 1  # scalars in rs: heap entries, stamp counter


def new_radix(n_ids: int, sglang: bool):
    n = max(int(n_ids), 1) if sglang else 1
    parent = np.full(n, NIL, dtype=np.int32)
    nchild = np.zeros(n, dtype=np.int32)
    access = np.zeros(n, dtype=np.int64)
    heap_a = np.zeros(2 * n + 16, dtype=np.int64)
    heap_x = np.zeros(2 * n + 16, dtype=np.int32)
    rs = np.zeros(4, dtype=np.int64)
    return parent, nchild, access, heap_a, heap_x, rs


@njit(cache=True, inline="always")
def _valid(R, ref, cached, a, x):
    parent, nchild, access, heap_a, heap_x, rs = R
    return cached[x] != 0 and ref[x] == 0 and nchild[x] == 0 and access[x] == a


@njit(cache=True)
def _sift_up(heap_a, heap_x, i):
    a, x = heap_a[i], heap_x[i]
    while i > 0:
        p = (i - 1) >> 1
        if heap_a[p] <= a:
            break
        heap_a[i], heap_x[i] = heap_a[p], heap_x[p]
        i = p
    heap_a[i], heap_x[i] = a, x


@njit(cache=True)
def _sift_down(heap_a, heap_x, n, i):
    a, x = heap_a[i], heap_x[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and heap_a[c + 1] < heap_a[c]:
            c += 1
        if heap_a[c] >= a:
            break
        heap_a[i], heap_x[i] = heap_a[c], heap_x[c]
        i = c
    heap_a[i], heap_x[i] = a, x


@njit(cache=True)
def _push(R, ref, cached, x):
    parent, nchild, access, heap_a, heap_x, rs = R
    n = rs[_HN]
    if n == heap_a.shape[0]:  # compact: keep the valid entries only (at most one per node)
        m = 0
        for i in range(n):
            if _valid(R, ref, cached, heap_a[i], heap_x[i]):
                heap_a[m], heap_x[m] = heap_a[i], heap_x[i]
                m += 1
        n = m
        for i in range(n // 2 - 1, -1, -1):
            _sift_down(heap_a, heap_x, n, i)
    heap_a[n] = access[x]
    heap_x[n] = x
    _sift_up(heap_a, heap_x, n)
    rs[_HN] = n + 1


@njit(cache=True)
def _stamp(R, ref, cached, x):
    parent, nchild, access, heap_a, heap_x, rs = R
    rs[_CLOCK] += 1
    access[x] = rs[_CLOCK]
    if ref[x] == 0 and nchild[x] == 0:
        _push(R, ref, cached, x)


@njit(cache=True)
def _lock(ref, pc, x):
    if ref[x] == 0:
        pc[N_EVICTABLE] -= 1
    ref[x] += 1


@njit(cache=True)
def _unlock(R, ref, cached, pc, x):
    parent, nchild, access, heap_a, heap_x, rs = R
    ref[x] -= 1
    if ref[x] == 0:
        pc[N_EVICTABLE] += 1
        if nchild[x] == 0:
            _push(R, ref, cached, x)


@njit(cache=True)
def r_touch(R, ids, b0, k, ref, cached, kind, pc):
    """Lock the k hit blocks (root to leaf), stamping each."""
    for i in range(k):
        x = ids[b0 + i]
        _stamp(R, ref, cached, x)
        _lock(ref, pc, x)
        kind[b0 + i] = 1


@njit(cache=True)
def _evict_one(R, ref, cached, pc, ev_log):
    parent, nchild, access, heap_a, heap_x, rs = R
    while True:
        n = rs[_HN]
        a, x = heap_a[0], heap_x[0]
        n -= 1
        heap_a[0], heap_x[0] = heap_a[n], heap_x[n]
        rs[_HN] = n
        if n > 0:
            _sift_down(heap_a, heap_x, n, 0)
        if not _valid(R, ref, cached, a, x):
            continue
        cached[x] = 0
        pc[N_CACHED] -= 1
        pc[N_EVICTABLE] -= 1
        pc[EVICTIONS] += 1
        if pc[LOG_ON]:
            m = pc[LOG_N]
            if m < ev_log.shape[0]:
                ev_log[m] = x
            pc[LOG_N] = m + 1
        p = parent[x]
        parent[x] = NIL
        if p != NIL:
            nchild[p] -= 1
            if nchild[p] == 0 and ref[p] == 0:
                _push(R, ref, cached, p)
        return


@njit(cache=True)
def r_allocate(R, ids, b0, lo, hi, ref, cached, kind, pc, ev_log):
    for i in range(lo, hi):
        if pc[CAPACITY] - pc[N_CACHED] - pc[N_PRIVATE] <= 0:
            _evict_one(R, ref, cached, pc, ev_log)
        pc[N_PRIVATE] += 1
        kind[b0 + i] = 2


@njit(cache=True)
def r_register(R, ids, b0, lo, hi, ref, cached, kind, pc):
    """Blocks lo..hi-1 of a request are full: into the tree (or onto the tree's copy)."""
    parent, nchild, access, heap_a, heap_x, rs = R
    for i in range(lo, hi):
        if kind[b0 + i] != 2:
            continue
        x = ids[b0 + i]
        pc[N_PRIVATE] -= 1
        if not cached[x]:
            cached[x] = 1
            pc[N_CACHED] += 1
            pc[N_EVICTABLE] += 1  # counted unlocked, then locked by this request
            p = ids[b0 + i - 1] if i > 0 else NIL
            parent[x] = p
            if p != NIL:
                nchild[p] += 1
        _lock(ref, pc, x)
        kind[b0 + i] = 1
        _stamp(R, ref, cached, x)


@njit(cache=True)
def r_release(R, ids, b0, held, ref, cached, kind, pc, finished):
    if finished:
        for i in range(held):
            if kind[b0 + i] == 1:
                _stamp(R, ref, cached, ids[b0 + i])
    for i in range(held - 1, -1, -1):
        k = kind[b0 + i]
        if k == 1:
            _unlock(R, ref, cached, pc, ids[b0 + i])
        elif k == 2:
            pc[N_PRIVATE] -= 1
        kind[b0 + i] = 0
