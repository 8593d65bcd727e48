"""SITS adaptive policy: a cache that switches between recency and scan resistance per window.

The cache keeps ARC's four lists (T1/T2 resident, B1/B2 ghosts; see classic/arc.py and hybrid.py) and serves in
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
   consecutive requests / references, 1024 requests and 4096 references in all; see
   signals.py). score = a*min(1, H/8) + (1-a)*min(1, d/200); a starts at 0.6 and moves with load (see ``adapt_alpha``).
3. Action matrix: H < 2.5 and d < 50 ms -> ``keep`` (no change); H > 6 and d > 150 ms ->
   ``migrate`` to the shadow winner once it leads by ``migrate_margin`` (0.1%) of the sampled
   references; elsewhere -> ``migrate`` only when score >= ``score_threshold`` (0.5) and the
   winner leads by ``margin`` (0.2%), else ``keep``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, fields

import numpy as np

from ..classic.arc import RECENCY, SCAN
from ..cost.costmodel import CostModel, token_column, ttft_kernel
from ..engine.capacity import check_capacity
from ..engine.replay import result_from_hits
from ..engine.tenancy import ctcci
from ..errors import PolicyEngineError
from ..traces.trace import DEFAULT_BLOCK_TOKENS, Trace
from .front import FrontBuffer
from .hybrid import HybridCache
from .shadows import shadow_counts, shadow_shift
from .signals import (
    P99_SAMPLE,
    action_cell,
    adapt_alpha,
    migration_score,
    reference_windows,
    window_bounds,
    window_signals,
)
from .threshold import LirsBaseline, ThresholdEngine

__all__ = [
    "BEHAVIOURS",
    "DESCRIPTION",
    "KERNEL",
    "NAME",
    "PARAMS",
    "PARAM_RANGES",
    "STREAM_FORM",
    "Controller",
    "SitsConfig",
    "run",
]

NAME = "sits"
DESCRIPTION = ("SITS adaptive: per-window entropy/P99 score switches recency vs ARC-style scan resistance, "
               "shadow-evaluated")

BEHAVIOURS = ("recency", "scan")
#: Its resumable form for the streaming replay (engine/stream.py finds it by this name).
STREAM_FORM = "sitsprof.policies.adaptive.sits_stream"


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
# Valid values of PARAMS (engine/params.py checks every entry point against them, with the reason).
PARAM_RANGES = {
    "window_s": ("(0, inf)", "the decision window in trace seconds; a window of 0 s holds no request"),
    "window_refs": ("int [1, inf) or none", "references per decision window (none: by time, or references / 64)"),
    "alpha": ("[0, 1]", "the entropy term's weight in the migration score; the P99 term gets 1 - alpha"),
    "score_threshold": ("[0, 1]", "the migration score (0..1) at which a window may migrate"),
    "margin": ("[0, 1]", "the shadow winner's lead, a share of the sampled references, needed to migrate"),
    "migrate_margin": ("[0, 1]", "the lead, a share of the sampled references, needed in the migrate cell"),
    "memory": ("[0, 1]", "the decay of the shadows' hit counts per window: 0 forgets at once, 1 never"),
    "initial": ("one of " + ", ".join(BEHAVIOURS), "the behaviour served before the first decision"),
    "sample_shift": ("int [0, 16] or none", "shadows sample 1/2^k of the blocks by the top 16 bits of their hash "
                                           "(none: the largest k that leaves 1024 slots)"),
    "threshold_windows": ("int [1, inf)", "consecutive breaching windows that fire the switch"),
    "threshold_budget_ms": ("(0, inf)", "the switch's time budget; a switch over it is rolled back"),
    "threshold_horizon_s": ("(0, inf)", "how far back, in trace seconds, earlier windows' P99 sets the threshold"),
}


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


def run(trace: Trace, capacity: int, offsets=None, **kwargs):
    """Replay `trace` through the SITS adaptive policy; returns the engine's SimResult with
    ``extra``: events, behaviour share, switches, cost-model summary, CTCCI.

    Keywords: calibration, model, miss (cost model); threshold=True (with threshold_windows,
    threshold_budget_ms, threshold_horizon_s) or gate (a threshold.ThresholdEngine): literal
    LIRS serves, the controller disarmed, until the engine hot-switches to the SITS cache;
    hit_out (receives the per-reference hit flags); the rest are SitsConfig fields. ``seconds``
    covers the whole run (cost model, shadows, controller), not only the cache.
    """
    offsets = trace.request_offsets if offsets is None else np.asarray(offsets, dtype=np.int64)
    hit, evictions, max_resident, seconds, extra = _replay(
        np.ascontiguousarray(trace.block, dtype=np.int32), offsets, int(trace.n_blocks), capacity,
        times=np.asarray(trace.time, dtype=np.float64), tokens=token_column(trace), trace=trace, **kwargs)
    return result_from_hits(trace, offsets, NAME, capacity, hit, evictions, max_resident, seconds, extra)


def _replay(block, offsets, n_blocks: int, capacity: int, times=None, tokens=None, trace: Trace | None = None,
            calibration=None, model: str = "qwen2-72b", miss: str = "recompute", gate=None, hit_out=None,
            threshold: bool = False, threshold_windows: int | None = None, threshold_budget_ms: float | None = None,
            threshold_horizon_s: float | None = None, **params):
    """The SITS run over plain arrays. `times` None: windows by reference count only, event
    times are reference indices, load 1. `tokens` None: every block is full. `trace` (when
    given) supplies model stacks to the cost model and enables the run summary (TTFT
    percentiles over every request, CTCCI)."""
    capacity = check_capacity(capacity)
    cfg = SitsConfig(**params)
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
    front: FrontBuffer | None = LirsBaseline(n_blocks, capacity) if gate is not None else None
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
