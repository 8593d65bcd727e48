"""FIFO for the serving pool: blocks leave in the order they were cached, pinned ones passed over.

One list in insertion order (newest at the head). The victim is the oldest unpinned block: the
pinned blocks the walk from the tail meets are parked (`_lists.py`: off the links, still
members) and go back to the oldest end when unpinned, so each is passed once per pin. A hit
changes nothing (FIFO ignores reuse). With nothing pinned, this is policies/classic/fifo.py.

State: one list (links `prev`/`nxt`, `head[0]`/`tail[0]`, its size) and a pin byte per block.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from sitsprof.common.jit import njit

from ...classic._structs import NIL
from ._lists import NOT_PINNED, PARKED, PINNED, new_lists, oldest_unpinned, push, remove, unpark
from ._lists import pin as pin  # the pool's pin: set the bit (_lists.py)

__all__ = ["FifoState", "admit", "hit", "miss", "new", "unpin", "victim"]

FifoState = namedtuple("FifoState", "prev nxt flag head tail size")


def new(n_ids: int, capacity: int) -> FifoState:
    prev, nxt, head, tail, size = new_lists(n_ids, 1)
    return FifoState(prev, nxt, np.zeros(len(prev), dtype=np.uint8), head, tail, size)


@njit(cache=True)
def hit(st, x):
    """Nothing: the order is the insertion order. Evicts nothing (NIL)."""
    return np.int32(NIL)


@njit(cache=True)
def miss(st, x):
    """Nothing: FIFO keeps no ghosts."""


@njit(cache=True)
def admit(st, x):
    st.flag[x] |= PINNED
    push(st, 0, x)


@njit(cache=True)
def unpin(st, x):
    st.flag[x] &= NOT_PINNED
    if st.flag[x] & PARKED:
        unpark(st.prev, st.nxt, st.flag, st.head, st.tail, 0, x)


@njit(cache=True)
def victim(st):
    x = oldest_unpinned(st.prev, st.nxt, st.flag, st.head, st.tail, 0)
    remove(st, 0, x)
    return x
