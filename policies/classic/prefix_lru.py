"""vLLM-style prefix-cache LRU over a free-block queue.

Modelled on vLLM's block pool: every resident block is either *in use* by the request being
admitted (pinned, never evicted) or *free* (cached, in the free queue, evictable). Requests are
admitted one at a time in trace order:

- a referenced block that is resident is a hit; if it was free it is taken off the free queue;
- a missing block needs a slot: below capacity a new one, otherwise the block at the front of
  the free queue is evicted; when every resident block is pinned by this request the block is
  not cached (a miss that leaves nothing behind);
- when the request finishes its blocks are appended to the back of the free queue in reverse
  order (last block first), so a request's tail blocks are evicted before its head and the
  longest shared prefix survives longest.
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit

from ._structs import NIL, grow, push_tail_s, unlink_s

__all__ = [
    "DESCRIPTION",
    "KERNEL",
    "NAME",
    "NUMBA_CACHE_DEPENDS",
    "grow_state",
    "max_resident",
    "new_state",
    "new_stream_state",
    "replay_requests",
    "stream_requests",
]

#: inlined into this module's kernels: part of their cache key (common/numba_locator.py)
NUMBA_CACHE_DEPENDS = ("_structs.py",)

NAME = "prefix_lru"
DESCRIPTION = "vLLM prefix cache: free queue of finished requests' blocks, tail blocks first"

_ABSENT = 0
_IN_USE = 1
_FREE = 2


@njit(cache=True)
def KERNEL(block, req_offsets, n_blocks, capacity, hit):
    n = max(n_blocks, 1)
    # the free queue: evict from the head, release to the tail
    prev = np.full(n, NIL, dtype=np.int32)
    nxt = np.full(n, NIL, dtype=np.int32)
    state = np.zeros(n, dtype=np.uint8)
    sc = np.array([NIL, NIL, 0, 0], dtype=np.int64)
    evictions = replay_requests(block, req_offsets, prev, nxt, state, sc, capacity, hit)
    return evictions, sc[_MAXRES]


# ----------------------------------------------------------------- resumable form (streaming)
# The loop over whole requests with its state kept between calls: KERNEL is one call over the
# whole trace, engine/stream.py calls it chunk by chunk (cut at request boundaries).
# Scalars: head, tail, n_resident, max_resident.
_HEAD, _TAIL, _NRES, _MAXRES = 0, 1, 2, 3


def new_state(n_blocks, capacity):
    n = max(int(n_blocks), 1)
    return (np.full(n, NIL, dtype=np.int32), np.full(n, NIL, dtype=np.int32), np.zeros(n, dtype=np.uint8),
            np.array([NIL, NIL, 0, 0], dtype=np.int64))


new_stream_state = new_state


def grow_state(state, n_blocks, capacity):
    prev, nxt, st, sc = state
    return grow(prev, n_blocks, NIL), grow(nxt, n_blocks, NIL), grow(st, n_blocks, 0), sc


def max_resident(state):
    return int(state[3][_MAXRES])


@njit(cache=True, inline="always")
def replay_requests(block, req_offsets, prev, nxt, state, sc, capacity, hit):
    """Serve the requests req_offsets[r]..req_offsets[r + 1] - 1 (indices into block and hit);
    returns the evictions."""
    head, tail = np.int32(sc[_HEAD]), np.int32(sc[_TAIL])
    n_resident, max_resident = sc[_NRES], sc[_MAXRES]
    evictions = 0
    for r in range(req_offsets.shape[0] - 1):
        start = req_offsets[r]
        end = req_offsets[r + 1]
        for i in range(start, end):
            b = block[i]
            s = state[b]
            if s != _ABSENT:
                hit[i] = 1
                if s == _FREE:
                    head, tail = unlink_s(prev, nxt, head, tail, b)
                    state[b] = _IN_USE
                continue
            hit[i] = 0
            if n_resident >= capacity:
                victim = head
                if victim == NIL:
                    continue  # every resident block is pinned by this request
                head, tail = unlink_s(prev, nxt, head, tail, victim)
                state[victim] = _ABSENT
                n_resident -= 1
                evictions += 1
            state[b] = _IN_USE
            n_resident += 1
            if n_resident > max_resident:
                max_resident = n_resident
        for i in range(end - 1, start - 1, -1):
            b = block[i]
            if state[b] == _IN_USE:
                head, tail = push_tail_s(prev, nxt, head, tail, b)
                state[b] = _FREE
    sc[_HEAD], sc[_TAIL], sc[_NRES], sc[_MAXRES] = head, tail, n_resident, max_resident
    return evictions


def stream_requests(state, block, req_offsets, capacity, hit):
    return replay_requests(block, req_offsets, *state, np.int64(capacity), hit)
