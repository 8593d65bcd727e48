"""Belady's MIN (offline optimal): on a miss with the cache full, evict the resident block whose
next use lies farthest in the future (libCacheSim `Belady` semantics).

It reads the future, so no online policy can run it; it is the headroom line: the most hits
any policy that caches every missed block can get from the trace at that capacity. Every
missed block is inserted (no bypass), as in libCacheSim, so at equal capacity it is an upper
bound on lru, fifo, lfu, sieve, arc, s3fifo and the others.

Next uses come from one backward pass over the dense block ids (O(n)). A block that is never
used again gets a key beyond every position (n + block id), so those go first; keys are
otherwise distinct positions, so there are no other ties. Residents sit in an indexed binary
max-heap keyed by next use: a miss pops the root and pushes the newcomer, a hit raises the
block's key (its next use moves from now to the one after) and sifts it up, each O(log C).
"""
from __future__ import annotations

import numpy as np
from numba import njit

NAME = "belady"
DESCRIPTION = "Offline optimal (Belady's MIN): evict the block used farthest in the future; the headroom bound"


@njit(cache=True)
def next_uses(block, n_blocks):
    """For each reference i, the position of the next reference to the same block, or
    n + block id when there is none (distinct keys, all beyond every position)."""
    n = block.shape[0]
    nxt = np.empty(n, dtype=np.int64)
    seen = np.full(max(n_blocks, 1), -1, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        b = block[i]
        j = seen[b]
        nxt[i] = j if j >= 0 else n + b
        seen[b] = i
    return nxt


@njit(cache=True)
def _sift_up(heap, pos, key, p):
    b = heap[p]
    k = key[b]
    while p > 0:
        parent = (p - 1) >> 1
        pb = heap[parent]
        if key[pb] >= k:
            break
        heap[p] = pb
        pos[pb] = p
        p = parent
    heap[p] = b
    pos[b] = p


@njit(cache=True)
def _sift_down(heap, pos, key, p, size):
    b = heap[p]
    k = key[b]
    while True:
        child = 2 * p + 1
        if child >= size:
            break
        if child + 1 < size and key[heap[child + 1]] > key[heap[child]]:
            child += 1
        cb = heap[child]
        if key[cb] <= k:
            break
        heap[p] = cb
        pos[cb] = p
        p = child
    heap[p] = b
    pos[b] = p


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    nxt = next_uses(block, n_blocks)
    slots = max(min(capacity, n_blocks), 1)
    heap = np.empty(slots, dtype=np.int32)  # resident blocks, max-heap on key
    pos = np.full(max(n_blocks, 1), -1, dtype=np.int64)  # heap slot of a resident block, -1 if not
    key = np.zeros(max(n_blocks, 1), dtype=np.int64)  # a resident block's next use
    size = 0
    evictions = 0
    for i in range(block.shape[0]):
        b = block[i]
        key[b] = nxt[i]
        p = pos[b]
        if p >= 0:
            hit[i] = 1
            _sift_up(heap, pos, key, p)  # its key grew from i to its next use
            continue
        hit[i] = 0
        if size >= capacity:
            victim = heap[0]
            pos[victim] = -1
            evictions += 1
            size -= 1
            if size > 0:
                heap[0] = heap[size]
                pos[heap[0]] = 0
                _sift_down(heap, pos, key, 0, size)
        heap[size] = b
        pos[b] = size
        size += 1
        _sift_up(heap, pos, key, size - 1)
    return evictions, size
