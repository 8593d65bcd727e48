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

from sitsprof.common.jit import njit

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
def _sift_up(keys, blocks, pos, p):
    """Move the entry at slot p up while its key is larger than its parent's."""
    k = keys[p]
    b = blocks[p]
    while p > 0:
        parent = (p - 1) >> 1
        if keys[parent] >= k:
            break
        keys[p] = keys[parent]
        blocks[p] = blocks[parent]
        pos[blocks[p]] = p
        p = parent
    keys[p] = k
    blocks[p] = b
    pos[b] = p


@njit(cache=True)
def _sift_down(keys, blocks, pos, p, size):
    """Move the entry at slot p down while a child's key is larger."""
    k = keys[p]
    b = blocks[p]
    while True:
        child = 2 * p + 1
        if child >= size:
            break
        if child + 1 < size and keys[child + 1] > keys[child]:
            child += 1
        if keys[child] <= k:
            break
        keys[p] = keys[child]
        blocks[p] = blocks[child]
        pos[blocks[p]] = p
        p = child
    keys[p] = k
    blocks[p] = b
    pos[b] = p


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    nxt = next_uses(block, n_blocks)
    slots = max(min(capacity, n_blocks), 1)
    # the heap: slot s holds a resident block and its next use, side by side so the sifts
    # compare keys without looking each block up (about 2x faster than keys indexed by block)
    keys = np.empty(slots, dtype=np.int64)
    blocks = np.empty(slots, dtype=np.int32)
    pos = np.full(max(n_blocks, 1), -1, dtype=np.int32)  # heap slot of a resident block, -1 if not
    size = 0
    evictions = 0
    for i in range(block.shape[0]):
        b = block[i]
        p = pos[b]
        if p >= 0:
            hit[i] = 1
            keys[p] = nxt[i]  # its key grows from i (the smallest in the heap) to its next use
            _sift_up(keys, blocks, pos, p)
            continue
        hit[i] = 0
        if size >= capacity:
            pos[blocks[0]] = -1
            evictions += 1
            size -= 1
            if size > 0:
                keys[0] = keys[size]
                blocks[0] = blocks[size]
                _sift_down(keys, blocks, pos, 0, size)
        keys[size] = nxt[i]
        blocks[size] = b
        size += 1
        _sift_up(keys, blocks, pos, size - 1)
    return evictions, size
