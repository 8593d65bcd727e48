"""SITS streamed: `sits.run` on an oracleGeneral file read in chunks (engine/stream.py), decision for decision.

What the whole-trace run takes from the whole trace, and how a single pass gets it:

- the windows (``window_s`` of trace time, capped at ``window_refs`` references when given;
  `signals.time_windows`): each starts at a record whose time slot, or reference sub-window
  within its slot, differs from the previous record's, which a pass sees as it goes
  (`_window_starts`, its state carried from chunk to chunk);
- the run's mean request rate (each window's load is its rate over it): the references and
  the first and last timestamps, known before the first record (`info`, from the file's
  size and its last record);
- the shadows (`shadows.shadow_counts`: LRU and ARC over the references to hash-sampled
  blocks, renumbered by first use, at capacity / 2^k): the same two replays, fed each
  window's sampled references as they pass, their state kept (`arc` resumable state);
- a window's signals (`signals.window_signals`: P99 TTFT of evenly spaced runs of its
  requests, entropy of evenly spaced runs of its references): where the runs fall depends
  on the window's length, known at its end, so the window's codes, hit flags and tokens are
  kept until then (9 bytes a reference of the current window) and the decision is made
  there, as the whole-trace run makes it after serving the window.

The cache serves each reference as it arrives in the behaviour the last decision chose (a
window's behaviour is fixed before it starts), so the hit flags are the whole-trace run's.
Not streamed: the threshold engine (``threshold=True``: LIRS until a P99 breach), and the
run's cost summary and CTCCI (they need every request's hits, as for every streamed policy).
Memory: the cache's per-block state (ARC's lists, 9 bytes a block), the sample's first-use
codes (4 bytes a block) and the shadows' state (9 bytes a sampled block), plus the largest
window: a trace whose every record falls in one window holds all of it.
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit

from ..classic._structs import NIL, grow
from ..classic.arc import RECENCY, SCAN, new_state, replay_recency, replay_scan
from ..cost.costmodel import CostModel
from ..engine.capacity import check_capacity
from ..errors import PolicyEngineError
from ..traces.trace import DEFAULT_BLOCK_TOKENS
from .hybrid import HybridCache
from .shadows import first_use_code, in_sample, sample_mask, shadow_shift
from .signals import P99_SAMPLE, window_signals
from .sits import BEHAVIOURS, Controller, SitsConfig

__all__ = [
    "STREAM_PARAMS",
    "STREAM_TIMES",
    "SitsStream",
    "grow_state",
    "max_resident",
    "new_stream_state",
    "stream_finish",
    "stream_window",
]

#: stream_window also takes the chunk's `times` and `tokens`, new_stream_state the trace's `info`.
STREAM_TIMES = True
#: Parameters the streamed run takes: SitsConfig's (the threshold engine is not streamed).
STREAM_PARAMS = tuple(SitsConfig.__dataclass_fields__)


@njit(cache=True)
def _window_starts(times, g0, t0, window_s, refs, st, out):
    """Local indices of the records of this chunk that start a window (signals.time_windows
    with one reference a request); st = (slot of the previous record, first record of its
    slot run, its sub-window), updated. Returns how many were written to `out`."""
    slot_prev, run_start, sub_prev = st[0], st[1], st[2]
    m = 0
    for i in range(times.shape[0]):
        g = g0 + i
        slot = np.int64(np.floor((times[i] - t0) / window_s))
        if g > 0 and slot != slot_prev:
            run_start = g
        sub = (g - run_start) // refs
        if g == 0 or slot != slot_prev or sub != sub_prev:
            out[m] = i
            m += 1
        slot_prev = slot
        sub_prev = sub
    st[0], st[1], st[2] = slot_prev, run_start, sub_prev
    return m


@njit(cache=True)
def _sample(block, lo, hi, k, scode, m, out):
    """The references lo..hi-1 to sampled blocks (shadows.sample_refs's rule, `in_sample`), as
    first-use codes (scode: block -> code, -1 none yet; m codes so far). Returns (count, m)."""
    mask = sample_mask(k)
    c = 0
    for i in range(lo, hi):
        b = block[i]
        if in_sample(b, mask):
            out[c], m = first_use_code(scode, b, m)
            c += 1
    return c, m


class _Buffer:
    """A growing array (the current window's codes, hit flags or tokens)."""

    def __init__(self, dtype):
        self.data = np.empty(1 << 12, dtype=dtype)
        self.n = 0

    def extend(self, values) -> None:
        need = self.n + len(values)
        if need > len(self.data):
            grown = np.empty(max(need, 2 * len(self.data)), dtype=self.data.dtype)
            grown[:self.n] = self.data[:self.n]
            self.data = grown
        self.data[self.n:need] = values
        self.n = need

    def view(self):
        return self.data[:self.n]


class SitsStream:
    """The SITS run's state between chunks."""

    def __init__(self, n_blocks: int, capacity: int, info: dict, params: dict):
        unknown = sorted(set(params) - set(STREAM_PARAMS))
        if unknown:
            raise PolicyEngineError(f"sits --stream has no parameter {', '.join(unknown)} (the threshold engine "
                                    "needs the whole trace); it takes " + ", ".join(STREAM_PARAMS))
        self.cfg = cfg = SitsConfig(**params)
        self.capacity = capacity = check_capacity(capacity)
        self.cache = HybridCache(n_blocks, capacity)
        self.ctl = Controller(cfg, behaviour=BEHAVIOURS.index(cfg.initial))
        self.refs = int(cfg.window_refs) if cfg.window_refs is not None else 1 << 62
        n_req, span = int(info["references"]), float(info["last_time"]) - float(info["first_time"])
        self.t0 = float(info["first_time"])
        self.mean_rate = n_req / span if span > 0 else float("nan")
        self.k = shadow_shift(capacity) if cfg.sample_shift is None else int(cfg.sample_shift)
        self.shadow_cap = np.int64(max(1, self.capacity >> self.k))
        self.scode = np.full(max(int(n_blocks), 1), -1, dtype=np.int32)
        self.m = 0
        self.shadows = [new_state(1 << 10), new_state(1 << 10)]  # RECENCY, SCAN
        self.counts = np.zeros(3, dtype=np.int64)  # the window's sampled refs, LRU hits, ARC hits
        cost = CostModel(**info.get("cost", {}))  # calibration, model, miss: as the whole-trace run's
        self.table, self.index = cost.coefficients(None)
        self.prefix_only = cost.miss == "recompute"
        self.block_tokens = DEFAULT_BLOCK_TOKENS
        self.st = np.zeros(3, dtype=np.int64)
        self.g = 0  # records seen
        self.window = -1
        self.codes, self.hits, self.tokens = _Buffer(np.int32), _Buffer(np.uint8), _Buffer(np.int32)
        self.first_t = self.last_t = 0.0
        self.served = np.zeros(2, dtype=np.int64)
        self.sample = np.zeros(P99_SAMPLE)

    def grow(self, n_blocks: int) -> None:
        c = self.cache
        c.prev, c.nxt, c.where = grow(c.prev, n_blocks, NIL), grow(c.nxt, n_blocks, NIL), grow(c.where, n_blocks, NIL)
        self.scode = grow(self.scode, n_blocks, -1)

    def _shadows(self, block, lo, hi) -> None:
        out = np.empty(hi - lo, dtype=np.int32)
        c, self.m = _sample(block, np.int64(lo), np.int64(hi), np.int64(self.k), self.scode, np.int64(self.m), out)
        if not c:
            return
        for j, st in enumerate(self.shadows):
            if len(st[2]) < self.m:
                n = max(self.m, 2 * len(st[2]))
                st = self.shadows[j] = (grow(st[0], n, NIL), grow(st[1], n, NIL), grow(st[2], n, NIL)) + st[3:]
        h = np.empty(c, dtype=np.uint8)
        self.counts[0] += c
        for behaviour, loop in ((RECENCY, replay_recency), (SCAN, replay_scan)):
            loop(out, np.int64(0), np.int64(c), *self.shadows[behaviour], self.shadow_cap, h)
            self.counts[1 + behaviour] += int(np.count_nonzero(h))

    def _close_window(self) -> None:
        """Signals and the decision after the current window, as sits._replay makes them."""
        n = self.codes.n
        if self.window < 0 or n == 0:
            return
        offsets = np.arange(n + 1, dtype=np.int64)
        d_ms, h_bits = window_signals(self.codes.view(), 0, n, 0, n, offsets, self.hits.view(), self.tokens.view(),
                                      self.block_tokens, self.index, self.table, self.prefix_only, self.sample)
        t_end = self.last_t
        dur = t_end - self.first_t
        load = (n / dur) / self.mean_rate if dur > 0 and self.mean_rate > 0 else 1.0
        self.ctl.decide(self.window, t_end, h_bits, d_ms, load,
                        {RECENCY: int(self.counts[1]), SCAN: int(self.counts[2])}, int(self.counts[0]), True)
        self.codes.n = self.hits.n = self.tokens.n = 0
        self.counts[:] = 0

    def _segment(self, block, lo, hi, hit, times, tokens) -> int:
        behaviour = self.ctl.behaviour
        evictions = self.cache.replay(block, lo, hi, behaviour, hit)
        self.served[behaviour] += hi - lo
        self.codes.extend(block[lo:hi])
        self.hits.extend(hit[lo:hi])
        self.tokens.extend(tokens[lo:hi])
        self.last_t = float(times[hi - 1])
        self._shadows(block, lo, hi)
        return evictions

    def window_chunk(self, block, lo, hi, hit, times, tokens) -> int:
        """Serve references lo..hi-1 of a chunk (times: their timestamps, tokens: their sizes)."""
        times = np.ascontiguousarray(times, dtype=np.float64)
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        starts = np.empty(hi - lo, dtype=np.int64)
        m = int(_window_starts(times[lo:hi], np.int64(self.g), self.t0, float(self.cfg.window_s),
                               np.int64(self.refs), self.st, starts))
        cuts = [lo + int(s) for s in starts[:m]] + [hi]
        evictions = 0
        if cuts[0] > lo:  # the window open at the chunk's start goes on
            evictions += self._segment(block, lo, cuts[0], hit, times, tokens)
        for a, b in zip(cuts[:-1], cuts[1:]):
            self._close_window()
            self.window += 1
            self.first_t = float(times[a])
            if b > a:
                evictions += self._segment(block, a, b, hit, times, tokens)
        self.g += hi - lo
        return evictions


def new_stream_state(n_blocks, capacity, info=None, **params):
    if info is None:
        raise PolicyEngineError("sits streams only from an oracleGeneral file (stream_simulate), which gives its "
                                "references and time span")
    return SitsStream(n_blocks, capacity, info, params)


def grow_state(state, n_blocks, capacity, **params):
    state.grow(n_blocks)
    return state


def max_resident(state):
    return int(state.cache.state[1])


def stream_window(state, block, lo, hi, capacity, hit, times=None, tokens=None, **params):
    return state.window_chunk(block, lo, hi, hit, times, tokens)


def stream_finish(state) -> dict:
    """Close the last window (its decision is logged, as the whole-trace run logs it) and
    return what the run adds to its result's extra."""
    state._close_window()
    n = max(int(state.served.sum()), 1)
    return {"sample_shift": state.k, "windows": state.window + 1, "switches": state.ctl.switches,
            "behaviour_share": {name: float(state.served[b] / n) for b, name in enumerate(BEHAVIOURS)},
            "events": state.ctl.events}
