"""2Q (Johnson & Shasha, VLDB 1994) with libCacheSim's `TwoQ` semantics (TwoQ.c).

A1in is a FIFO of first-time blocks (25% of the capacity), A1out a FIFO of ids evicted from
A1in (50% of the capacity, ids only) and Am an LRU of blocks re-referenced after leaving
A1in. A hit in A1in changes nothing; a hit in Am moves the block to Am's head. A miss whose
id is in A1out goes to Am (which keeps itself within capacity - |A1in share| by dropping its
tail); any other miss goes to A1in. To make room: when A1in holds more than its share, its
oldest block leaves for A1out, otherwise Am's least recently used block is evicted.
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit
from sitsprof.common.prefetch import AHEAD, prefetch

from ._structs import NIL, grow, move_to_head_s, push_head_s, unlink_s

__all__ = [
    "DESCRIPTION",
    "GHOST",
    "IN_A",
    "IN_B",
    "KERNEL",
    "NAME",
    "NUMBA_CACHE_DEPENDS",
    "PARAM_RANGES",
    "ghost_add",
    "ghost_take",
    "grow_ring",
    "grow_state",
    "max_resident",
    "new_ghost",
    "new_ring",
    "new_rows",
    "new_state",
    "new_stream_state",
    "replay_window",
    "ring_pop",
    "ring_push",
    "stream_window",
]

#: inlined into this module's kernels: part of their cache key (common/numba_locator.py)
NUMBA_CACHE_DEPENDS = ("_structs.py",)

NAME = "2q"
DESCRIPTION = "2Q: first-time blocks in a FIFO (A1in), re-referenced ones in an LRU (Am), ghost A1out"
# Valid values of the KERNEL's parameters (engine/params.py reads them; refused with the reason).
PARAM_RANGES = {
    "ain_ratio": ("(0, 1)", "A1in's share of the capacity; Am gets the rest, so each needs some"),
    "aout_ratio": ("[0, 10]", "ids A1out remembers, as a multiple of the capacity; its ring is allocated up front, "
                              "and past 10x it only costs memory"),
}

# Per-block state bits, shared with S3-FIFO: which queue holds the block, and whether its id
# is in the ghost queue.
IN_A, IN_B, GHOST = 1, 2, 4
# Columns of the per-block row (one row per block keeps what the kernel touches about a
# block in one cache line): Am links, state bits, position in the A1out ring.
_PREV, _NXT, _STATE, _GPOS = 0, 1, 2, 3


@njit(cache=True)
def new_rows(n_blocks, n_cols, n_links):
    """(n_blocks, n_cols) int32 rows: the first `n_links` columns are links (NIL), the rest 0."""
    rows = np.zeros((max(n_blocks, 1), n_cols), dtype=np.int32)
    rows[:, :n_links] = NIL
    return rows


@njit(cache=True)
def new_ring(capacity, n_blocks):
    """Slots for a FIFO that never holds more than min(capacity, n_blocks) blocks."""
    return np.empty(max(min(capacity, n_blocks), 0) + 1, dtype=np.int32)


@njit(cache=True, inline="always")
def ring_push(ring, head, x):
    """Append `x` at the ring's head; returns the new head position."""
    ring[head] = x
    head += 1
    return 0 if head == ring.shape[0] else head


@njit(cache=True, inline="always")
def ring_pop(ring, tail):
    """Take the oldest entry; returns (it, the new tail position)."""
    x = ring[tail]
    tail += 1
    return x, (0 if tail == ring.shape[0] else tail)


# A ghost queue of ids (libCacheSim's FIFO of evicted ids) as a ring with tombstones: taking
# an id out only clears its GHOST bit; the ring entry at index k for id x is live while x has
# the bit and gpos[x] == k. Dead entries are skipped when the oldest ids are dropped, and
# squeezed out when the ring fills up (it has room for twice the limit, so at least half of
# a full ring is dead and squeezing is amortised O(1)). All accesses to the ring itself are
# sequential; only state/gpos of the ids involved are touched at random.


@njit(cache=True)
def new_ghost(limit):
    """The ring for a ghost queue of at most `limit` ids."""
    return np.empty(2 * max(limit, 0) + 2, dtype=np.int32)


@njit(cache=True, inline="always")
def ghost_take(state, x):
    """Remove id `x` from the ghost queue if it is there; True when it was."""
    if state[x] & GHOST:
        state[x] ^= GHOST  # the bit is set: clears it, in int8 (the kernels') and uint8 (serving) alike
        return True
    return False


@njit(cache=True, inline="always")
def _reverse(ring, lo, hi):
    """Reverse ring[lo:hi] in place."""
    hi -= 1
    while lo < hi:
        ring[lo], ring[hi] = ring[hi], ring[lo]
        lo += 1
        hi -= 1


@njit(cache=True, inline="always")
def _ghost_squeeze(ring, gpos, state, tail, used):
    """Rewrite the live entries, oldest first, from index 0; returns (head, tail, used).

    In place, allocating nothing (the serving replay's kernel is compiled without numba's
    runtime, so no array may be made inside it): the ring is rotated so its oldest entry is at
    0 (three reversals), the live entries are moved forward in one pass (a write never passes
    the read), and only then are their positions rewritten, so a stale duplicate of an id is
    still judged by the id's old position."""
    size = ring.shape[0]
    if tail:
        _reverse(ring, 0, tail)
        _reverse(ring, tail, size)
        _reverse(ring, 0, size)
    n = 0
    for i in range(used):
        x = ring[i]
        k = tail + i if tail + i < size else tail + i - size  # where x stood before the rotation
        if state[x] & GHOST and gpos[x] == k:
            ring[n] = x
            n += 1
    for j in range(n):
        gpos[ring[j]] = j
    return n, 0, n


@njit(cache=True, inline="always")
def ghost_add(ring, gpos, state, ghost, limit, x):
    """libCacheSim's FIFO `get` on the ghost queue: add `x` unless present, dropping the oldest
    ids to stay within `limit` (nothing when `limit` < 1). `ghost` = (live ids, head, tail,
    entries in the ring); returns its new value."""
    n_ghost, head, tail, used = ghost
    if limit < 1 or state[x] & GHOST:
        return ghost
    size = ring.shape[0]
    while n_ghost + 1 > limit:
        y = ring[tail]
        if state[y] & GHOST and gpos[y] == tail:
            state[y] ^= GHOST  # set: cleared (int8 and uint8 alike, ghost_take)
            n_ghost -= 1
        tail = tail + 1 if tail + 1 < size else 0
        used -= 1
    if used == size:
        head, tail, used = _ghost_squeeze(ring, gpos, state, tail, used)
    ring[head] = x
    gpos[x] = head
    state[x] |= GHOST
    head = head + 1 if head + 1 < size else 0
    return n_ghost + 1, head, tail, used + 1


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit, ain_ratio=0.25, aout_ratio=0.5):
    rows = new_rows(n_blocks, np.int64(4), np.int64(2))  # per block: Am links, state bits, position in the A1out ring
    ain = new_ring(capacity, n_blocks)  # A1in only ever loses its oldest block: a ring
    aout = new_ghost(np.int64(capacity * aout_ratio))
    sc = np.zeros(11, dtype=np.int64)
    sc[_HM] = sc[_TM] = NIL
    evictions = replay_window(block, 0, block.shape[0], rows, ain, aout, sc, capacity, hit, ain_ratio, aout_ratio)
    return evictions, sc[_MAXRES]


# ----------------------------------------------------------------- resumable form (streaming)
# The loop over references lo..hi-1 with its state kept between calls: KERNEL is one window
# over the whole trace, engine/stream.py calls it chunk by chunk.
# A1in's ring has min(capacity, blocks so far) + 1 slots; until it reaches capacity + 1 nothing
# has left it (it holds ring[0:n_in], head n_in, tail 0), so growing it keeps its contents.
# Scalars: A1in head and tail, Am ends, A1out (4), n_in, n_am, max_resident.
_HI, _TI, _HM, _TM, _OUT, _NIN, _NAM, _MAXRES = 0, 1, 2, 3, 4, 8, 9, 10


def grow_ring(ring, n_blocks, capacity):
    """A ring from `new_ring` for more blocks (one that has never lost an entry)."""
    return grow(ring, max(min(int(capacity), int(n_blocks)), 0) + 1, 0)


def new_state(n_blocks, capacity, ain_ratio=0.25, aout_ratio=0.5):
    """rows (Am links, state, A1out position: one row per block), A1in ring, A1out ring, scalars."""
    n = max(int(n_blocks), 1)
    sc = np.zeros(11, dtype=np.int64)
    sc[_HM] = sc[_TM] = NIL
    return (new_rows(n, 4, 2), new_ring(int(capacity), n), new_ghost(int(np.int64(capacity * aout_ratio))), sc)


def grow_state(state, n_blocks, capacity, ain_ratio=0.25, aout_ratio=0.5):
    rows, ain, aout, sc = state
    return grow(rows, n_blocks, (NIL, NIL, 0, 0)), grow_ring(ain, n_blocks, capacity), aout, sc


def max_resident(state):
    return int(state[3][_MAXRES])


@njit(cache=True, inline="always")
def replay_window(block, lo, hi, rows, ain, aout, sc, capacity, hit, ain_ratio=0.25, aout_ratio=0.5):
    """Serve references lo..hi-1; returns the evictions."""
    prev, nxt, state, gpos = rows[:, _PREV], rows[:, _NXT], rows[:, _STATE], rows[:, _GPOS]
    # state bits: IN_A in A1in, IN_B in Am, GHOST id in A1out
    hi_, ti = sc[_HI], sc[_TI]
    hm, tm = np.int32(sc[_HM]), np.int32(sc[_TM])
    ain_size = np.int64(capacity * ain_ratio)
    aout_size = np.int64(capacity * aout_ratio)
    am_size = capacity - ain_size
    out = (sc[_OUT], sc[_OUT + 1], sc[_OUT + 2], sc[_OUT + 3])
    n_in, n_am, max_resident = sc[_NIN], sc[_NAM], sc[_MAXRES]
    evictions = 0
    for i in range(lo, hi):
        if i + AHEAD < hi:  # the block served AHEAD references from now: its row on the way
            prefetch(state, block[i + AHEAD])
        b = block[i]
        if state[b] & IN_A:
            hit[i] = 1
            continue
        hit_on_ghost = ghost_take(state, b)
        if hit_on_ghost:
            out = (out[0] - 1, out[1], out[2], out[3])
        if state[b] & IN_B:
            hit[i] = 1
            hm, tm = move_to_head_s(prev, nxt, hm, tm, b)
            continue
        hit[i] = 0
        if ain_size < 1:
            continue  # libCacheSim admits only blocks that fit A1in
        while n_in + n_am + 1 > capacity:
            evictions += 1
            if n_in > ain_size:
                x, ti = ring_pop(ain, ti)
                state[x] &= ~IN_A
                n_in -= 1
                out = ghost_add(aout, gpos, state, out, aout_size, x)
            else:
                x = tm
                hm, tm = unlink_s(prev, nxt, hm, tm, x)
                state[x] &= ~IN_B
                n_am -= 1
        if hit_on_ghost:
            if am_size < 1:
                continue
            # Am is a cache of its own here: it makes room within its share first.
            while n_am + 1 > am_size:
                x = tm
                hm, tm = unlink_s(prev, nxt, hm, tm, x)
                state[x] &= ~IN_B
                n_am -= 1
                evictions += 1
            hm, tm = push_head_s(prev, nxt, hm, tm, b)
            state[b] |= IN_B
            n_am += 1
        else:
            hi_ = ring_push(ain, hi_, b)
            state[b] |= IN_A
            n_in += 1
        if n_in + n_am > max_resident:
            max_resident = n_in + n_am
    sc[_HI], sc[_TI], sc[_HM], sc[_TM] = hi_, ti, hm, tm
    sc[_OUT], sc[_OUT + 1], sc[_OUT + 2], sc[_OUT + 3] = out
    sc[_NIN], sc[_NAM], sc[_MAXRES] = n_in, n_am, max_resident
    return evictions


def stream_window(state, block, lo, hi, capacity, hit, ain_ratio=0.25, aout_ratio=0.5):
    return replay_window(block, np.int64(lo), np.int64(hi), *state, np.int64(capacity), hit,
                         float(ain_ratio), float(aout_ratio))


new_stream_state = new_state
