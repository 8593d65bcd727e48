"""LRU for the serving pool: vLLM v1's free block queue (`FreeKVCacheBlockQueue`).

The evictable blocks are one list, most recently freed at the head; pinned blocks are not in
it. A pin takes the block off the list, an unpin puts it at the head in the order the pool
frees a request's blocks (tail first, vLLM's reverse free order), and the victim is the tail:
every operation O(1), no pinned block ever passed over. A hit needs nothing more (the block
was pinned first) and a block is admitted pinned, so neither touches the list. With nothing
pinned for longer than a reference, this is policies/classic/lru.py hit for hit.

State: one list (`_lists.py`): links `prev`/`nxt`, its ends `head[0]`/`tail[0]`, its size.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from sitsprof.common.jit import njit

from ...classic._structs import NIL
from ._lists import new_lists, push, remove

__all__ = ["LruState", "admit", "hit", "miss", "new", "pin", "unpin", "victim"]

LruState = namedtuple("LruState", "prev nxt head tail size")


def new(n_ids: int, capacity: int) -> LruState:
    """The state for block ids 0..n_ids-1 (the capacity is the pool's business)."""
    return LruState(*new_lists(n_ids, 1))


@njit(cache=True, inline="always")
def hit(st, x):
    """Nothing: the pool pinned x first, which took it off the list. Evicts nothing (NIL)."""
    return np.int32(NIL)


@njit(cache=True, inline="always")
def miss(st, x):
    """Nothing: LRU keeps no ghosts."""


@njit(cache=True, inline="always")
def admit(st, x):
    """Nothing: x is cached pinned, off the list until it is freed."""


@njit(cache=True, inline="always")
def pin(st, x):
    remove(st, 0, x)


@njit(cache=True, inline="always")
def unpin(st, x):
    push(st, 0, x)


@njit(cache=True, inline="always")
def victim(st):
    x = st.tail[0]
    remove(st, 0, x)
    return x
