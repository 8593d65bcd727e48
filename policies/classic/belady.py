"""Belady's MIN (offline optimal): on a miss with the cache full, evict the resident block whose
next use lies farthest in the future (libCacheSim `Belady` semantics).

It reads the future, so no online policy can run it; it is the headroom line: the most hits
any policy that caches every missed block can get from the trace at that capacity. Every
missed block is inserted (no bypass), as in libCacheSim, so at equal capacity it is an upper
bound on lru, fifo, lfu, sieve, arc, s3fifo and the others.

Next uses come from one backward pass over the dense block ids (O(n)). A block that is never
used again gets a key beyond every position (n + block id), so those go first; keys are
otherwise distinct positions, so there are no other ties. Residents sit in an indexed 4-ary
max-heap keyed by next use: a miss with the cache full puts the newcomer in the root's slot
(the farthest block leaves) and sifts it down, a hit raises the block's key (its next use
moves from now to the one after) and sifts it up, each O(log C). Four children rather than
two halve the heap's depth, and their keys share a cache line; with the one sift per miss
(instead of popping the root and pushing the newcomer) the kernel took 0.265 -> 0.160 s on
the bench trace (bench/README.md).
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit
from sitsprof.common.prefetch import AHEAD, prefetch

from ._structs import grow

__all__ = [
    "DESCRIPTION",
    "KERNEL",
    "NAME",
    "NUMBA_CACHE_DEPENDS",
    "STREAM_FUTURE",
    "grow_state",
    "max_resident",
    "new_state",
    "new_stream_state",
    "next_uses",
    "replay_window",
    "stream_window",
]

#: inlined into this module's kernels: part of their cache key (common/numba_locator.py)
NUMBA_CACHE_DEPENDS = ("_structs.py",)

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
        parent = (p - 1) >> 2
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
    """Move the entry at slot p down while a child's key (slots 4p+1..4p+4) is larger."""
    k = keys[p]
    b = blocks[p]
    while True:
        first = 4 * p + 1
        if first >= size:
            break
        child = first
        largest = keys[first]
        for c in range(first + 1, min(first + 4, size)):
            if keys[c] > largest:
                largest = keys[c]
                child = c
        if largest <= k:
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
    sc = np.zeros(1, dtype=np.int64)  # residents (the heap's size)
    evictions = replay_window(block, 0, block.shape[0], nxt, keys, blocks, pos, sc, capacity, hit)
    return evictions, sc[_SIZE]


# ----------------------------------------------------------------- resumable form (streaming)
# The loop over references lo..hi-1 with its state kept between calls: KERNEL is one window
# over the whole trace, engine/stream.py calls it chunk by chunk. Unlike the online policies
# it reads `future`: for each reference, the key `next_uses` gives it (the position of the
# next reference to its block in the whole trace, else that trace's length + block id), which
# the streaming replay takes from the file's next_access_vtime or computes in a backward pass
# (docs/scale.md). The heap's slots are min(capacity, blocks so far); they fill from slot 0
# and nothing leaves before the cache is full, so growing them keeps the heap.
_SIZE = 0
#: The streaming replay must pass each reference's next-use key (`future`) to `stream_window`.
STREAM_FUTURE = True


def _slots(n_blocks, capacity):
    return max(min(int(capacity), int(n_blocks)), 1)


def new_state(n_blocks, capacity):
    """Heap keys and blocks (min(capacity, blocks) slots), pos (one per block), scalars (size)."""
    m = _slots(n_blocks, capacity)
    return (np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int32),
            np.full(max(int(n_blocks), 1), -1, dtype=np.int32), np.zeros(1, dtype=np.int64))


def grow_state(state, n_blocks, capacity):
    keys, blocks, pos, sc = state
    m = _slots(n_blocks, capacity)
    return grow(keys, m, 0), grow(blocks, m, 0), grow(pos, n_blocks, -1), sc


def max_resident(state):
    return int(state[3][_SIZE])  # residents never leave but to make room for one


@njit(cache=True, inline="always")
def replay_window(block, lo, hi, future, keys, blocks, pos, sc, capacity, hit):
    """Serve references lo..hi-1 (`future[i]`: reference i's next-use key); returns the evictions."""
    size = sc[_SIZE]
    evictions = 0
    for i in range(lo, hi):
        if i + AHEAD < hi:  # the block served AHEAD references from now: its slot on the way
            prefetch(pos, block[i + AHEAD])
        b = block[i]
        p = pos[b]
        if p >= 0:
            hit[i] = 1
            keys[p] = future[i]  # its key grows from i (the smallest in the heap) to its next use
            _sift_up(keys, blocks, pos, np.int64(p))  # int64, as below: one compile
            continue
        hit[i] = 0
        if size >= capacity:
            # the farthest block (the root) leaves; the newcomer takes its slot and sinks
            pos[blocks[0]] = -1
            evictions += 1
            keys[0] = future[i]
            blocks[0] = b
            _sift_down(keys, blocks, pos, np.int64(0), size)
            continue
        keys[size] = future[i]
        blocks[size] = b
        size += 1
        _sift_up(keys, blocks, pos, size - 1)
    sc[_SIZE] = size
    return evictions


def stream_window(state, block, lo, hi, capacity, hit, future):
    return replay_window(block, np.int64(lo), np.int64(hi), np.ascontiguousarray(future, dtype=np.int64), *state,
                         np.int64(capacity), hit)


new_stream_state = new_state
