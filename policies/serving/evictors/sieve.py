"""SIEVE (Zhang et al., NSDI 2024) for the serving pool: a FIFO list and a hand that spares
visited blocks.

Blocks are cached at the head with their visited bit clear; a hit sets it. The hand walks from
where it stopped towards the head (from the tail when it has none, wrapping to the tail), clears
the visited bits it passes and evicts the first block that is neither visited nor pinned; it
walks past a pinned block without clearing its bit (the block is in use, its reuse still
counts). With nothing pinned, this is policies/classic/sieve.py.

State: one list (links, ends, size), a flag byte per block (pinned, visited) and the `hand`.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from sitsprof.common.jit import njit

from ...classic._structs import NIL
from ._lists import NOT_PINNED, PINNED, new_lists, push, remove
from ._lists import pin as pin  # the pool's pin: set the bit (_lists.py)

__all__ = ["NOT_VISITED", "VISITED", "SieveState", "admit", "hit", "miss", "new", "unpin", "victim"]

VISITED = 8
NOT_VISITED = 0xFF ^ VISITED

SieveState = namedtuple("SieveState", "prev nxt flag head tail size hand")


def new(n_ids: int, capacity: int) -> SieveState:
    prev, nxt, head, tail, size = new_lists(n_ids, 1)
    return SieveState(prev, nxt, np.zeros(len(prev), dtype=np.uint8), head, tail, size,
                      np.full(1, NIL, dtype=np.int32))


@njit(cache=True)
def hit(st, x):
    st.flag[x] |= VISITED
    return np.int32(NIL)


@njit(cache=True)
def miss(st, x):
    """Nothing: SIEVE keeps no ghosts."""


@njit(cache=True)
def admit(st, x):
    st.flag[x] |= PINNED
    push(st, 0, x)
    st.flag[x] &= NOT_VISITED


@njit(cache=True)
def unpin(st, x):
    st.flag[x] &= NOT_PINNED


@njit(cache=True)
def victim(st):
    flag, prev = st.flag, st.prev
    tail = st.tail[0]
    obj = st.hand[0] if st.hand[0] != NIL else tail
    while flag[obj] & (VISITED | PINNED):
        if not flag[obj] & PINNED:
            flag[obj] &= NOT_VISITED
        obj = prev[obj] if prev[obj] != NIL else tail
    st.hand[0] = prev[obj]
    remove(st, 0, obj)
    flag[obj] &= NOT_VISITED
    return obj
