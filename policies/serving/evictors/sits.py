"""SITS for the serving pool: ARC's four lists and `p` (arc.py's state), served in one of two
behaviours, `v[0].behaviour` (adaptive/sits.py's two; the replay's controller, adaptive.py,
sets it between windows).

- SCAN is ARC, call for call.
- RECENCY is one LRU list over T2: admissions and freed blocks (unpin) go to T2's head, as
  vLLM's free queue appends a freed block; the victim is T1's oldest unpinned block while T1
  holds any (what a scan period left), else T2's, and it is forgotten (no ghost). Ghost hits
  adapt `p` in both behaviours.

Pinned to SCAN it is the serving ARC; pinned to RECENCY, T1 stays empty and the unpinned blocks
of T2 are in vLLM's free queue order, so it is the serving LRU, hit for hit, with pinning
(tests/test_serving_sits.py).
"""
from __future__ import annotations

from sitsprof.common.jit import njit

from ...classic._structs import NIL
from ...classic.arc import RECENCY, SCAN
from . import arc
from ._lists import NOT_PINNED, oldest_unpinned, remove

__all__ = ["RECENCY", "SCAN", "admit", "hit", "miss", "new", "pin", "unpin", "victim"]

new = arc.new
hit = arc.hit
miss = arc.miss  # ghost hits adapt p in both behaviours
pin = arc.pin


@njit(cache=True)
def admit(st, x):
    arc.admit_to(st, x, st.v[0].behaviour == RECENCY)


@njit(cache=True)
def unpin(st, x):
    if st.v[0].behaviour == RECENCY:  # freed: to T2's head, as vLLM's free queue appends it
        st.flag[x] &= NOT_PINNED
        arc.to_t2_head(st, x)
    else:
        arc.unpin(st, x)


@njit(cache=True)
def victim(st):
    if st.v[0].behaviour != RECENCY:
        return arc.victim(st)
    # recency: T1's oldest unpinned block (what a scan period left drains first), else T2's;
    # forgotten, no ghost (as classic/arc.py's RECENCY)
    q = arc.T1
    x = oldest_unpinned(st.prev, st.nxt, st.flag, st.head, st.tail, arc.T1)
    if x == NIL:
        q = arc.T2
        x = oldest_unpinned(st.prev, st.nxt, st.flag, st.head, st.tail, arc.T2)
    remove(st, q, x)
    st.where[x] = NIL
    return x
