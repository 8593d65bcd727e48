"""Numba building blocks shared by the policy kernels: intrusive doubly-linked lists.

Lists live in two flat int32 arrays indexed by dense block id, so a policy needs no objects
and no allocation per reference. Several lists may share one `prev`/`nxt` pair (a block is
in at most one of them at a time).

Orientation follows libCacheSim's queues: new entries go to the *head*, evictions usually
take the *tail*; `prev[x]` points towards the head, `nxt[x]` towards the tail; -1 ends a list.

Two flavours of the same operations (all inlined into the caller by numba):

- scalar ends, `*_s`: the list's `head` and `tail` are the kernel's local variables, passed
  in and returned, e.g. `head, tail = push_head_s(prev, nxt, head, tail, x)`. Use these on
  hot paths: the ends stay in registers. An LRU kernel runs several times faster this way.
- array ends: list `q` is `head[q]`, `tail[q]` (arrays from `new_lists`), for a kernel that
  keeps many lists, e.g. one per frequency.

These helpers are inlined, and numba's on-disk cache of a kernel only watches the kernel's
own file: every module here that uses them names this file in `NUMBA_CACHE_DEPENDS`, which
puts it in its kernels' cache key (common/numba_locator.py), so an edit here compiles them afresh.
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit

__all__ = [
    "NIL",
    "grow",
    "insert_after_s",
    "move_to_head",
    "move_to_head_s",
    "new_lists",
    "pop_tail",
    "push_head",
    "push_head_s",
    "push_tail_s",
    "unlink",
    "unlink_s",
]

NIL = -1


@njit(cache=True)
def new_lists(n_blocks, n_lists):
    """`prev`, `nxt`, `head`, `tail`: `n_lists` empty lists over ids 0..n_blocks-1."""
    prev = np.full(max(n_blocks, 1), NIL, dtype=np.int32)
    nxt = np.full(max(n_blocks, 1), NIL, dtype=np.int32)
    head = np.full(max(n_lists, 1), NIL, dtype=np.int32)
    tail = np.full(max(n_lists, 1), NIL, dtype=np.int32)
    return prev, nxt, head, tail


# ----------------------------------------------------------------- scalar ends (hot paths)


@njit(cache=True, inline="always")
def push_head_s(prev, nxt, head, tail, x):
    """Insert unlinked `x` at the head; returns the new (head, tail)."""
    prev[x] = NIL
    nxt[x] = head
    if head == NIL:
        tail = x
    else:
        prev[head] = x
    return x, tail


@njit(cache=True, inline="always")
def push_tail_s(prev, nxt, head, tail, x):
    """Insert unlinked `x` at the tail; returns the new (head, tail)."""
    nxt[x] = NIL
    prev[x] = tail
    if tail == NIL:
        head = x
    else:
        nxt[tail] = x
    return head, x


@njit(cache=True, inline="always")
def insert_after_s(prev, nxt, head, tail, at, x):
    """Insert unlinked `x` right after member `at` (towards the tail); returns (head, tail)."""
    after = nxt[at]
    prev[x] = at
    nxt[x] = after
    nxt[at] = x
    if after == NIL:
        tail = x
    else:
        prev[after] = x
    return head, tail


@njit(cache=True, inline="always")
def unlink_s(prev, nxt, head, tail, x):
    """Remove member `x`; returns the new (head, tail)."""
    p = prev[x]
    n = nxt[x]
    if p == NIL:
        head = n
    else:
        nxt[p] = n
    if n == NIL:
        tail = p
    else:
        prev[n] = p
    prev[x] = NIL
    nxt[x] = NIL
    return head, tail


@njit(cache=True, inline="always")
def move_to_head_s(prev, nxt, head, tail, x):
    """Move member `x` to the head; returns the new (head, tail)."""
    # written out rather than unlink + push: numba's nested inlining costs several times
    # the speed of the LRU kernel
    if head == x:
        return head, tail
    p = prev[x]  # not NIL: x is not the head
    n = nxt[x]
    nxt[p] = n
    if n == NIL:
        tail = p
    else:
        prev[n] = p
    prev[x] = NIL
    nxt[x] = head
    prev[head] = x
    return x, tail


# ----------------------------------------------------------------- array ends (many lists)
# Written out, not as calls of the scalar versions: numba's nested inlining leaves code
# several times slower than one level.


@njit(cache=True, inline="always")
def push_head(prev, nxt, head, tail, q, x):
    """Insert unlinked `x` at the head of list `q`."""
    h = head[q]
    prev[x] = NIL
    nxt[x] = h
    if h == NIL:
        tail[q] = x
    else:
        prev[h] = x
    head[q] = x



@njit(cache=True, inline="always")
def unlink(prev, nxt, head, tail, q, x):
    """Remove `x` (a member of list `q`) from it."""
    p = prev[x]
    n = nxt[x]
    if p == NIL:
        head[q] = n
    else:
        nxt[p] = n
    if n == NIL:
        tail[q] = p
    else:
        prev[n] = p
    prev[x] = NIL
    nxt[x] = NIL


@njit(cache=True, inline="always")
def pop_tail(prev, nxt, head, tail, q):
    """Remove and return the tail of list `q` (NIL when empty)."""
    x = tail[q]
    if x != NIL:
        p = prev[x]
        tail[q] = p
        if p == NIL:
            head[q] = NIL
        else:
            nxt[p] = NIL
        prev[x] = NIL
    return x



@njit(cache=True, inline="always")
def move_to_head(prev, nxt, head, tail, q, x):
    """Move member `x` of list `q` to its head."""
    h = head[q]
    if h == x:
        return
    p = prev[x]  # not NIL: x is not the head
    n = nxt[x]
    nxt[p] = n
    if n == NIL:
        tail[q] = p
    else:
        prev[n] = p
    prev[x] = NIL
    nxt[x] = h
    prev[h] = x
    head[q] = x


# ----------------------------------------------------------------- growable state (streaming)


def grow(arr, n, fill):
    """`arr` with at least `n` rows along axis 0, the new rows set to `fill` (a scalar, or one
    value per column of a 2-D array); `arr` itself when it is long enough. Plain Python: the
    streaming replay (engine/stream.py) grows a policy's state between chunks, geometrically,
    as new block ids appear."""
    if arr.shape[0] >= n:
        return arr
    out = np.empty((n,) + arr.shape[1:], dtype=arr.dtype)
    out[: arr.shape[0]] = arr
    out[arr.shape[0]:] = fill
    return out
