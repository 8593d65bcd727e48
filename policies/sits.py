"""SITS adaptive policy: a cache that switches between recency and scan resistance per window.

The cache keeps ARC's four lists (T1/T2 resident, B1/B2 ghosts; see arc.py) and serves in
one of two *behaviours* over the same lists:

- ``recency``: evict the least recently used resident block, i.e. the older of T1's and
  T2's tails (each list is in recency order, so this is exactly LRU's victim);
- ``scan`` (scan resistance): ARC's REPLACE, with T1's target size `p` adapted by ghost hits.

Both behaviours keep `p` and the ghosts up to date, so a switch is a flip of one flag: every
resident block stays (no cold cache) and the other behaviour's metadata is already warm.

Which behaviour serves is decided once per window (``window_s`` of trace time or
``window_refs`` references, at request boundaries) by a controller that logs every decision:

1. Shadow evaluation: LRU and ARC replay a spatially sampled slice of the trace (blocks whose
   hash falls in 1/2^k of the space, capacity scaled by the same 1/2^k: the "miniature
   simulation" of Waldspurger et al., USENIX ATC 2017). Their hits, decayed by ``memory``
   per window, say which behaviour is winning on this workload right now.
2. Signals: access-pattern entropy H (Shannon entropy, bits, of the window's block ids hashed
   into 256 buckets, so 0 <= H <= 8) and latency sensitivity d (P99 TTFT of the window's
   requests in ms, from the cost model). score = a*min(1, H/8) + (1-a)*min(1, d/200); a
   starts at 0.6 and moves with load (see ``adapt_alpha``).
3. Action matrix: H < 2.5 and d < 50 ms -> ``keep`` (no change); H > 6 and d > 150 ms ->
   ``migrate`` to the shadow winner as soon as it leads; elsewhere -> ``migrate`` only when
   score >= ``score_threshold`` and the winner leads by ``margin`` of the sampled references,
   else ``keep``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from . import arc as _arc
from . import lru as _lru
from ._structs import NIL, move_to_head, new_lists, pop_tail, push_head, unlink
from .arc import _B1, _B2, _T1, _T2, _replace
from .errors import PolicyEngineError
from .trace import Trace

NAME = "sits"
DESCRIPTION = "SITS adaptive: per-window entropy/P99 score switches recency vs ARC-style scan resistance, shadow-evaluated"

RECENCY, SCAN = 0, 1
BEHAVIOURS = ("recency", "scan")
SHADOW_POLICIES = {RECENCY: _lru, SCAN: _arc}  # shadow candidate for each behaviour
H_CAP, D_CAP_MS = 8.0, 200.0
KEEP_H, KEEP_D = 2.5, 50.0
MIGRATE_H, MIGRATE_D = 6.0, 150.0


# ---------------------------------------------------------------------------- decisions


def migration_score(h_bits: float, d_ms: float, alpha: float = 0.6) -> float:
    """score = a*min(1, H/8) + (1-a)*min(1, d/200)."""
    return alpha * min(1.0, max(h_bits, 0.0) / H_CAP) + (1.0 - alpha) * min(1.0, max(d_ms, 0.0) / D_CAP_MS)


def action_cell(h_bits: float, d_ms: float) -> str:
    """The action-matrix cell: ``keep`` (H<2.5 and d<50), ``migrate`` (H>6 and d>150), else ``score``."""
    if h_bits < KEEP_H and d_ms < KEEP_D:
        return "keep"
    if h_bits > MIGRATE_H and d_ms > MIGRATE_D:
        return "migrate"
    return "score"


def adapt_alpha(alpha0: float, load: float) -> float:
    """Weight of entropy vs latency under `load` (window request rate / the run's mean rate).

    Above the mean rate latency matters more: a falls by 0.1 per unit of excess load; below
    it, entropy matters more: a rises by 0.1 per unit of deficit; kept within [0.2, 0.8].
    """
    if not math.isfinite(load):
        return alpha0
    return float(min(0.8, max(0.2, alpha0 - 0.1 * (load - 1.0))))


def bucket_entropy(buckets: np.ndarray) -> float:
    """Shannon entropy (bits) of values in 0..255."""
    if len(buckets) == 0:
        return 0.0
    counts = np.bincount(buckets, minlength=256).astype(np.float64)
    p = counts[counts > 0] / len(buckets)
    return float(-(p * np.log2(p)).sum())


def hash_buckets(block: np.ndarray, bits: int = 8) -> np.ndarray:
    """A multiplicative (Fibonacci) hash of dense ids into 2**bits buckets."""
    h = (block.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits)
    return h.astype(np.int64)


def access_entropy(block: np.ndarray) -> float:
    """Access-pattern entropy of a window: ids hashed into 256 buckets, so 0 <= H <= 8 bits."""
    return bucket_entropy(hash_buckets(np.asarray(block)))


# ---------------------------------------------------------------------------- the cache


@njit(cache=True)
def _evict_recency(prev, nxt, head, tail, where, size, last):
    """Demote the least recently used resident block (older of T1's and T2's tails) to its ghost."""
    a = tail[_T1]
    b = tail[_T2]
    if b == NIL or (a != NIL and last[a] <= last[b]):
        q, g = _T1, _B1
    else:
        q, g = _T2, _B2
    x = pop_tail(prev, nxt, head, tail, q)
    size[q] -= 1
    push_head(prev, nxt, head, tail, g, x)
    size[g] += 1
    where[x] = g


@njit(cache=True)
def _drop_ghost(prev, nxt, head, tail, where, size, g):
    x = pop_tail(prev, nxt, head, tail, g)
    size[g] -= 1
    where[x] = NIL


@njit(cache=True)
def _make_room_recency(prev, nxt, head, tail, where, size, last, capacity, into_t1):
    """Recency behaviour: free one resident slot, then trim ghosts to ARC's bounds."""
    evicted = 0
    while size[_T1] + size[_T2] + 1 > capacity:
        _evict_recency(prev, nxt, head, tail, where, size, last)
        evicted += 1
    while into_t1 and size[_T1] + size[_B1] + 1 > capacity and size[_B1] > 0:
        _drop_ghost(prev, nxt, head, tail, where, size, _B1)
    while size[_T1] + size[_T2] + size[_B1] + size[_B2] + 1 > 2 * capacity:
        _drop_ghost(prev, nxt, head, tail, where, size, _B2 if size[_B2] > 0 else _B1)
    return evicted


@njit(cache=True)
def _make_room_scan_miss(prev, nxt, head, tail, where, size, p, capacity):
    """Scan behaviour, a miss on all four lists: ARC's case IV (as arc.py)."""
    evicted = 0
    while size[_T1] + size[_T2] + 1 > capacity:
        if size[_T1] + size[_B1] + 1 > capacity:
            if size[_B1] > 0:
                _drop_ghost(prev, nxt, head, tail, where, size, _B1)
                _replace(prev, nxt, head, tail, where, size, p, False)
            else:
                x = pop_tail(prev, nxt, head, tail, _T1)
                size[_T1] -= 1
                where[x] = NIL
        else:
            if size[_T1] + size[_B1] + size[_T2] + size[_B2] >= 2 * capacity and size[_B2] > 0:
                _drop_ghost(prev, nxt, head, tail, where, size, _B2)
            _replace(prev, nxt, head, tail, where, size, p, False)
        evicted += 1
    return evicted


@njit(cache=True)
def replay_window(block, lo, hi, prev, nxt, head, tail, where, size, state, last, behaviour, capacity, hit):
    """Serve references lo..hi-1 in `behaviour`; state[0] is ARC's p. Returns evictions."""
    evictions = 0
    p = state[0]
    cap_f = float(capacity)
    for i in range(lo, hi):
        b = block[i]
        w = where[b]
        last[b] = i
        if w == _T1:
            hit[i] = 1
            unlink(prev, nxt, head, tail, _T1, b)
            size[_T1] -= 1
            push_head(prev, nxt, head, tail, _T2, b)
            size[_T2] += 1
            where[b] = _T2
            continue
        if w == _T2:
            hit[i] = 1
            move_to_head(prev, nxt, head, tail, _T2, b)
            continue
        hit[i] = 0
        if w == _B1 or w == _B2:
            in_b2 = w == _B2
            if w == _B1:
                p = min(p + max(size[_B2] / size[_B1], 1.0), cap_f)
            else:
                p = max(p - max(size[_B1] / size[_B2], 1.0), 0.0)
            unlink(prev, nxt, head, tail, w, b)
            size[w] -= 1
            if behaviour == RECENCY:
                evictions += _make_room_recency(prev, nxt, head, tail, where, size, last, capacity, False)
            else:
                while size[_T1] + size[_T2] + 1 > capacity:
                    _replace(prev, nxt, head, tail, where, size, p, in_b2)
                    evictions += 1
            q = _T2
        else:
            if behaviour == RECENCY:
                evictions += _make_room_recency(prev, nxt, head, tail, where, size, last, capacity, True)
            else:
                evictions += _make_room_scan_miss(prev, nxt, head, tail, where, size, p, capacity)
            q = _T1
        push_head(prev, nxt, head, tail, q, b)
        size[q] += 1
        where[b] = q
        if size[_T1] + size[_T2] > state[1]:
            state[1] = size[_T1] + size[_T2]
    state[0] = p
    return evictions


class HybridCache:
    """The SITS cache's metadata: ARC's lists plus per-block last access, resumable by window."""

    def __init__(self, n_blocks: int, capacity: int):
        self.capacity = int(capacity)
        self.prev, self.nxt, self.head, self.tail = new_lists(n_blocks, 4)
        self.where = np.full(max(n_blocks, 1), NIL, dtype=np.int8)
        self.size = np.zeros(4, dtype=np.int64)
        self.state = np.zeros(2, dtype=np.float64)  # ARC's p, most blocks ever resident
        self.last = np.zeros(max(n_blocks, 1), dtype=np.int64)
        self.evictions = 0

    def replay(self, block, lo, hi, behaviour, hit) -> int:
        e = replay_window(block, lo, hi, self.prev, self.nxt, self.head, self.tail, self.where, self.size,
                          self.state, self.last, behaviour, self.capacity, hit)
        self.evictions += int(e)
        return int(e)

    @property
    def resident(self) -> int:
        return int(self.size[_T1] + self.size[_T2])

    def resident_blocks(self) -> np.ndarray:
        return np.flatnonzero((self.where == _T1) | (self.where == _T2))


# ---------------------------------------------------------------------------- windows


def window_bounds(trace: Trace, window_s: float, window_refs: int) -> np.ndarray:
    """Reference offsets of windows: a new window starts at the first request at or after
    window_start + window_s, or once the window holds window_refs references."""
    offsets = trace.request_offsets
    n_req = len(offsets) - 1
    if n_req <= 0:
        return np.array([0, 0], dtype=np.int64)
    first = offsets[:-1]
    t = np.asarray(trace.time, dtype=np.float64)[first] if len(trace.time) else np.zeros(n_req)
    slot = np.floor((t - t[0]) / window_s).astype(np.int64) if window_s > 0 else np.zeros(n_req, np.int64)
    change = np.flatnonzero(np.diff(slot)) + 1
    starts = np.concatenate(([0], change))
    slot_start_ref = np.repeat(first[starts], np.diff(np.concatenate((starts, [n_req]))))
    sub = (first - slot_start_ref) // max(int(window_refs), 1)
    key_change = np.flatnonzero((np.diff(slot) != 0) | (np.diff(sub) != 0)) + 1
    req_starts = np.concatenate(([0], key_change))
    return np.concatenate((first[req_starts], [offsets[-1]])).astype(np.int64)


def shadow_shift(capacity: int, target: int = 4096) -> int:
    """Sampling exponent k: shadows see 1/2^k of the blocks with capacity/2^k, at least ~target slots."""
    return max(0, int(math.floor(math.log2(max(capacity, 1) / target)))) if capacity > target else 0


def shadow_hits(block: np.ndarray, n_blocks: int, capacity: int, k: int) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Replay the sampled slice through each behaviour's shadow policy: (sampled reference
    indices, {behaviour: hit flags of those references})."""
    if k > 0:
        sampled = np.flatnonzero(hash_buckets(block, 16) & ((1 << k) - 1) == 0)
    else:
        sampled = np.arange(len(block))
    sub = np.ascontiguousarray(block[sampled])
    cap = max(1, capacity >> k)
    offsets = np.arange(len(sub) + 1, dtype=np.int64)
    out = {}
    for behaviour, module in SHADOW_POLICIES.items():
        h = np.zeros(len(sub), dtype=np.uint8)
        module.KERNEL(sub, offsets, np.int64(n_blocks), np.int64(cap), h)
        out[behaviour] = h
    return sampled, out


# ---------------------------------------------------------------------------- the run


@dataclass
class SitsConfig:
    window_s: float = 60.0
    window_refs: int = 65536
    alpha: float = 0.6
    adapt: bool = True
    score_threshold: float = 0.5
    margin: float = 0.002  # lead (fraction of sampled refs) needed outside the migrate cell
    memory: float = 0.9  # decay of shadow hits per window
    initial: str = "scan"
    sample_shift: int | None = None
    switching: bool = True  # False pins the initial behaviour (decisions are still logged)

    def __post_init__(self):
        if self.initial not in BEHAVIOURS:
            raise PolicyEngineError(f"initial behaviour {self.initial!r} unknown; choose from {', '.join(BEHAVIOURS)}")
        if not 0.0 <= self.alpha <= 1.0:
            raise PolicyEngineError(f"alpha {self.alpha} must be within 0..1")
        if self.window_refs < 1:
            raise PolicyEngineError(f"window_refs {self.window_refs} must be at least 1")


@dataclass
class Controller:
    """Per-window decisions; `events` is the log (one dict per window)."""

    config: SitsConfig
    behaviour: int = SCAN
    scores: dict = field(default_factory=lambda: {RECENCY: 0.0, SCAN: 0.0})
    weight: float = 0.0
    events: list = field(default_factory=list)
    switches: int = 0

    def decide(self, window: int, t: float, h_bits: float, d_ms: float, load: float,
               shadow: dict[int, int], sampled: int, armed: bool = True) -> int:
        cfg = self.config
        m = cfg.memory
        for k in self.scores:
            self.scores[k] = self.scores[k] * m + shadow.get(k, 0)
        self.weight = self.weight * m + sampled
        alpha = adapt_alpha(cfg.alpha, load) if cfg.adapt else cfg.alpha
        score = migration_score(h_bits, d_ms, alpha)
        cell = action_cell(h_bits, d_ms)
        winner = max(self.scores, key=lambda k: (self.scores[k], k == self.behaviour))
        lead = (self.scores[winner] - self.scores[self.behaviour]) / self.weight if self.weight > 0 else 0.0
        if not armed or not cfg.switching:
            action = "hold"
        elif cell == "keep":
            action = "keep"
        elif cell == "migrate":
            action = "migrate" if lead > 0 else "keep"
        else:
            action = "migrate" if score >= cfg.score_threshold and lead > cfg.margin else "keep"
        before = self.behaviour
        if action == "migrate":
            self.behaviour = winner
            self.switches += 1
        self.events.append({
            "event": "decision", "time": float(t), "window": int(window), "H": round(float(h_bits), 4),
            "d_ms": round(float(d_ms), 3), "load": round(float(load), 4), "alpha": round(alpha, 4),
            "score": round(score, 4), "cell": cell, "action": action,
            "from": BEHAVIOURS[before], "to": BEHAVIOURS[self.behaviour],
            "shadow_hit_ratio": {BEHAVIOURS[k]: round(v / self.weight, 5) if self.weight else 0.0
                                 for k, v in self.scores.items()},
        })
        return self.behaviour


def run(trace: Trace, capacity: int, calibration=None, model: str = "qwen2-72b", miss: str = "recompute",
        gate=None, hit_out=None, **params):
    """Replay `trace` through the SITS adaptive policy; returns the engine's SimResult with
    ``extra``: events, behaviour share, switches, cost-model summary.

    `gate` (a threshold.ThresholdEngine) keeps the controller disarmed (serving ``scan``)
    until it fires; see threshold.py.
    """
    from .costmodel import CostModel, latency_summary, ttft_from_costs
    from .engine import _Prepared, _summarise, check_capacity

    capacity = check_capacity(capacity)
    cfg = SitsConfig(**params)
    prep = _Prepared(trace)
    block, offsets, n = prep.block, prep.offsets, len(prep.block)
    cost = CostModel(calibration, model=model, miss=miss)
    hit_s, miss_s = cost.block_costs(trace)
    decode = cost.decode_step(trace)
    request = np.asarray(trace.request, dtype=np.int64)
    bounds = window_bounds(trace, cfg.window_s, cfg.window_refs)
    start = time.perf_counter()
    k = shadow_shift(capacity) if cfg.sample_shift is None else int(cfg.sample_shift)
    sampled, shadow = shadow_hits(block, prep.n_blocks, capacity, k)
    cuts = np.searchsorted(sampled, bounds)
    shadow_cum = {b: np.concatenate(([0], np.cumsum(h, dtype=np.int64))) for b, h in shadow.items()}
    buckets = hash_buckets(block)
    times = np.asarray(trace.time, dtype=np.float64)
    span = float(times[-1] - times[0]) if n else 0.0
    mean_rate = trace.n_requests / span if span > 0 else float("nan")
    cache = HybridCache(prep.n_blocks, capacity)
    ctl = Controller(cfg, behaviour=BEHAVIOURS.index(cfg.initial))
    hit = prep.hit
    hit.fill(0)
    served = np.zeros(2, dtype=np.int64)
    ttft = np.zeros(trace.n_requests)
    armed = gate is None
    for w in range(len(bounds) - 1):
        lo, hi = int(bounds[w]), int(bounds[w + 1])
        if hi <= lo:
            continue
        behaviour = ctl.behaviour if armed else SCAN
        cache.replay(block, lo, hi, behaviour, hit)
        served[behaviour] += hi - lo
        r0, r1 = int(request[lo]), int(request[hi - 1]) + 1
        local = offsets[r0:r1 + 1] - lo
        win_ttft = ttft_from_costs(local, request[lo:hi] - r0, hit[lo:hi], hit_s[lo:hi], miss_s[lo:hi],
                                   cost.miss == "recompute") + decode[r0:r1]
        ttft[r0:r1] = win_ttft
        d_ms = float(np.percentile(win_ttft, 99) * 1e3)
        t_end = float(times[hi - 1])
        dur = t_end - float(times[lo])
        load = ((r1 - r0) / dur) / mean_rate if dur > 0 and mean_rate > 0 else 1.0
        if gate is not None and not armed:
            armed = gate.observe(w, t_end, d_ms, cache, ctl.events)
        s_lo, s_hi = cuts[w], cuts[w + 1]
        counts = {b: int(c[s_hi] - c[s_lo]) for b, c in shadow_cum.items()}
        ctl.decide(w, t_end, bucket_entropy(buckets[lo:hi]), d_ms, load, counts, int(s_hi - s_lo), armed)
    seconds = time.perf_counter() - start
    if hit_out is not None:
        hit_out[:n] = hit
    result = _summarise(prep, NAME, capacity, hit, cache.evictions, int(cache.state[1]), seconds, {})
    summary = latency_summary(ttft)
    result.extra.update(
        sample_shift=k, windows=len(bounds) - 1, switches=ctl.switches,
        behaviour_share={BEHAVIOURS[b]: float(served[b] / max(n, 1)) for b in range(2)},
        cost=summary, events=ctl.events,
    )
    if gate is not None:
        result.extra["threshold"] = gate.summary()
    return result


def KERNEL(block, req_offsets, n_blocks, capacity, hit, window_refs=65536, initial="scan", threshold=False):
    """Engine-contract entry point (plain Python around the compiled cache).

    The engine passes only block ids and request offsets, so windows are by reference count
    and the cost model assumes full blocks of the default model; use `run` with the Trace
    for time windows, stacks and the event log.
    """
    trace = _contract_trace(block, req_offsets, n_blocks)
    gate = None
    if threshold:
        from .threshold import ThresholdEngine

        gate = ThresholdEngine()
    result = run(trace, int(capacity), window_s=0.0, window_refs=int(window_refs), initial=initial, hit_out=hit,
                 gate=gate)
    return result.evictions, result.max_resident


def _contract_trace(block, req_offsets, n_blocks) -> Trace:
    """A Trace from what the engine contract passes: full 512-token blocks, all at t=0."""
    n = len(block)
    req = np.repeat(np.arange(len(req_offsets) - 1, dtype=np.int64), np.diff(req_offsets))
    position = (np.arange(n, dtype=np.int64) - req_offsets[:-1][req]).astype(np.int32)
    return Trace(time=np.zeros(n), request=req, block=np.asarray(block, dtype=np.int32),
                 original_id=np.asarray(block, dtype=np.int64), position=position,
                 tokens=np.full(n, 512, dtype=np.int32), tenant=np.full(n, -1, dtype=np.int32),
                 n_blocks=int(n_blocks))
