"""Incremental forms of the replacement policies, for a pool whose blocks come and go.

The pool (pool.py, radix.py) tells the evictor what happens to a cached block, in the manner
of libCacheSim's get/find/insert/evict/remove:

- `ev_hit(pid, S, x) -> evicted`: a cached block is found again (libCacheSim's find with
  update); returns a block the hit evicted (LIRS only: a Q-only hit can push out Q's bottom),
  else NIL;
- `ev_miss(pid, S, x)`: a block about to be cached was looked up and not found (ghost
  lists learn of it here, before any victim is chosen for it, as in the kernels);
- `ev_admit(pid, S, x)`: it becomes cached (its KV is written into a slot), pinned;
- `ev_pin(pid, S, x)` / `ev_unpin(pid, S, x)`: its reference count leaves / reaches 0;
- `ev_victim(pid, S) -> x`: choose an unpinned cached block, forget it (keeping a ghost where
  the policy keeps ghosts) and return it; the pool guarantees one exists.

`pid` is the policy id (POLICY_IDS, in names.SERVING_POLICIES order); `S` the `Evictor` from
`new_state`. Each policy is one module here with the same six operations on its own named
state (a namedtuple of arrays, its scalars a one-row record `v[0]` with named fields); these
functions only dispatch on `pid`. The module docstrings say each policy's rules and how it
passes over a pinned block; `_lists.py` the parking that makes that amortised O(1). With
nothing ever pinned (the pool's all-evictable mode), hit / miss-admit-victim per reference
is exactly the whole-trace kernel of `policies/classic/<name>.py` (tests/test_serving.py
checks it hit for hit; tests/test_serving_evictors_pinned.py pins each policy's replay).

Why one `Evictor` holding every policy's state (all but the served one one-block
placeholders) rather than the served policy's state alone: numba compiles a function once
per argument type, and `replay` takes the state, so a state type per policy would compile
the whole replay once per policy (about 40 s of CPU each, bench/bench_replay_compile.py);
with one type it compiles once and dispatches on `pid`.

The replay (scheduler.py) compiles these into its own numba cache, keyed by the files it
names in NUMBA_CACHE_DEPENDS (this package's modules among them); so is `ev_victim`'s, by
this package's NUMBA_CACHE_DEPENDS.
"""
from __future__ import annotations

from collections import namedtuple

from sitsprof.common.jit import njit

from . import arc as _arc
from . import fifo as _fifo
from . import lfu as _lfu
from . import lirs as _lirs
from . import lru as _lru
from . import s3fifo as _s3fifo
from . import sieve as _sieve
from . import sits as _sits
from .sits import RECENCY, SCAN

__all__ = ["ARC", "FIFO", "LFU", "LIRS", "LRU", "POLICY_IDS", "RECENCY", "S3FIFO", "SCAN", "SIEVE", "SITS",
           "Evictor", "ev_admit", "ev_hit", "ev_miss", "ev_pin", "ev_unpin", "ev_victim", "new_state"]

#: The files numba compiles into this package's kernels besides this one (their cache key,
#: common/numba_locator.py): an edit to any policy's module compiles the dispatcher afresh.
NUMBA_CACHE_DEPENDS = ("_lists.py", "lru.py", "fifo.py", "sieve.py", "s3fifo.py", "arc.py", "lirs.py", "lfu.py",
                       "sits.py", "../../classic/_structs.py", "../../classic/twoq.py", "../../classic/arc.py",
                       "../../classic/lirs.py")

LRU, FIFO, SIEVE, S3FIFO, ARC, LIRS, LFU, SITS = range(8)
POLICY_IDS = {"lru": LRU, "fifo": FIFO, "sieve": SIEVE, "s3fifo": S3FIFO, "arc": ARC, "lirs": LIRS, "lfu": LFU,
              "sits": SITS}

#: The evictor state: one field per policy's state (SITS serves ARC's, in `arc`).
Evictor = namedtuple("Evictor", "lru fifo sieve s3fifo arc lirs lfu")


def new_state(pid: int, n_ids: int, capacity: int, small_ratio: float = 0.1, ghost_ratio: float = 0.9,
              move_to_main_threshold: int = 2, hir_ratio: float = 0.01) -> Evictor:
    """The evictor state for `n_ids` block ids and a pool of `capacity` blocks, sized for policy
    `pid` (the other policies' parts hold one block)."""

    def size(*pids):
        return (n_ids, capacity) if pid in pids else (1, 1)

    return Evictor(_lru.new(*size(LRU)), _fifo.new(*size(FIFO)), _sieve.new(*size(SIEVE)),
                   _s3fifo.new(*size(S3FIFO), small_ratio, ghost_ratio, move_to_main_threshold),
                   _arc.new(*size(ARC, SITS)), _lirs.new(*size(LIRS), hir_ratio), _lfu.new(*size(LFU)))


@njit(cache=True, inline="always")
def ev_hit(pid, S, x):
    if pid == LRU:
        return _lru.hit(S.lru, x)
    if pid == FIFO:
        return _fifo.hit(S.fifo, x)
    if pid == SIEVE:
        return _sieve.hit(S.sieve, x)
    if pid == S3FIFO:
        return _s3fifo.hit(S.s3fifo, x)
    if pid == ARC:
        return _arc.hit(S.arc, x)
    if pid == LIRS:
        return _lirs.hit(S.lirs, x)
    if pid == LFU:
        return _lfu.hit(S.lfu, x)
    return _sits.hit(S.arc, x)


@njit(cache=True, inline="always")
def ev_miss(pid, S, x):
    if pid == LRU:
        _lru.miss(S.lru, x)
    elif pid == FIFO:
        _fifo.miss(S.fifo, x)
    elif pid == SIEVE:
        _sieve.miss(S.sieve, x)
    elif pid == S3FIFO:
        _s3fifo.miss(S.s3fifo, x)
    elif pid == ARC:
        _arc.miss(S.arc, x)
    elif pid == LIRS:
        _lirs.miss(S.lirs, x)
    elif pid == LFU:
        _lfu.miss(S.lfu, x)
    else:
        _sits.miss(S.arc, x)


@njit(cache=True, inline="always")
def ev_admit(pid, S, x):
    """`x` becomes cached, pinned (the pool's ref count is 1)."""
    if pid == LRU:
        _lru.admit(S.lru, x)
    elif pid == FIFO:
        _fifo.admit(S.fifo, x)
    elif pid == SIEVE:
        _sieve.admit(S.sieve, x)
    elif pid == S3FIFO:
        _s3fifo.admit(S.s3fifo, x)
    elif pid == ARC:
        _arc.admit(S.arc, x)
    elif pid == LIRS:
        _lirs.admit(S.lirs, x)
    elif pid == LFU:
        _lfu.admit(S.lfu, x)
    else:
        _sits.admit(S.arc, x)


@njit(cache=True, inline="always")
def ev_pin(pid, S, x):
    if pid == LRU:
        _lru.pin(S.lru, x)
    elif pid == FIFO:
        _fifo.pin(S.fifo, x)
    elif pid == SIEVE:
        _sieve.pin(S.sieve, x)
    elif pid == S3FIFO:
        _s3fifo.pin(S.s3fifo, x)
    elif pid == ARC:
        _arc.pin(S.arc, x)
    elif pid == LIRS:
        _lirs.pin(S.lirs, x)
    elif pid == LFU:
        _lfu.pin(S.lfu, x)
    else:
        _sits.pin(S.arc, x)


@njit(cache=True, inline="always")
def ev_unpin(pid, S, x):
    if pid == LRU:
        _lru.unpin(S.lru, x)
    elif pid == FIFO:
        _fifo.unpin(S.fifo, x)
    elif pid == SIEVE:
        _sieve.unpin(S.sieve, x)
    elif pid == S3FIFO:
        _s3fifo.unpin(S.s3fifo, x)
    elif pid == ARC:
        _arc.unpin(S.arc, x)
    elif pid == LIRS:
        _lirs.unpin(S.lirs, x)
    elif pid == LFU:
        _lfu.unpin(S.lfu, x)
    else:
        _sits.unpin(S.arc, x)


@njit(cache=True, inline="always")
def ev_victim(pid, S):
    """Inlined, and each policy's own victim a call (LRU's inlined) taking its part of `S`
    alone: a call taking the whole `Evictor` passes every policy's arrays, flattened (about
    50), and made the LRU replay twice as slow."""
    if pid == LRU:
        return _lru.victim(S.lru)
    if pid == FIFO:
        return _fifo.victim(S.fifo)
    if pid == SIEVE:
        return _sieve.victim(S.sieve)
    if pid == S3FIFO:
        return _s3fifo.victim(S.s3fifo)
    if pid == ARC:
        return _arc.victim(S.arc)
    if pid == LIRS:
        return _lirs.victim(S.lirs)
    if pid == LFU:
        return _lfu.victim(S.lfu)
    return _sits.victim(S.arc)
