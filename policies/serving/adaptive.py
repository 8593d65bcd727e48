"""SITS and the dynamic threshold engine inside the serving replay, in simulated time.

The replay (scheduler.ReplayRun) runs in windows of `window_s` seconds of simulated time
(each ends at the first step boundary at or after the window's edge). Between windows the
SITS controller of adaptive/sits.py (`Controller`, its action matrix and migration score from
adaptive/signals.py) reads the window's signals from the replay itself and sets the `sits`
evictor's behaviour (evictors/sits.py: RECENCY or SCAN) for the next window:

- d, latency sensitivity: the P99 TTFT (ms, np.percentile's linear rule, as the replay's own
  summary) of the requests whose first token was sampled in the window. A window in which no
  first token came but requests wait is given the age of the oldest request still without one
  (a lower bound on its TTFT), so a stalled engine still reads as congested; a window with
  neither (idle) is skipped: no decision, nothing fed to the threshold engine.
- H, access-pattern entropy: signals.entropy_bits over the 256-bucket histogram
  (signals.count_buckets) of the full prompt block ids looked up by the requests first
  scheduled in the window.
- load: the window's arrivals per second over the run's mean arrival rate (adapts alpha).
- shadows: LRU and ARC (exactly, at the pool's capacity over the 1/2^k spatial sample of
  adaptive/shadows.py) replay the trace's references in arrival order once before the run;
  their hits per request are summed over the requests first scheduled in the window. The
  shadows see the workload's reuse, not the engine's pinning or timing: they say which order
  the blocks' reuse favours, the replay says when latency needs it.

With `threshold` (sits.py's `threshold=True`): the serving LIRS evictor (evictors/lirs.py) serves,
the controller disarmed, while threshold.ThresholdEngine reads each window's d (its breach /
drift rule, 3 consecutive breaches); when it fires, `ServingLirsFront` prices the hot switch
as threshold.py does (the metadata walk, S stack plus Q entries times the calibration's HBM
latency) and the LIRS front keeps serving for that long in simulated time while the back
buffer is built; the back buffer (`lirs_to_sits`: LIR blocks in S order -> T2, Q -> T1, NH ->
B1 ghosts while |T1|+|B1| <= capacity, p = |T1|, pin bits kept) is then swapped in, or, over
the budget (200 ms), dropped (rollback + alert events), LIRS serving on.
"""
from __future__ import annotations

import time

import numpy as np

from sitsprof.common.jit import njit

from ..adaptive.shadows import shadow_counts, shadow_shift
from ..adaptive.signals import count_buckets, entropy_bits, p99
from ..adaptive.sits import BEHAVIOURS, Controller, SitsConfig
from ..adaptive.threshold import ThresholdEngine
from ..classic.arc import RECENCY, SCAN
from ..classic.lirs import IN_Q, LIR
from ..errors import ServingReplayError
from .evictors import LIRS, SITS, lirs
from .evictors import new_state as new_evictor
from .evictors._lists import PINNED, unpark
from .evictors.arc import B1, T1, T2

__all__ = ["NIL", "WINDOW_S", "ServingLirsFront", "drive", "driver", "lirs_to_sits", "windowed"]

WINDOW_S = 10.0  # docs/serving-adaptive.md: why 10 s of simulated time
NIL = -1


# ---------------------------------------------------------------- LIRS -> SITS (the back buffer)


@njit(cache=True, inline="always")
def _append(A, q, x):
    """x at the tail (oldest end) of SITS list q, counted in its size."""
    unpark(A.prev, A.nxt, A.flag, A.head, A.tail, q, x)
    A.size[q] += 1


@njit(cache=True)
def _lirs_to_sits(L, A, capacity):
    """Fill the empty SITS state A (evictors/arc.py's) from the serving LIRS state L
    (evictors/lirs.py's): LIR blocks in stack-S order -> T2, Q (head first) -> T1, then Q's
    parked (pinned) blocks at T1's old end, NH (most recent first) -> B1 while |T1| + |B1| <=
    capacity; p = |T1|; pin bits kept."""
    lf, where, flag = L.lf, A.where, A.flag
    x = L.head[lirs.S]
    while x != NIL:
        if lf[x] & LIR:
            _append(A, T2, x)
            where[x] = T2
            flag[x] = L.flag[x] & PINNED
        x = L.nxt[x]
    x = L.head[lirs.Q]
    while x != NIL:
        _append(A, T1, x)
        where[x] = T1
        flag[x] = L.flag[x] & PINNED
        x = L.qn[x]
    for y in range(lf.shape[0]):  # parked Q blocks are off Q's links
        # IN_Q alone: a Q block whose S entry was pruned has lost RES (classic/lirs.py's prune
        # clears S_BITS) and is resident all the same; requiring RES left such pinned blocks
        # out of SITS, cached in the pool but in no list (found in issue 24's refactor: a
        # hit on one unlinked it from list NIL, i.e. B2's slot, and B2's size went negative)
        if lf[y] & IN_Q and where[y] == NIL:
            _append(A, T1, y)
            where[y] = T1
            flag[y] = L.flag[y] & PINNED
    x = L.head[lirs.NH]
    while x != NIL and A.size[T1] + A.size[B1] < capacity:
        _append(A, B1, x)
        where[x] = B1
        x = L.hn[x]
    A.v[0].p = float(A.size[T1])


def lirs_to_sits(S_lirs, n_ids: int, capacity: int):
    """A SITS evictor state (SCAN) holding every block the serving LIRS state holds."""
    A = new_evictor(SITS, n_ids, capacity)
    _lirs_to_sits(S_lirs.lirs, A.arc, np.int64(capacity))
    return A


class ServingLirsFront:
    """The replay's LIRS evictor as threshold.py's front buffer (front.FrontBuffer)."""

    front_name = "lirs"

    def __init__(self, run, capacity: int, gate: ThresholdEngine):
        self.run, self.capacity, self.gate = run, int(capacity), gate
        self._entries: int | None = None

    @property
    def evictions(self) -> int:
        return int(self.run.pool[3][3])

    def entries(self) -> int:
        """Metadata entries the switch walks: the S stack plus Q (frozen while it is built)."""
        if self._entries is not None:
            return self._entries
        c = self.run.S.lirs.v[0]
        return int(c.s_n + c.n_hir)

    def back_buffer(self):
        """LIRS serves on for the walk's priced time (entries x the HBM latency), then the
        SITS state is built from LIRS as it stands at the end of the walk."""
        self._entries = self.entries()
        walk_s = self._entries * float(self.gate.entry_ns) * 1e-9
        if not self.run.finished:
            self.run.advance(self.run.now + walk_s)
        return lirs_to_sits(self.run.S, len(self.run.S.lirs.prev), self.capacity)

    def swap(self, back):
        self.run.pid, self.run.S = SITS, back
        self._entries = None
        return self


# ---------------------------------------------------------------- the window signals


@njit(cache=True)
def _lookup_counts(ids, offsets, n_full, status, r0, r1, counts):
    """count_buckets over the full prompt blocks of requests r0..r1-1 (rejected ones skipped)."""
    m = 0
    for r in range(r0, r1):
        if status[r] != 3:  # scheduler.REJECTED (adaptive.py cannot import the scheduler: it drives it)
            m += count_buckets(ids, offsets[r], offsets[r] + n_full[r], 1, counts)
    return m


@njit(cache=True)
def _first_open(times, status, i, limit):
    """The first request from i (below limit) whose `times` entry is unset (< 0) and that was not
    rejected: requests before it have their first token (or first scheduling) already."""
    while i < limit and (times[i] >= 0 or status[i] == 3):  # scheduler.REJECTED
        i += 1
    return i


def drive(run, meta, window_s: float = WINDOW_S, threshold: bool = False, calibration=None, **params):
    """Run `run` (a scheduler.ReplayRun whose evictor is SITS, or LIRS with `threshold`) in
    windows of `window_s` simulated seconds with the SITS controller (and the threshold
    engine) between windows; returns the ReplayResult with `extra["sits"]`."""
    if not np.isfinite(window_s) or window_s <= 0:
        raise ServingReplayError(f"--window {window_s}: must be a positive number of simulated seconds (10)")
    knobs = {k[len("threshold_"):]: params.pop(k) for k in list(params) if k.startswith("threshold_")}
    knobs = {k: v for k, v in knobs.items() if v is not None}
    try:
        cfg = SitsConfig(window_s=float(window_s), **params)
    except TypeError as exc:
        raise ServingReplayError(f"sits: {exc}; the replay takes SitsConfig's fields") from None
    gate = ThresholdEngine(calibration=calibration, **knobs) if threshold else None
    start = time.perf_counter()
    rb = run.rb
    n = rb.n_requests
    capacity = meta["capacity"]
    # shadows: per request, LRU and ARC over the trace's references in arrival order
    k = shadow_shift(capacity) if cfg.sample_shift is None else int(cfg.sample_shift)
    n_ref_ids = int(rb.ref_ids.max()) + 1 if len(rb.ref_ids) else 1
    shadow = (shadow_counts(rb.ref_ids, n_ref_ids, capacity, k, np.ascontiguousarray(rb.ref_offsets, dtype=np.int64))
              if n else np.zeros((3, 0), dtype=np.int64))
    ctl = Controller(cfg, behaviour=BEHAVIOURS.index(cfg.initial))
    front = None
    if gate is not None:
        front = ServingLirsFront(run, capacity, gate)
    else:
        run.S.arc.v[0].behaviour = ctl.behaviour
    armed = gate is None
    arrival, t_first, t_sched, status = run.arrival, run.t_first, run.t_sched, run.status
    REJECTED = run.REJECTED  # noqa: N806 (the scheduler's status code)
    a0 = float(arrival[0]) if n else 0.0
    span = float(arrival[-1] - a0) if n else 0.0
    mean_rate = n / span if span > 0 else float("nan")
    served = {"recency": 0.0, "scan": 0.0, "lirs": 0.0}
    timeline = []  # (window, t, behaviour serving the window)
    lo_ft = 0  # first request without a first token (nor rejected)
    r_sch = 0  # requests first scheduled (or rejected) so far, in arrival (= FCFS) order
    windows = 0
    while not run.finished:
        t_prev = run.now
        base = max(t_prev, a0)
        w = int(np.floor((base - a0) / window_s))
        t_stop = a0 + (w + 1) * window_s
        serving = "lirs" if not armed else BEHAVIOURS[ctl.behaviour]
        nxt_prev = run.arrived
        t_now = run.advance(t_stop)
        windows += 1
        nxt = run.arrived
        # the window's first tokens: requests lo_ft..nxt-1 may have got one
        seg = slice(lo_ft, nxt)
        tf = t_first[seg]
        got = (tf > t_prev) & (tf <= t_now)
        ttft = (tf[got] - arrival[seg][got]) * 1e3
        lo_ft = int(_first_open(t_first, status, lo_ft, nxt))
        if len(ttft):
            d_ms = float(p99(ttft, len(ttft)))  # np.percentile(ttft, 99), compiled
        elif lo_ft < nxt:
            d_ms = (t_now - float(arrival[lo_ft])) * 1e3
        else:
            d_ms = None
        r_prev = r_sch
        r_sch = int(_first_open(t_sched, status, r_sch, nxt))
        if d_ms is None and r_sch == r_prev:
            continue  # an idle window: no decision
        served[serving] += t_now - t_prev
        timeline.append((w, t_now, serving))
        counts = np.zeros(256, dtype=np.int64)
        m = _lookup_counts(rb.ids, rb.offsets, rb.n_full, status, r_prev, r_sch, counts)
        h_bits = float(entropy_bits(counts, m)) if m else 0.0
        took = status[r_prev:r_sch] != REJECTED
        sums = shadow[:, r_prev:r_sch][:, took].sum(axis=1) if r_sch > r_prev else np.zeros(3, dtype=np.int64)
        dur = t_now - t_prev
        load = ((nxt - nxt_prev) / dur) / mean_rate if dur > 0 and mean_rate > 0 else 1.0
        d = 0.0 if d_ms is None else d_ms
        if gate is not None and not armed:
            armed = gate.observe(w, t_now, d, front, ctl.events)
            if armed:
                run.S.arc.v[0].behaviour = ctl.behaviour
        ctl.decide(w, t_now, h_bits, d, load, {RECENCY: int(sums[1]), SCAN: int(sums[2])}, int(sums[0]), armed)
        if armed:
            run.S.arc.v[0].behaviour = ctl.behaviour
    seconds = time.perf_counter() - start
    res = run.result(meta, seconds)
    total = sum(served.values())
    res.extra["sits"] = {
        "window_s": float(window_s), "windows": windows, "decided_windows": len(timeline),
        "switches": ctl.switches, "sample_shift": k, "threshold": gate.summary() if gate is not None else None,
        "behaviour_share": {b: (v / total if total > 0 else 0.0) for b, v in served.items()
                            if b != "lirs" or gate is not None},
        "timeline": [{"window": w, "time_s": round(float(t), 6), "behaviour": b} for w, t, b in timeline],
        "events": ctl.events,
    }
    return res


def driver(window_s: float = WINDOW_S, threshold: bool = False, calibration=None, **params):
    """A scheduler.run_replay driver running the SITS controller (and the threshold engine)."""
    def run_it(run, meta):
        if threshold and run.pid != LIRS:
            raise ServingReplayError("the threshold engine starts from the LIRS evictor")
        return drive(run, meta, window_s=window_s, threshold=threshold, calibration=calibration, **params)
    return run_it


def windowed(window_s: float):
    """A driver that only cuts the run into windows (no controller): for the resume test and
    the bench's cost of windows."""
    def run_it(run, meta):
        start = time.perf_counter()
        a0 = float(run.arrival[0]) if len(run.arrival) else 0.0
        while not run.finished:
            w = np.floor((max(run.now, a0) - a0) / window_s)
            run.advance(a0 + (w + 1) * window_s)
        return run.result(meta, time.perf_counter() - start)
    return run_it
