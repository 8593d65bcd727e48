"""What every serving evictor shares: the pin bits, and lists that pass pinned blocks over.

A list is classic/_structs.py's (intrusive links `prev`/`nxt` over block ids, list `q`'s ends
`head[q]`/`tail[q]`, new blocks at the head, the oldest at the tail) plus a size per list,
`size[q]`, that counts its members, parked ones included. A block the pool pins (a running
request holds it) cannot be evicted; a victim walk from the tail that meets one PARKS it: takes
it off the list's links (still counted in `size[q]`, still the list's member for the policy's
rules) and sets its PARKED bit; unpinned, it goes back to the tail, where it was. So each
pinned block is passed over once per pin, not once per eviction: a victim costs amortised O(1)
however much of the pool is pinned.
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit

from ...classic._structs import NIL, push_head, unlink

__all__ = [
    "NOT_PARKED",
    "NOT_PINNED",
    "PARKED",
    "PINNED",
    "new_lists",
    "oldest_unpinned",
    "pin",
    "push",
    "remove",
    "unpark",
]

PINNED = 128  # the pool's reference count is above 0
PARKED = 64  # pinned, taken off its list by a victim walk; back at the list's tail when unpinned
NOT_PINNED, NOT_PARKED = 0xFF ^ PINNED, 0xFF ^ PARKED


def new_lists(n_ids: int, n_lists: int):
    """`prev`, `nxt` (int32 per block id), `head`, `tail` (int32 per list), `size` (int64 per list):
    `n_lists` empty lists."""
    n = max(int(n_ids), 1)
    return (np.full(n, NIL, dtype=np.int32), np.full(n, NIL, dtype=np.int32),
            np.full(n_lists, NIL, dtype=np.int32), np.full(n_lists, NIL, dtype=np.int32),
            np.zeros(n_lists, dtype=np.int64))


@njit(cache=True)
def pin(st, x):
    """The pool pinned x (a request holds it): the policies that pass pinned blocks over by
    their bit (all but LRU, whose free queue drops them) set it; `st` has a `flag` array."""
    st.flag[x] |= PINNED


@njit(cache=True, inline="always")
def push(st, q, x):
    """Unlinked x at the head of list q of state `st` (its fields prev, nxt, head, tail, size)."""
    push_head(st.prev, st.nxt, st.head, st.tail, q, x)
    st.size[q] += 1


@njit(cache=True, inline="always")
def remove(st, q, x):
    """x (linked in list q of state `st`) off it."""
    unlink(st.prev, st.nxt, st.head, st.tail, q, x)
    st.size[q] -= 1


@njit(cache=True, inline="always")
def oldest_unpinned(prev, nxt, flag, head, tail, q):
    """The oldest unpinned member of list q (NIL if none); the pinned blocks at its tail are
    parked on the way (unlinked, still counted in its size)."""
    x = tail[q]
    while x != NIL and flag[x] & PINNED:
        p = prev[x]
        tail[q] = p
        if p == NIL:
            head[q] = NIL
        else:
            nxt[p] = NIL
        prev[x] = NIL
        flag[x] |= PARKED
        x = p
    return x


@njit(cache=True, inline="always")
def unpark(prev, nxt, flag, head, tail, q, x):
    """A parked block, unpinned: back at list q's tail (the oldest end), where it was."""
    t = tail[q]
    nxt[x] = NIL
    prev[x] = t
    if t == NIL:
        head[q] = x
    else:
        nxt[t] = x
    tail[q] = x
    flag[x] &= NOT_PARKED
