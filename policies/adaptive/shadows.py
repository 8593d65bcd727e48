"""Shadow evaluation: LRU and ARC replay a spatial sample of the trace to say which behaviour wins.

The sample is the references to blocks whose hash falls in 1/2^k of the space, replayed at
capacity/2^k: the "miniature simulation" of Waldspurger et al., USENIX ATC 2017. k is the
largest that leaves the shadows at least 1024 slots. Sampling and both replays run in one
compiled call before the SITS run, so the controller only reads per-window hit counts.
"""
from __future__ import annotations

import math

import numpy as np

from sitsprof.common.jit import njit

from ..classic.arc import RECENCY, new_state, replay_recency, replay_scan
from ..traces.hashing import GOLDEN

__all__ = ["first_use_code", "in_sample", "sample_mask", "sample_refs", "shadow_counts", "shadow_shift"]

# Position of a word's lowest set bit: _DEBRUIJN[(low * _DEBRUIJN_MUL) >> 58] for low = 2**i.
_DEBRUIJN_MUL = 0x03F79D71B4CB0A89
_DEBRUIJN = np.zeros(64, dtype=np.int64)
for _i in range(64):
    _DEBRUIJN[((1 << _i) * _DEBRUIJN_MUL % (1 << 64)) >> 58] = _i


@njit(cache=True, inline="always")
def sample_mask(k):
    """The mask `in_sample` takes for a sample of 1/2**k of the blocks."""
    return np.uint64((1 << k) - 1)


@njit(cache=True, inline="always")
def in_sample(b, mask):
    """The sampling rule: block id `b` is sampled when the top 16 bits of b * GOLDEN, under
    `mask` (`sample_mask`), are 0. `sample_refs` and the streamed shadows (sits_stream.py) use it."""
    return ((np.uint64(b) * GOLDEN) >> np.uint64(48) & mask) == 0


@njit(cache=True, inline="always")
def first_use_code(code, b, m):
    """Block `b`'s dense code (code: block -> code, -1 none yet; m codes so far), assigning the
    next one on its first use; returns (its code, m)."""
    d = code[b]
    if d < 0:
        d = m
        code[b] = m
        m += 1
    return d, m


@njit(cache=True)
def sample_refs(block, n_blocks, k, bounds):
    """The spatial sample: references to blocks whose hash (the top 16 bits of id * GOLDEN) falls in 1/2**k
    of the space, over windows `bounds` (reference offsets, ascending). No temporary the
    size of the trace. Returns (those references renumbered densely 0..m-1 in order of
    first use, m, cuts: sampled references before each bound)."""
    mask = sample_mask(k)
    lo = bounds[0]
    view = block[lo:bounds[bounds.shape[0] - 1]]  # loops over range(len) index without wraparound checks
    # One bit per reference, 64 to a word, in a branch-free pass the compiler vectorises; then
    # the set bits, lowest first (de Bruijn). Several times faster than a compacting loop.
    words = view.shape[0] >> 6
    bits = np.empty(words, dtype=np.uint64)
    c = 0
    for wd in range(words):
        word = np.uint64(0)
        base = wd << 6
        for t in range(64):
            taken = in_sample(view[base + t], mask)
            word |= np.uint64(taken) << np.uint64(t)
            c += taken
        bits[wd] = word
    for i in range(words << 6, view.shape[0]):
        c += in_sample(view[i], mask)
    index = np.empty(c, dtype=np.int64)
    j = 0
    for wd in range(words):
        word = bits[wd]
        while word != 0:
            low = word & (~word + np.uint64(1))
            index[j] = (wd << 6) + _DEBRUIJN[(low * np.uint64(_DEBRUIJN_MUL)) >> np.uint64(58)]
            j += 1
            word ^= low
    for i in range(words << 6, view.shape[0]):
        if in_sample(view[i], mask):
            index[j] = i
            j += 1
    cuts = np.searchsorted(index, bounds - lo)
    code = np.full(max(n_blocks, 1), -1, dtype=np.int32)
    dense = np.empty(c, dtype=np.int32)
    m = 0
    for j in range(c):
        dense[j], m = first_use_code(code, view[index[j]], m)
    return dense, m, cuts


@njit(cache=True)
def shadow_counts(block, n_blocks, capacity, k, bounds):
    """Replay the sampled slice through each behaviour pinned (exactly LRU and exactly ARC, at
    capacity/2^k) in one compiled call. Returns int64 (3, windows): sampled references, their
    RECENCY (LRU) hits and SCAN (ARC) hits per window."""
    dense, m, cuts = sample_refs(block, n_blocks, k, bounds)
    cap = max(1, capacity >> k)
    nw = bounds.shape[0] - 1
    out = np.zeros((3, nw), dtype=np.int64)
    for w in range(nw):
        out[0, w] = cuts[w + 1] - cuts[w]
    h = np.empty(dense.shape[0], dtype=np.uint8)
    for behaviour in range(2):  # RECENCY, SCAN
        prev, nxt, where, ends, sizes, state = new_state(m)
        if behaviour == RECENCY:
            replay_recency(dense, 0, dense.shape[0], prev, nxt, where, ends, sizes, state, cap, h)
        else:
            replay_scan(dense, 0, dense.shape[0], prev, nxt, where, ends, sizes, state, cap, h)
        for w in range(nw):
            total = np.int64(0)  # not 0: interpreted (common/jit.py), 0 + a uint8 hit is a uint8 (wraps at 256)
            for j in range(cuts[w], cuts[w + 1]):
                total += h[j]
            out[1 + behaviour, w] = total
    return out


def shadow_shift(capacity: int, target: int = 1024) -> int:
    """Sampling exponent k: shadows see 1/2^k of the blocks with capacity/2^k, at least ~target slots."""
    return max(0, int(math.floor(math.log2(max(capacity, 1) / target)))) if capacity > target else 0
