"""SITS adaptive policy: a cache that switches between recency and scan resistance per window.

The cache keeps ARC's four lists (T1/T2 resident, B1/B2 ghosts; see arc.py) and serves in
one of two *behaviours* over the same lists:

- ``recency``: one LRU list: misses enter T2 at its head and T2's tail is evicted, once
  whatever T1 held from a scan period has drained (T1's tail goes first); victims are
  forgotten rather than kept as ghosts (ghost upkeep would double the cost of a miss);
- ``scan`` (scan resistance): ARC's REPLACE, with T1's target size `p` adapted by ghost hits.

A switch is a flip of one flag over the same lists: every resident block stays (no cold
cache). Ghost hits adapt `p` in both behaviours; the ghosts themselves are what scan periods
left. Pinned to one behaviour from the start, the cache is exactly LRU or exactly ARC
(tested).

Which behaviour serves is decided once per window (``window_s`` of trace time or
``window_refs`` references, at request boundaries; without trace time the default is a
trace's references / 64, at least 4096, so a run has about 64 windows whatever its size) by
a controller that logs every decision:

1. Shadow evaluation: LRU and ARC replay a spatially sampled slice of the trace (blocks whose
   hash falls in 1/2^k of the space, capacity scaled by the same 1/2^k: the "miniature
   simulation" of Waldspurger et al., USENIX ATC 2017; k is the largest that leaves the shadows
   at least 1024 slots). Their hits, decayed by ``memory`` per window, say which behaviour is
   winning on this workload right now. The sample is taken and both shadows replayed in one
   compiled call before the run.
2. Signals: access-pattern entropy H (Shannon entropy, bits, of the window's block ids hashed
   into 256 buckets, so 0 <= H <= 8) and latency sensitivity d (P99 TTFT of the window's
   requests in ms, from the cost model; larger windows use 32 evenly spaced runs of
   consecutive requests / references, 1024 requests and 4096 references in all). score = a*min(1, H/8) + (1-a)*min(1, d/200);
   a starts at 0.6 and moves with load (see ``adapt_alpha``).
3. Action matrix: H < 2.5 and d < 50 ms -> ``keep`` (no change); H > 6 and d > 150 ms ->
   ``migrate`` to the shadow winner once it leads by ``migrate_margin`` (0.1%) of the sampled
   references; elsewhere -> ``migrate`` only when score >= ``score_threshold`` (0.5) and the
   winner leads by ``margin`` (0.2%), else ``keep``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields

import numpy as np
from numba import njit

from .classic.arc import RECENCY, SCAN, new_state, replay_recency, replay_scan
from .costmodel import ttft_kernel
from .errors import PolicyEngineError
from .traces.trace import DEFAULT_BLOCK_TOKENS, Trace

NAME = "sits"
DESCRIPTION = "SITS adaptive: per-window entropy/P99 score switches recency vs ARC-style scan resistance, shadow-evaluated"

BEHAVIOURS = ("recency", "scan")
H_CAP, D_CAP_MS = 8.0, 200.0
P99_SAMPLE = 1024  # a window's P99 is taken over at most this many evenly spaced requests
ENTROPY_SAMPLE = 4096  # and its entropy over at most this many references
SAMPLE_RUNS = 32  # both taken as this many evenly spaced runs of consecutive items
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

_T1, _T2 = 0, 1  # list codes in `where` (arc.py)


class HybridCache:
    """The SITS cache's metadata (ARC's four lists and p), resumable window by window; the loop
    is arc.replay_window (via replay_scan / replay_recency), the same code as the ARC kernel."""

    # Everything a switch must copy (arc.new_state).
    BUFFERS = ("prev", "nxt", "where", "ends", "sizes", "state")

    def __init__(self, n_blocks: int, capacity: int):
        self.capacity = int(capacity)
        self.prev, self.nxt, self.where, self.ends, self.sizes, self.state = new_state(n_blocks)
        self.evictions = 0

    def snapshot(self) -> dict:
        """A copy of the metadata (the back buffer of a double-buffered switch)."""
        return {name: getattr(self, name).copy() for name in self.BUFFERS}

    def adopt(self, buffers: dict) -> None:
        """Make `buffers` (from snapshot) the live metadata."""
        for name in self.BUFFERS:
            setattr(self, name, buffers[name])

    # the front-buffer protocol of threshold.ThresholdEngine
    back_buffer = snapshot

    def swap(self, back: dict) -> "HybridCache":
        self.adopt(back)
        return self

    def entries(self) -> int:
        """Metadata entries a switch walks: resident and ghost."""
        return int(np.sum(self.sizes))

    def replay(self, block, lo, hi, behaviour, hit) -> int:
        loop = replay_scan if behaviour == SCAN else replay_recency
        e = loop(block, lo, hi, self.prev, self.nxt, self.where, self.ends, self.sizes, self.state, self.capacity, hit)
        self.evictions += int(e)
        return int(e)

    @property
    def resident(self) -> int:
        return int(self.sizes[_T1] + self.sizes[_T2])

    def resident_blocks(self) -> np.ndarray:
        return np.flatnonzero((self.where == _T1) | (self.where == _T2))


# ---------------------------------------------------------------------------- windows


def window_bounds(trace: Trace, window_s: float, window_refs: int, offsets: np.ndarray | None = None) -> np.ndarray:
    """Reference offsets of windows: a new window starts at the first request at or after
    window_start + window_s (window_s <= 0: time is ignored), or once the window holds
    window_refs references."""
    from .costmodel import request_offsets

    offsets = request_offsets(trace) if offsets is None else offsets
    if len(offsets) <= 1:
        return np.array([0, 0], dtype=np.int64)
    refs = max(int(window_refs), 1)
    if window_s <= 0:
        return reference_windows(offsets, refs)
    # a zero-stride time column (no times) stays a view: the loop reads one value per request
    return time_windows(np.asarray(trace.time, dtype=np.float64), offsets, float(window_s), refs)


@njit(cache=True)
def time_windows(times, offsets, window_s, refs):
    """window_bounds with time, in two compiled passes over the requests (count, then fill)
    and no per-request temporary. Request r starts at t = times[offsets[r]] in time slot
    floor((t - t0) / window_s); within a run of one slot, sub-window (offsets[r] - the run's
    first reference) // refs. A window starts where either changes."""
    n_req = offsets.shape[0] - 1
    t0 = times[offsets[0]]
    out = np.empty(0, dtype=np.int64)
    for fill in range(2):
        m = 0
        slot_prev = np.int64(0)
        sub_prev = np.int64(0)
        run_start = offsets[0]
        for r in range(n_req):
            first = offsets[r]
            slot = np.int64(np.floor((times[first] - t0) / window_s))
            if r > 0 and slot != slot_prev:
                run_start = first
            sub = (first - run_start) // refs
            if r == 0 or slot != slot_prev or sub != sub_prev:
                if fill:
                    out[m] = first
                m += 1
            slot_prev = slot
            sub_prev = sub
        if fill:
            out[m] = offsets[n_req]
        else:
            out = np.empty(m + 1, dtype=np.int64)
    return out


# Position of a word's lowest set bit: _DEBRUIJN[(low * _DEBRUIJN_MUL) >> 58] for low = 2**i.
_DEBRUIJN_MUL = 0x03F79D71B4CB0A89
_DEBRUIJN = np.zeros(64, dtype=np.int64)
for _i in range(64):
    _DEBRUIJN[((1 << _i) * _DEBRUIJN_MUL % (1 << 64)) >> 58] = _i


@njit(cache=True)
def sample_refs(block, n_blocks, k, bounds):
    """The spatial sample: references to blocks whose hash (hash_buckets(., 16)) falls in 1/2**k
    of the space, over windows `bounds` (reference offsets, ascending). No temporary the
    size of the trace. Returns (those references renumbered densely 0..m-1 in order of
    first use, m, cuts: sampled references before each bound)."""
    mask = np.uint64((1 << k) - 1)
    lo = bounds[0]
    view = block[lo:bounds[bounds.shape[0] - 1]]  # loops over range(len) index without wraparound checks
    # One bit per reference, 64 to a word, in a branch-free pass the compiler vectorises; then
    # the set bits, lowest first (de Bruijn). Several times faster than a compacting loop.
    words = view.shape[0] >> 6
    bits = np.empty(words, dtype=np.uint64)
    c = 0
    for wd in range(words):
        word = np.uint64(0)
        base = wd << 6
        for t in range(64):
            taken = ((np.uint64(view[base + t]) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(48) & mask) == 0
            word |= np.uint64(taken) << np.uint64(t)
            c += taken
        bits[wd] = word
    for i in range(words << 6, view.shape[0]):
        c += ((np.uint64(view[i]) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(48) & mask) == 0
    index = np.empty(c, dtype=np.int64)
    j = 0
    for wd in range(words):
        word = bits[wd]
        while word != 0:
            low = word & (~word + np.uint64(1))
            index[j] = (wd << 6) + _DEBRUIJN[(low * np.uint64(_DEBRUIJN_MUL)) >> np.uint64(58)]
            j += 1
            word ^= low
    for i in range(words << 6, view.shape[0]):
        if ((np.uint64(view[i]) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(48) & mask) == 0:
            index[j] = i
            j += 1
    cuts = np.searchsorted(index, bounds - lo)
    code = np.full(max(n_blocks, 1), -1, dtype=np.int32)
    dense = np.empty(c, dtype=np.int32)
    m = 0
    for j in range(c):
        b = view[index[j]]
        d = code[b]
        if d < 0:
            d = m
            code[b] = m
            m += 1
        dense[j] = d
    return dense, m, cuts


@njit(cache=True)
def shadow_counts(block, n_blocks, capacity, k, bounds):
    """Replay the sampled slice through each behaviour pinned (exactly LRU and exactly ARC, at
    capacity/2^k) in one compiled call. Returns int64 (3, windows): sampled references, their
    RECENCY (LRU) hits and SCAN (ARC) hits per window."""
    dense, m, cuts = sample_refs(block, n_blocks, k, bounds)
    cap = max(1, capacity >> k)
    nw = bounds.shape[0] - 1
    out = np.zeros((3, nw), dtype=np.int64)
    for w in range(nw):
        out[0, w] = cuts[w + 1] - cuts[w]
    h = np.empty(dense.shape[0], dtype=np.uint8)
    for behaviour in range(2):  # RECENCY, SCAN
        prev, nxt, where, ends, sizes, state = new_state(m)
        if behaviour == RECENCY:
            replay_recency(dense, 0, dense.shape[0], prev, nxt, where, ends, sizes, state, cap, h)
        else:
            replay_scan(dense, 0, dense.shape[0], prev, nxt, where, ends, sizes, state, cap, h)
        for w in range(nw):
            total = 0
            for j in range(cuts[w], cuts[w + 1]):
                total += h[j]
            out[1 + behaviour, w] = total
    return out


def reference_windows(offsets: np.ndarray, window_refs: int) -> np.ndarray:
    """Window offsets by reference count: each window starts at the first request starting at
    or after a multiple of window_refs."""
    first = offsets[:-1]
    if len(first) == 0:
        return np.array([0, 0], dtype=np.int64)
    targets = np.arange(0, int(offsets[-1]), max(int(window_refs), 1), dtype=np.int64)
    req_starts = np.unique(np.searchsorted(first, targets, side="left"))
    req_starts = req_starts[req_starts < len(first)]
    return np.concatenate((first[req_starts], [offsets[-1]])).astype(np.int64)


def shadow_shift(capacity: int, target: int = 1024) -> int:
    """Sampling exponent k: shadows see 1/2^k of the blocks with capacity/2^k, at least ~target slots."""
    return max(0, int(math.floor(math.log2(max(capacity, 1) / target)))) if capacity > target else 0


# ---------------------------------------------------------------------------- the run


@dataclass
class SitsConfig:
    window_s: float = 60.0
    window_refs: int | None = None  # None: no cap on time windows; without time, references / 64
    alpha: float = 0.6
    adapt: bool = True
    score_threshold: float = 0.5
    margin: float = 0.002  # lead (fraction of sampled refs) needed outside the migrate cell
    migrate_margin: float = 0.001  # lead needed inside the migrate cell
    memory: float = 0.9  # decay of shadow hits per window
    initial: str = "scan"
    sample_shift: int | None = None
    switching: bool = True  # False pins the initial behaviour (decisions are still logged)

    def __post_init__(self):
        if self.initial not in BEHAVIOURS:
            raise PolicyEngineError(f"initial behaviour {self.initial!r} unknown; choose from {', '.join(BEHAVIOURS)}")
        if not 0.0 <= self.alpha <= 1.0:
            raise PolicyEngineError(f"alpha {self.alpha} must be within 0..1")
        if self.window_refs is not None and self.window_refs < 1:
            raise PolicyEngineError(f"window_refs {self.window_refs} must be at least 1")

    def refs_per_window(self, n_refs: int) -> int:
        return int(self.window_refs) if self.window_refs is not None else max(4096, -(-n_refs // 64))


# Parameters `run` takes by name (params.accepted): SitsConfig's fields and the threshold engine's.
PARAMS = {**{f.name: f.default for f in fields(SitsConfig)}, "threshold": False, "threshold_windows": 3,
          "threshold_budget_ms": 200.0, "threshold_horizon_s": 900.0}


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
            action = "migrate" if lead > cfg.migrate_margin else "keep"
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
            "from": BEHAVIOURS[before] if armed else "lirs", "to": BEHAVIOURS[self.behaviour] if armed else "lirs",
            "shadow_hit_ratio": {BEHAVIOURS[k]: round(v / self.weight, 5) if self.weight else 0.0
                                 for k, v in self.scores.items()},
        })
        return self.behaviour


@njit(cache=True)
def p99(values, m):
    """np.percentile(values[:m], 99) (linear interpolation), compiled; 0 when m == 0."""
    if m <= 0:
        return 0.0
    pos = 0.99 * (m - 1)
    lo = int(pos)
    a = np.partition(values[:m], lo)  # a selection, not a sort: linear in m
    if lo + 1 >= m:
        return a[lo]
    return a[lo] + (a[lo + 1:].min() - a[lo]) * (pos - lo)


@njit(cache=True)
def window_entropy(block, lo, hi, stride=1):
    """access_entropy(block[lo:hi:stride]) in one compiled pass (same hash, 256 buckets)."""
    counts = np.zeros(256, dtype=np.int64)
    n = 0
    for i in range(lo, hi, stride):
        counts[(np.uint64(block[i]) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(56)] += 1
        n += 1
    h = 0.0
    for c in counts:
        if c > 0:
            q = c / n
            h -= q * np.log2(q)
    return h


@njit(cache=True)
def window_signals(block, lo, hi, r0, r1, offsets, hit, tokens, block_tokens, index, table, prefix_only, sample):
    """A window's latency sensitivity d (P99 TTFT in ms) and entropy H (bits), in one compiled
    call. Small windows use every request / reference; larger ones SAMPLE_RUNS evenly spaced
    runs of consecutive ones, P99_SAMPLE requests and ENTROPY_SAMPLE references in all
    (consecutive runs read a few cache lines where a strided sample reads one per item)."""
    n_req = r1 - r0
    if n_req <= P99_SAMPLE:
        ttft_kernel(r0, r1, 1, offsets, hit, tokens, block_tokens, index, table, prefix_only, sample)
        m = n_req
    else:
        run = P99_SAMPLE // SAMPLE_RUNS
        for c in range(SAMPLE_RUNS):
            s = r0 + c * (n_req - run) // (SAMPLE_RUNS - 1)
            ttft_kernel(s, s + run, 1, offsets, hit, tokens, block_tokens, index, table, prefix_only,
                        sample[c * run:(c + 1) * run])
        m = P99_SAMPLE
    d_ms = p99(sample, m) * 1e3
    n_ref = hi - lo
    if n_ref <= ENTROPY_SAMPLE:
        return d_ms, window_entropy(block, lo, hi, 1)
    counts = np.zeros(256, dtype=np.int64)
    run = ENTROPY_SAMPLE // SAMPLE_RUNS
    for c in range(SAMPLE_RUNS):
        s = lo + c * (n_ref - run) // (SAMPLE_RUNS - 1)
        for i in range(s, s + run):
            counts[(np.uint64(block[i]) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(56)] += 1
    h = 0.0
    for x in counts:
        if x > 0:
            q = x / (run * SAMPLE_RUNS)
            h -= q * np.log2(q)
    return d_ms, h


def sim_result(trace: Trace, offsets, name, capacity, hit, evictions, max_resident, seconds, extra):
    """The engine's SimResult from per-reference hit flags (the engine's own per-request pass)."""
    from .engine import summarise, token_weights

    return summarise(offsets, token_weights(trace), name, capacity, hit, evictions, max_resident, seconds, extra)


def run(trace: Trace, capacity: int, offsets=None, **kwargs):
    """Replay `trace` through the SITS adaptive policy; returns the engine's SimResult with
    ``extra``: events, behaviour share, switches, cost-model summary, CTCCI.

    Keywords: calibration, model, miss (cost model); threshold=True (with threshold_windows,
    threshold_budget_ms, threshold_horizon_s) or gate (a threshold.ThresholdEngine): literal
    LIRS serves, the controller disarmed, until the engine hot-switches to the SITS cache; hit_out (receives the per-reference hit flags); the rest are SitsConfig fields. ``seconds`` covers the whole
    run (cost model, shadows, controller), not only the cache.
    """
    from .costmodel import request_offsets, token_column

    offsets = request_offsets(trace) if offsets is None else np.asarray(offsets, dtype=np.int64)
    hit, evictions, max_resident, seconds, extra = _replay(
        np.ascontiguousarray(trace.block, dtype=np.int32), offsets, int(trace.n_blocks), capacity,
        times=np.asarray(trace.time, dtype=np.float64), tokens=token_column(trace), trace=trace, **kwargs)
    return sim_result(trace, offsets, NAME, capacity, hit, evictions, max_resident, seconds, extra)


def _replay(block, offsets, n_blocks: int, capacity: int, times=None, tokens=None, trace: Trace | None = None,
            calibration=None, model: str = "qwen2-72b", miss: str = "recompute", gate=None, hit_out=None,
            threshold: bool = False, threshold_windows: int | None = None, threshold_budget_ms: float | None = None,
            threshold_horizon_s: float | None = None, **params):
    """The SITS run over plain arrays. `times` None: windows by reference count only, event
    times are reference indices, load 1. `tokens` None: every block is full. `trace` (when
    given) supplies model stacks to the cost model and enables the run summary (TTFT
    percentiles over every request, CTCCI)."""
    from .costmodel import CostModel
    from .engine import check_capacity
    from .tenancy import ctcci

    capacity = check_capacity(capacity)
    cfg = SitsConfig(**params)
    from .threshold import LirsBaseline, ThresholdEngine

    knobs = {name: value for name, value in (("windows", threshold_windows), ("budget_ms", threshold_budget_ms),
                                              ("horizon_s", threshold_horizon_s)) if value is not None}
    if knobs and not threshold and gate is None:
        raise PolicyEngineError(f"threshold_{next(iter(knobs))} needs threshold=True (the LIRS to SITS engine)")
    if threshold and gate is None:
        gate = ThresholdEngine(calibration=calibration, **knobs)
    start = time.perf_counter()
    n = len(block)
    n_req = len(offsets) - 1
    block_tokens = trace.block_tokens if trace is not None else DEFAULT_BLOCK_TOKENS
    tokens = np.zeros(0, dtype=np.int32) if tokens is None else tokens
    cost = CostModel(calibration, model=model, miss=miss)
    table, index = cost.coefficients(trace)
    prefix_only = cost.miss == "recompute"
    if times is None:
        bounds = reference_windows(offsets, cfg.refs_per_window(n))
        span = 0.0
    else:
        cap = cfg.window_refs if cfg.window_refs is not None else 1 << 62  # time windows only
        bounds = window_bounds(trace, cfg.window_s, cap, offsets)
        span = float(times[-1] - times[0]) if n else 0.0
    mean_rate = n_req / span if span > 0 else float("nan")
    k = shadow_shift(capacity) if cfg.sample_shift is None else int(cfg.sample_shift)
    shadow = shadow_counts(block, n_blocks, capacity, k, bounds)
    # With a gate, literal LIRS serves until the threshold engine switches to the SITS cache.
    front = LirsBaseline(n_blocks, capacity) if gate is not None else None
    cache = HybridCache(n_blocks, capacity) if gate is None else None
    ctl = Controller(cfg, behaviour=BEHAVIOURS.index(cfg.initial))
    hit = np.zeros(n, dtype=np.uint8) if hit_out is None else hit_out
    served = np.zeros(3, dtype=np.int64)  # recency, scan, lirs
    sample = np.zeros(P99_SAMPLE)  # TTFT of the window's (sampled) requests
    request_of = np.searchsorted(offsets, bounds, side="right") - 1  # request holding each window start
    armed = gate is None
    for w in range(len(bounds) - 1):
        lo, hi = int(bounds[w]), int(bounds[w + 1])
        if hi <= lo:
            continue
        if armed:
            cache.replay(block, lo, hi, ctl.behaviour, hit)
            served[ctl.behaviour] += hi - lo
        else:
            front.replay(block, lo, hi, hit)
            served[2] += hi - lo
        r0, r1 = int(request_of[w]), int(request_of[w + 1]) if hi < n else n_req
        d_ms, h_bits = window_signals(block, lo, hi, r0, r1, offsets, hit, tokens, block_tokens, index, table,
                                      prefix_only, sample)
        if times is None:
            t_end, load = float(hi), 1.0
        else:
            t_end = float(times[hi - 1])
            dur = t_end - float(times[lo])
            load = ((r1 - r0) / dur) / mean_rate if dur > 0 and mean_rate > 0 else 1.0
        if gate is not None and not armed:
            armed = gate.observe(w, t_end, d_ms, front, ctl.events)
            cache = gate.live if armed else None
        ctl.decide(w, t_end, h_bits, d_ms, load, {RECENCY: int(shadow[1, w]), SCAN: int(shadow[2, w])},
                   int(shadow[0, w]), armed)
    summary = trace is not None
    if summary:
        ttft = np.zeros(n_req)
        ttft_kernel(0, n_req, 1, offsets, hit, tokens, block_tokens, index, table, prefix_only, ttft)
    seconds = time.perf_counter() - start
    extra = {
        "sample_shift": k, "windows": len(bounds) - 1, "switches": ctl.switches,
        "behaviour_share": {name: float(served[b] / max(n, 1)) for b, name in enumerate(BEHAVIOURS + ("lirs",))
                            if b < 2 or gate is not None},
        "cost": cost.summarize(trace, hit, ttft, offsets, scratch=True) if summary else None,
        "tenancy": ctcci(trace, hit) if summary else None,
        "events": ctl.events,
    }
    if gate is not None:
        extra["threshold"] = gate.summary()
    evictions = (cache.evictions if cache is not None else 0) + (front.evictions if front is not None else 0)
    max_resident = int(cache.state[1]) if cache is not None else front.max_resident  # a switch carries it over
    return hit, evictions, max_resident, seconds, extra


def KERNEL(block, req_offsets, n_blocks, capacity, hit, window_refs=0, initial="scan", threshold=False):
    """Engine-contract entry point (plain Python around the compiled cache).

    The engine passes only block ids and request offsets: windows are by reference count
    (window_refs, 0 for the default of about 64 windows), every block counts as full and the
    default model prices it. Use `run` with the Trace for
    time windows, model stacks, the run's cost summary and the event log.
    """
    _, evictions, max_resident, _, _ = _replay(np.asarray(block), np.asarray(req_offsets, dtype=np.int64),
                                               int(n_blocks), int(capacity),
                                               window_refs=int(window_refs) if window_refs else None,
                                               initial=initial, hit_out=hit, threshold=bool(threshold))
    return evictions, max_resident
