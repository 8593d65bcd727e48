"""vLLM v1 block-pool rules (KVCacheManager / BlockPool), at block granularity, in numba.

`capacity` slots. A slot holds either a cached block (its id registered in the cached-id map,
with a reference count) or a private block of a running request that is not (yet) cached.
- Lookup (`lookup`): a request reuses only the longest cached prefix of its full blocks,
  stopping at the first miss, capped at (known tokens - 1) tokens, i.e. at most
  floor((tokens - 1) / block_tokens) blocks.
- Hit blocks are pinned (`touch`: ref++; removed from the evictor when their ref was 0).
- New blocks (`allocate`) come from free never-used slots first (and slots of private blocks
  released uncached), then from the evictor's victim, whose cached id is dropped.
- A full block's id is registered (`register`) when the block becomes full, at scheduling
  time as vLLM does (prompt blocks as prefill covers them, decode blocks when full). A block
  whose id another request has registered meanwhile stays a private copy (vLLM would keep
  both copies cached; here one id has one cached copy).
- On finish or preemption (`release`), ref-- for every block, tail first, and blocks whose
  ref reaches 0 become evictable in that order (vLLM's reverse free order).

Pool arrays: `ref` int32[n_ids], `cached` uint8[n_ids], `kind` uint8[request blocks] (0 not
held, 1 the cached copy, 2 a private slot), `pc` int64 counters (below), `ev_log` int32 (the
eviction sequence, written while `pc[LOG_ON]`).

`mode` 1 (all-evictable) is the no-pinning check: handled in scheduler.py.
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit

from .evictors import ev_admit, ev_hit, ev_miss, ev_pin, ev_unpin, ev_victim

__all__ = [
    "ALLOCATED",
    "CAPACITY",
    "EVICTIONS",
    "HIT_BLOCKS",
    "LOG_N",
    "LOG_ON",
    "LOOKUP_BLOCKS",
    "N_CACHED",
    "N_EVICTABLE",
    "N_PC",
    "N_PRIVATE",
    "PEAK_PINNED",
    "allocate",
    "available",
    "drop",
    "evictable_among",
    "lookup",
    "new_pool",
    "note_pinned",
    "register",
    "release",
    "take_slot",
    "touch",
]

N_CACHED, N_PRIVATE, N_EVICTABLE, EVICTIONS, LOG_N, PEAK_PINNED, CAPACITY, LOG_ON = range(8)
HIT_BLOCKS, LOOKUP_BLOCKS, ALLOCATED = 8, 9, 10
N_PC = 16


def new_pool(n_ids: int, n_request_blocks: int, capacity: int, log_capacity: int = 0):
    ref = np.zeros(max(n_ids, 1), dtype=np.int32)
    cached = np.zeros(max(n_ids, 1), dtype=np.uint8)
    kind = np.zeros(max(n_request_blocks, 1), dtype=np.uint8)
    pc = np.zeros(N_PC, dtype=np.int64)
    pc[CAPACITY] = capacity
    pc[LOG_ON] = 1 if log_capacity > 0 else 0
    ev_log = np.zeros(max(log_capacity, 1), dtype=np.int32)
    return ref, cached, kind, pc, ev_log


@njit(cache=True, inline="always")
def available(pc):
    """Blocks an allocation can have now: free slots plus evictable cached blocks."""
    return pc[CAPACITY] - pc[N_CACHED] - pc[N_PRIVATE] + pc[N_EVICTABLE]


@njit(cache=True, inline="always")
def note_pinned(pc):
    pinned = pc[N_CACHED] - pc[N_EVICTABLE] + pc[N_PRIVATE]
    if pinned > pc[PEAK_PINNED]:
        pc[PEAK_PINNED] = pinned


@njit(cache=True, inline="always")
def lookup(ids, b0, max_blocks, cached):
    """Length of the longest cached prefix of ids[b0:b0+max_blocks]."""
    k = 0
    while k < max_blocks and cached[ids[b0 + k]]:
        k += 1
    return k


@njit(cache=True, inline="always")
def evictable_among(ids, b0, k, ref):
    """How many of the first k (cached) blocks have ref 0 (touching them uses up free room)."""
    e = 0
    for i in range(k):
        if ref[ids[b0 + i]] == 0:
            e += 1
    return e


@njit(cache=True, inline="always")
def touch(pid, S, ids, b0, k, ref, cached, kind, pc, ev_log):
    """Pin the k hit blocks ids[b0:b0+k] of a request, then tell the evictor of each hit (all
    pinned first, so a hit that evicts (LIRS) never takes one of them)."""
    for i in range(k):
        x = ids[b0 + i]
        if ref[x] == 0:
            ev_pin(pid, S, x)
            pc[N_EVICTABLE] -= 1
        ref[x] += 1
        kind[b0 + i] = 1
    for i in range(k):
        v = ev_hit(pid, S, ids[b0 + i])
        if v >= 0:
            drop(cached, pc, ev_log, v)


@njit(cache=True, inline="always")
def drop(cached, pc, ev_log, v):
    """Cached block v (unpinned) leaves the cache."""
    cached[v] = 0
    pc[N_CACHED] -= 1
    pc[N_EVICTABLE] -= 1
    pc[EVICTIONS] += 1
    if pc[LOG_ON]:
        n = pc[LOG_N]
        if n < ev_log.shape[0]:
            ev_log[n] = v
        pc[LOG_N] = n + 1


@njit(cache=True, inline="always")
def take_slot(pid, S, cached, pc, ev_log):
    """One slot for a new block: a free one, else the evictor's victim (its id dropped)."""
    if pc[CAPACITY] - pc[N_CACHED] - pc[N_PRIVATE] <= 0:
        drop(cached, pc, ev_log, ev_victim(pid, S))
    pc[N_PRIVATE] += 1
    pc[ALLOCATED] += 1


@njit(cache=True, inline="always")
def allocate(pid, S, ids, b0, lo, hi, cached, kind, pc, ev_log):
    """Slots for blocks lo..hi-1 of a request (the caller checked `available`)."""
    for i in range(lo, hi):
        x = ids[b0 + i]
        if not cached[x]:
            ev_miss(pid, S, x)
        take_slot(pid, S, cached, pc, ev_log)
        kind[b0 + i] = 2


@njit(cache=True, inline="always")
def register(pid, S, ids, b0, lo, hi, ref, cached, kind, pc):
    """Blocks lo..hi-1 of a request are full: cache their ids (private copies of an id that is
    already cached stay private)."""
    for i in range(lo, hi):
        x = ids[b0 + i]
        if kind[b0 + i] == 2 and not cached[x]:
            cached[x] = 1
            ref[x] = 1
            kind[b0 + i] = 1
            pc[N_CACHED] += 1
            pc[N_PRIVATE] -= 1
            ev_admit(pid, S, x)


@njit(cache=True, inline="always")
def release(pid, S, ids, b0, held, ref, kind, pc):
    """Free a request's `held` blocks, tail first."""
    for i in range(held - 1, -1, -1):
        k = kind[b0 + i]
        if k == 1:
            x = ids[b0 + i]
            ref[x] -= 1
            if ref[x] == 0:
                ev_unpin(pid, S, x)
                pc[N_EVICTABLE] += 1
        elif k == 2:
            pc[N_PRIVATE] -= 1
        kind[b0 + i] = 0
