"""SGLang radix-cache rules (SGLang 0.5.23 RadixCache, mem_cache/radix_cache.py) at block
granularity, in numba.

Tree entries are cached blocks (content ids), each block's parent the previous block of its
prefix (the root for a first block). SGLang's tree NODES are runs of blocks: a node is what one
insert added (a prefill chunk's `checkpoint`, or a finished request's decoded rest), split where
a later match or insert ends inside it. `head[x]` marks the first block of a node and
`child1[x]` links a block to the next block of its own node (NIL at a node's last block), so a
node is the chain head -> child1 -> ... -> tail. SGLang's `evict` frees the chosen leaf NODE
whole, repeating until the shortfall is met: here a demand for one more block pops the leaf
tail with the smallest stamp and frees its chain up to its head (the same victims in the same
order as SGLang's loop over a chunk's whole shortfall).

A running request locks its path (a lock count per block for every running request holding
it: the pool's `ref`; node-aligned, as a match splits the node it ends inside). Only unlocked
LEAF nodes are evictable, the one with the smallest last-access stamp first (LRU); freeing one
may make its parent a leaf, which then competes by its own stamp. Stamps come from a counter
that ticks once per walk, and every block of a node a walk touches carries that tick (SGLang
stamps a walk with one `time.monotonic()`): a match stamps its path and, when it ends inside a
node, that node's unmatched rest too (`_match_prefix_helper` stamps the child before it splits
it); an insert stamps its whole path. Inserting a block the tree already holds keeps the tree's
copy and frees the request's (a radix tree holds no duplicates).

Pool counters are pool.py's: N_CACHED = tree blocks, N_EVICTABLE = unlocked blocks (every
unlocked block is evictable eventually: a locked block's ancestors are locked too), N_PRIVATE =
blocks of running requests not in the tree. Candidate leaf tails sit in a binary min-heap of
(stamp, id), checked when popped (stale entries skipped) and compacted when it fills.
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit

from .pool import CAPACITY, N_CACHED, N_EVICTABLE, N_PRIVATE, drop

__all__ = ["NIL", "RADIX_POLICIES", "new_radix", "r_allocate", "r_register", "r_release", "r_touch"]

NIL = -1
_HN, _CLOCK, _POLICY = 0, 1, 2  # scalars in rs: heap entries, stamp counter, eviction policy
#: SGLang's eviction strategies (mem_cache/evict_policy.py), by the leaf key each sorts by:
#: lru last_access_time, lfu (hit_count, last_access_time), fifo creation_time, mru
#: -last_access_time, filo -creation_time, priority (priority, last_access_time).
RADIX_POLICIES = ("lru", "lfu", "fifo", "mru", "filo", "priority")
_LRU, _LFU, _FIFO, _MRU, _FILO, _PRIORITY = range(6)
_HIGH = 1 << 40  # a tuple key's first field, above any stamp


def new_radix(n_ids: int, sglang: bool, policy: str = "lru"):
    n = max(int(n_ids), 1) if sglang else 1
    parent = np.full(n, NIL, dtype=np.int32)
    nchild = np.zeros(n, dtype=np.int32)
    access = np.zeros(n, dtype=np.int64)
    heap_a = np.zeros(2 * n + 16, dtype=np.int64)
    heap_x = np.zeros(2 * n + 16, dtype=np.int32)
    rs = np.zeros(4, dtype=np.int64)
    head = np.zeros(n, dtype=np.int8)
    child1 = np.full(n, NIL, dtype=np.int32)
    born = np.zeros(n, dtype=np.int64)  # creation_time: the insert (or split) that made the node
    hitc = np.zeros(n, dtype=np.int64)  # hit_count: inserts that passed through the node
    prio = np.zeros(n, dtype=np.int64)  # priority: 1 on a finished request's prompt path
    rs[_POLICY] = RADIX_POLICIES.index(policy)
    return parent, nchild, access, heap_a, heap_x, rs, head, child1, born, hitc, prio


@njit(cache=True, inline="always")
def _key(R, x):
    """The eviction key of x's node (the smallest is evicted first)."""
    parent, nchild, access, heap_a, heap_x, rs, head, child1, born, hitc, prio = R
    p = rs[_POLICY]
    if p == _LFU:
        return hitc[x] * _HIGH + access[x]
    if p == _FIFO:
        return born[x]
    if p == _MRU:
        return -access[x]
    if p == _FILO:
        return -born[x]
    if p == _PRIORITY:
        return prio[x] * _HIGH + access[x]
    return access[x]


@njit(cache=True, inline="always")
def _valid(R, ref, cached, a, x):
    parent, nchild, access, heap_a, heap_x, rs, head, child1, born, hitc, prio = R
    return cached[x] != 0 and ref[x] == 0 and nchild[x] == 0 and _key(R, x) == a


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
    parent, nchild, access, heap_a, heap_x, rs, head, child1, born, hitc, prio = R
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
    heap_a[n] = _key(R, x)
    heap_x[n] = x
    _sift_up(heap_a, heap_x, n)
    rs[_HN] = n + 1


@njit(cache=True)
def _tick(R):
    parent, nchild, access, heap_a, heap_x, rs, head, child1, born, hitc, prio = R
    rs[_CLOCK] += 1
    return rs[_CLOCK]


@njit(cache=True)
def _stamp(R, ref, cached, x, t):
    parent, nchild, access, heap_a, heap_x, rs, head, child1, born, hitc, prio = R
    access[x] = t
    if ref[x] == 0 and nchild[x] == 0:
        _push(R, ref, cached, x)


@njit(cache=True)
def _split_after(R, ref, cached, x, t):
    """A walk (match or insert) ended at block x inside a node: the node splits after x, its
    rest (x's in-node child down to the tail) is stamped, as SGLang stamps the child it splits,
    and the part up to x is a node created now (`_split_node` makes it a new TreeNode)."""
    parent, nchild, access, heap_a, heap_x, rs, head, child1, born, hitc, prio = R
    c = child1[x]
    if c == NIL:
        return
    child1[x] = NIL
    head[c] = 1
    y = x  # the matched part is a new node (`_split_node`): created now
    while True:
        born[y] = t
        if head[y] != 0 or parent[y] == NIL:
            break
        y = parent[y]
    while c != NIL:
        _stamp(R, ref, cached, c, t)
        c = child1[c]


@njit(cache=True)
def _lock(ref, pc, x):
    if ref[x] == 0:
        pc[N_EVICTABLE] -= 1
    ref[x] += 1


@njit(cache=True)
def _unlock(R, ref, cached, pc, x):
    parent, nchild, access, heap_a, heap_x, rs, head, child1, born, hitc, prio = R
    ref[x] -= 1
    if ref[x] == 0:
        pc[N_EVICTABLE] += 1
        if nchild[x] == 0:
            _push(R, ref, cached, x)


@njit(cache=True)
def r_touch(R, ids, b0, k, ref, cached, kind, pc):
    """Lock the k hit blocks (root to leaf), stamping the match's path (one tick) and splitting
    the node the match ends inside."""
    t = _tick(R)
    for i in range(k):
        x = ids[b0 + i]
        _stamp(R, ref, cached, x, t)
        _lock(ref, pc, x)
        kind[b0 + i] = 1
    if k > 0:
        _split_after(R, ref, cached, ids[b0 + k - 1], t)


@njit(cache=True)
def _evict_one(R, ref, cached, pc, ev_log):
    """Free the leaf node with the smallest stamp whole: its tail block up to its head."""
    parent, nchild, access, heap_a, heap_x, rs, head, child1, born, hitc, prio = R
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
        while True:
            drop(cached, pc, ev_log, x)
            p = parent[x]
            parent[x] = NIL
            was_head = head[x] != 0 or p == NIL
            head[x] = 0
            child1[x] = NIL
            if p != NIL:
                nchild[p] -= 1
                if was_head:
                    if nchild[p] == 0 and ref[p] == 0:
                        _push(R, ref, cached, p)
                else:
                    child1[p] = NIL
            if was_head:
                return
            x = p


@njit(cache=True)
def r_allocate(R, ids, b0, lo, hi, ref, cached, kind, pc, ev_log):
    for i in range(lo, hi):
        if pc[CAPACITY] - pc[N_CACHED] - pc[N_PRIVATE] <= 0:
            _evict_one(R, ref, cached, pc, ev_log)
        pc[N_PRIVATE] += 1
        kind[b0 + i] = 2


@njit(cache=True)
def r_register(R, ids, b0, lo, hi, ref, cached, kind, pc, ins):
    """One insert of the request's first hi blocks (SGLang's `checkpoint`): its blocks lo..hi-1
    not yet in the tree join it, the new ones (after the ones another request inserted
    meanwhile: the tree is prefix-closed) as ONE new node; the whole path is stamped. `ins`: the
    blocks this request inserted before (`cache_inserted_len`): the nodes past it count a hit."""
    parent, nchild, access, heap_a, heap_x, rs, head, child1, born, hitc, prio = R
    t = _tick(R)
    prev_new = False
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
            child1[x] = NIL
            hitc[x] = 0
            prio[x] = 0
            born[x] = t
            if prev_new:
                head[x] = 0
                child1[p] = x
            else:
                head[x] = 1
                if p != NIL:  # an insert diverging inside p's node splits it, stamping the rest
                    _split_after(R, ref, cached, p, t)
            if p != NIL:
                nchild[p] += 1
            prev_new = True
        _lock(ref, pc, x)
        kind[b0 + i] = 1
    for i in range(hi):
        x = ids[b0 + i]
        if i >= ins:
            hitc[x] += 1
        _stamp(R, ref, cached, x, t)
    if hi > 0:
        _split_after(R, ref, cached, ids[b0 + hi - 1], t)


@njit(cache=True)
def r_release(R, ids, b0, held, ref, cached, kind, pc, finished, ins, full, prompt_blocks):
    """A finished request inserts its first `full` blocks (the decoded rest as one node), then
    its prompt again with priority + 1, splitting at the prompt's last full block
    (`checkpoint(split_prompt=True)`), and matches the whole path (stamped); a preempted one
    (SGLang's retract: `release_kv_cache(checkpoint=False)`) inserts nothing. Then its locks
    go and its private blocks are freed. `ins`: the blocks it inserted before."""
    parent, nchild, access, heap_a, heap_x, rs, head, child1, born, hitc, prio = R
    if finished:
        hi = min(full, held)
        r_register(R, ids, b0, ins, hi, ref, cached, kind, pc, ins)
        if 0 < prompt_blocks < hi:
            t = _tick(R)
            for i in range(prompt_blocks):
                prio[ids[b0 + i]] = max(prio[ids[b0 + i]], 1)
            _split_after(R, ref, cached, ids[b0 + prompt_blocks - 1], t)
        t = _tick(R)
        for i in range(hi):
            _stamp(R, ref, cached, ids[b0 + i], t)
    for i in range(held - 1, -1, -1):
        k = kind[b0 + i]
        if k == 1:
            _unlock(R, ref, cached, pc, ids[b0 + i])
        elif k == 2:
            pc[N_PRIVATE] -= 1
        kind[b0 + i] = 0
