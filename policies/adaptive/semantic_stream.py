"""Semantic shards streamed: `semantic_shard.run` on an oracleGeneral file read in chunks (engine/stream.py).

An oracleGeneral record is one request of one block with no prompt text and no tenant, so
the shard key is ``first-block`` (what ``auto`` resolves to there): each request's shard is
the hash of its block (`semantic_shard.hash_shards`), known as it passes. Each reference is
served as it arrives (`replay_shards`, the slots fixed for the window). The windows, the
mean rate, and each window's signals are found as `sits_stream` finds them (the window's
codes, hit flags and sizes kept until its end), and at each window's end the run does what
the whole-trace run does there: most-resident, decayed demand, signals, the action matrix,
the slots reallocated when it says so, every shard shrunk within its slots (TTL first), the
``rebalance`` event logged. Memory: the per-block lists, owner and last access time (20
bytes a block) plus the largest window.
"""
from __future__ import annotations

import numpy as np

from ..classic._structs import NIL, grow, new_lists
from ..cost.costmodel import CostModel
from ..engine.capacity import check_capacity
from ..errors import PolicyEngineError
from ..traces.trace import DEFAULT_BLOCK_TOKENS
from .semantic_shard import PARAMS, allocate, hash_shards, replay_shards, resolve_key, shrink
from .signals import P99_SAMPLE, action_cell, adapt_alpha, migration_score, window_signals
from .sits_stream import _Buffer, _window_starts

__all__ = [
    "STREAM_PARAMS",
    "STREAM_TIMES",
    "ShardStream",
    "grow_state",
    "max_resident",
    "new_stream_state",
    "stream_finish",
    "stream_window",
]

STREAM_TIMES = True
STREAM_PARAMS = tuple(PARAMS)


class ShardStream:
    """The semantic shard run's state between chunks."""

    def __init__(self, n_blocks: int, capacity: int, info: dict, shard_key="auto", shards=16, ttl_s=180.0,
                 window_s=60.0, memory=0.5, similarity=None, embedder="hashed", gated=True, alpha=0.6):
        capacity = check_capacity(capacity)
        if shards < 1:
            raise PolicyEngineError(f"shards {shards} must be at least 1")
        if ttl_s <= 0:
            raise PolicyEngineError(f"ttl {ttl_s} s must be positive")
        self.shard_key = resolve_key(shard_key, None)
        if self.shard_key != "first-block":
            raise PolicyEngineError(f"shard key {shard_key!r}: an oracleGeneral trace names no tenant or stack and "
                                    "carries no prompt texts (use --shard-key first-block)")
        self.capacity, self.shards = capacity, min(int(shards), capacity)
        self.ttl, self.window_s, self.memory = float(ttl_s), float(window_s), float(memory)
        self.gated, self.alpha = bool(gated), float(alpha)
        self.prev, self.nxt, self.head, self.tail = new_lists(n_blocks, self.shards)
        self.size = np.zeros(self.shards, dtype=np.int64)
        self.cap = allocate(capacity, np.zeros(self.shards))
        self.owner = np.full(max(int(n_blocks), 1), -1, dtype=np.int32)
        self.last_t = np.zeros(max(int(n_blocks), 1), dtype=np.float64)
        self.evicted = np.zeros(self.shards, dtype=np.int64)
        self.expired = np.zeros(self.shards, dtype=np.int64)
        self.cross = np.zeros(1, dtype=np.int64)
        self.demand = np.zeros(self.shards)
        self.counts = np.zeros(self.shards, dtype=np.int64)
        cost = CostModel(**info.get("cost", {}))  # calibration, model, miss: as the whole-trace run's
        self.table, self.index = cost.coefficients(None)
        self.prefix_only = cost.miss == "recompute"
        self.sample = np.zeros(P99_SAMPLE)
        n_req, span = int(info["references"]), float(info["last_time"]) - float(info["first_time"])
        self.t0, self.span = float(info["first_time"]), span
        self.mean_rate = n_req / span if span > 0 else float("nan")
        self.st = np.zeros(3, dtype=np.int64)
        self.g, self.window, self.before = 0, -1, 0
        self.max_resident = 0
        self.events: list = []
        self.codes, self.hits, self.tokens = _Buffer(np.int32), _Buffer(np.uint8), _Buffer(np.int32)
        self.first_t = self.last_t_seen = 0.0
        self.reported = 0  # evictions already returned to the replay

    def grow(self, n_blocks: int) -> None:
        self.prev, self.nxt = grow(self.prev, n_blocks, NIL), grow(self.nxt, n_blocks, NIL)
        self.owner, self.last_t = grow(self.owner, n_blocks, -1), grow(self.last_t, n_blocks, 0.0)

    def _segment(self, block, lo, hi, hit, times, tokens, req_shard) -> None:
        offsets = np.arange(hi + 1, dtype=np.int64)  # one reference a request
        replay_shards(block, req_shard, offsets, times, lo, hi, self.prev, self.nxt, self.head, self.tail, self.size,
                      self.cap, self.owner, self.last_t, self.ttl, hit, self.evicted, self.expired, self.cross,
                      self.counts)
        self.codes.extend(block[lo:hi])
        self.hits.extend(hit[lo:hi])
        self.tokens.extend(tokens[lo:hi])
        self.last_t_seen = float(times[hi - 1])

    def _close_window(self) -> None:
        n = self.codes.n
        if self.window < 0 or n == 0:
            return
        self.max_resident = max(self.max_resident, int(self.size.sum()))
        self.demand = self.demand * self.memory + self.counts
        offsets = np.arange(n + 1, dtype=np.int64)
        hits = self.hits.view()
        d_ms, h_bits = window_signals(self.codes.view(), 0, n, 0, n, offsets, hits, self.tokens.view(),
                                      DEFAULT_BLOCK_TOKENS, self.index, self.table, self.prefix_only, self.sample)
        t_end = self.last_t_seen
        dur = t_end - self.first_t
        load = (n / dur) / self.mean_rate if dur > 0 and self.mean_rate > 0 else 1.0
        a = adapt_alpha(self.alpha, load)
        score = migration_score(h_bits, d_ms, a)
        cell = action_cell(h_bits, d_ms)
        move = not self.gated or cell == "migrate" or (cell == "score" and score >= 0.5)
        if move:
            self.cap = allocate(self.capacity, self.demand)
        shrink(self.prev, self.nxt, self.head, self.tail, self.size, self.cap, self.owner, self.last_t, t_end,
               self.ttl, self.evicted, self.expired)
        self.events.append({"event": "rebalance", "window": self.window, "time": t_end, "H": round(h_bits, 4),
                            "d_ms": round(d_ms, 3), "alpha": round(a, 4), "score": round(score, 4), "cell": cell,
                            "action": "migrate" if move else "keep", "hit_ratio": float(hits.mean()),
                            "evictions": int(self.evicted.sum() - self.before), "slots": self.cap.tolist()})
        self.codes.n = self.hits.n = self.tokens.n = 0

    def _open_window(self, t: float) -> None:
        self.window += 1
        self.first_t = t
        self.before = int(self.evicted.sum())
        self.counts.fill(0)

    def window_chunk(self, block, lo, hi, hit, times, tokens) -> int:
        """Serve references lo..hi-1 of a chunk; returns the evictions since the last call."""
        times = np.ascontiguousarray(times, dtype=np.float64)
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        dtype = np.int8 if self.shards <= 127 else np.int16 if self.shards <= 32767 else np.int32
        req_shard = np.empty(len(block), dtype=dtype)
        hash_shards(block, np.arange(len(block) + 1, dtype=np.int64), self.shards, req_shard)
        starts = np.empty(hi - lo, dtype=np.int64)
        m = int(_window_starts(times[lo:hi], np.int64(self.g), self.t0, self.window_s, np.int64(1 << 62),
                               self.st, starts))
        cuts = [lo + int(s) for s in starts[:m]] + [hi]
        if cuts[0] > lo:
            self._segment(block, lo, cuts[0], hit, times, tokens, req_shard)
        for a, b in zip(cuts[:-1], cuts[1:]):
            self._close_window()
            self._open_window(float(times[a]))
            if b > a:
                self._segment(block, a, b, hit, times, tokens, req_shard)
        self.g += hi - lo
        return self._new_evictions()

    def _new_evictions(self) -> int:
        total = int(self.evicted.sum())
        new, self.reported = total - self.reported, total
        return new


def new_stream_state(n_blocks, capacity, info=None, **params):
    if info is None:
        raise PolicyEngineError("semantic-shard streams only from an oracleGeneral file (stream_simulate), which "
                                "gives its references and time span")
    return ShardStream(n_blocks, capacity, info, **params)


def grow_state(state, n_blocks, capacity, **params):
    state.grow(n_blocks)
    return state


def max_resident(state):
    return int(state.max_resident)


def stream_window(state, block, lo, hi, capacity, hit, times=None, tokens=None, **params):
    return state.window_chunk(block, lo, hi, hit, times, tokens)


def stream_finish(state) -> dict:
    """Close the last window (its shrink may evict) and return the run's shard figures;
    `evictions_total` replaces the evictions the replay counted from stream_window."""
    state._close_window()
    total = int(state.evicted.sum())
    return {"evictions_total": total, "shard_key": state.shard_key, "shards": state.shards, "ttl_s": state.ttl,
            "window_s": state.window_s, "shard_evictions": state.evicted.tolist(),
            "shard_expirations": state.expired.tolist(), "cross_shard_hits": int(state.cross[0]),
            "shard_eviction_rate": total / state.span if state.span > 0 else 0.0, "events": state.events}
