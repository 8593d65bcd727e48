"""Numba building blocks shared by the policy kernels: intrusive doubly-linked lists.

Lists live in two flat int32 arrays indexed by dense block id, so a policy needs no objects
and no allocation per reference. Several lists may share one `prev`/`nxt` pair (a block is
in at most one of them at a time); list `q` is described by `head[q]` and `tail[q]`.

Orientation follows libCacheSim's queues: new entries go to the *head*, evictions usually
take the *tail*; `prev[x]` points towards the head, `nxt[x]` towards the tail; -1 ends a list.
"""
from __future__ import annotations

import numpy as np
from numba import njit

NIL = -1


@njit(cache=True)
def new_lists(n_blocks, n_lists):
    """`prev`, `nxt`, `head`, `tail`: `n_lists` empty lists over ids 0..n_blocks-1."""
    prev = np.full(max(n_blocks, 1), NIL, dtype=np.int32)
    nxt = np.full(max(n_blocks, 1), NIL, dtype=np.int32)
    head = np.full(max(n_lists, 1), NIL, dtype=np.int32)
    tail = np.full(max(n_lists, 1), NIL, dtype=np.int32)
    return prev, nxt, head, tail


@njit(cache=True)
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


@njit(cache=True)
def push_tail(prev, nxt, head, tail, q, x):
    """Insert unlinked `x` at the tail of list `q`."""
    t = tail[q]
    nxt[x] = NIL
    prev[x] = t
    if t == NIL:
        head[q] = x
    else:
        nxt[t] = x
    tail[q] = x


@njit(cache=True)
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


@njit(cache=True)
def pop_tail(prev, nxt, head, tail, q):
    """Remove and return the tail of list `q` (NIL when empty)."""
    x = tail[q]
    if x != NIL:
        unlink(prev, nxt, head, tail, q, x)
    return x


@njit(cache=True)
def pop_head(prev, nxt, head, tail, q):
    """Remove and return the head of list `q` (NIL when empty)."""
    x = head[q]
    if x != NIL:
        unlink(prev, nxt, head, tail, q, x)
    return x


@njit(cache=True)
def move_to_head(prev, nxt, head, tail, q, x):
    """Move member `x` of list `q` to its head."""
    if head[q] != x:
        unlink(prev, nxt, head, tail, q, x)
        push_head(prev, nxt, head, tail, q, x)
