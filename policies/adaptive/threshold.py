"""Dynamic threshold engine: hot-switch from LIRS to SITS when P99 drifts up.

The baseline is literal LIRS: `LirsBaseline` serves windows with lirs.replay_window, the
same loop as the LIRS kernel (libCacheSim parity), resumed window by window.

Per window the engine sees the window's P99 (ms, from the cost model) at trace time t:

- history: the P99 of earlier windows that ended within the last ``horizon_s`` (15 minutes
  of trace time by default);
- baseline = mean of that history; drift = its standard deviation / baseline, so the
  threshold baseline * (1 + drift) is mean + one standard deviation (at least two earlier
  windows are needed, else nothing breaches);
- a window whose P99 exceeds the threshold is a breach; ``windows`` (3) consecutive breaches
  fire the switch, and the count restarts after every attempt.

The switch uses double-buffered metadata: the back buffer is prepared from the live (front)
metadata while the front keeps serving. From LIRS it is the SITS cache (ARC's lists, see
hybrid.py) built by `lirs_to_arc`: LIR blocks in stack-S order become T2 (frequent), the
resident HIR blocks of queue Q become T1 (recent), the non-resident HIR ids of NH become B1
ghosts (most recent first, while |T1|+|B1| <= capacity), p = |T1|; every resident block stays
resident, so SITS starts warm. Its cost in *model time* is a dependent walk over every
metadata entry (LIRS: the S stack plus Q), ``entries * entry_ns``, where ``entry_ns``
defaults to the calibration's HBM latency (P99 where measured, else P50). If that exceeds
``budget_ms`` (200 ms) the back buffer is discarded, the front (LIRS) stays in service, and a
``rollback`` and an ``alert`` event are logged; otherwise the buffers swap, ``live`` is the
SITS cache and the SITS controller takes over (``switch`` event). (A SITS cache can be the
front too: its back buffer is then a copy of its own arrays.)
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from sitsprof.calibration import Calibration
from sitsprof.common.jit import njit

from ..classic._structs import NIL, push_tail_s
from ..classic.arc import _B1, _T1, _T2
from ..classic.lirs import _HIRS, _MAXRES, _NHH, _QH, _SH, _SN, LIR, new_state, replay_window
from ..errors import PolicyEngineError
from .front import FrontBuffer
from .hybrid import HybridCache

__all__ = ["LirsBaseline", "ThresholdEngine", "lirs_to_arc"]


class LirsBaseline:
    """The front buffer before a switch: LIRS metadata, served window by window."""

    def __init__(self, n_blocks: int, capacity: int, hir_ratio: float = 0.01):
        self.n_blocks, self.capacity, self.hir_ratio = int(n_blocks), int(capacity), float(hir_ratio)
        self.links, self.qp, self.qn, self.fl, self.st = new_state(self.n_blocks)
        self.evictions = 0

    def replay(self, block, lo, hi, hit) -> int:
        e = int(replay_window(block, lo, hi, self.links, self.qp, self.qn, self.fl, self.st, self.capacity,
                              self.hir_ratio, hit))
        self.evictions += e
        return e

    @property
    def max_resident(self) -> int:
        return int(self.st[_MAXRES])

    def entries(self) -> int:
        """Metadata entries a switch walks: the S stack plus queue Q."""
        return int(self.st[_SN] + self.st[_HIRS])

    def back_buffer(self) -> HybridCache:
        """The SITS cache built from this LIRS state (the front keeps serving meanwhile)."""
        back = HybridCache(self.n_blocks, self.capacity)
        lirs_to_arc(self.links, self.qn, self.fl, self.st, self.capacity, back.prev, back.nxt, back.where,
                    back.ends, back.sizes, back.state)
        return back

    def swap(self, back: HybridCache) -> HybridCache:
        """After a switch the back buffer (a hybrid.HybridCache) is the live cache."""
        return back


@njit(cache=True)
def lirs_to_arc(links, qn, fl, st, capacity, prev, nxt, where, ends, sizes, state):
    """Fill empty ARC lists (arc.new_state) from LIRS metadata: LIR blocks in S order -> T2,
    Q -> T1, NH -> B1 (while |T1|+|B1| <= capacity); p = |T1|."""
    sn, nn = links[:, 1], links[:, 3]
    h1 = t1 = h2 = t2 = hb1 = tb1 = np.int32(NIL)
    n1 = n2 = nb1 = 0
    x = np.int32(st[_SH])
    while x != NIL:
        if fl[x] & LIR:
            h2, t2 = push_tail_s(prev, nxt, h2, t2, x)
            where[x] = _T2
            n2 += 1
        x = sn[x]
    x = np.int32(st[_QH])
    while x != NIL:
        h1, t1 = push_tail_s(prev, nxt, h1, t1, x)
        where[x] = _T1
        n1 += 1
        x = qn[x]
    x = np.int32(st[_NHH])
    while x != NIL and n1 + nb1 < capacity:
        hb1, tb1 = push_tail_s(prev, nxt, hb1, tb1, x)
        where[x] = _B1
        nb1 += 1
        x = nn[x]
    ends[0], ends[1], ends[2], ends[3], ends[4], ends[5] = h1, t1, h2, t2, hb1, tb1
    sizes[0], sizes[1], sizes[2], sizes[3] = n1, n2, nb1, 0
    state[0] = float(n1)
    state[1] = float(st[_MAXRES])



def _front_name(cache) -> str:
    """What a front buffer serves, for the event log (a front may name itself: `front_name`)."""
    return getattr(cache, "front_name", None) or ("lirs" if isinstance(cache, LirsBaseline) else "baseline")


@dataclass
class ThresholdEngine:
    windows: int = 3
    horizon_s: float = 900.0
    budget_ms: float = 200.0
    entry_ns: float | None = None
    calibration: object = None
    history: deque = field(default_factory=deque)
    breaches: int = 0
    fired: bool = False
    attempts: int = 0
    rollbacks: int = 0
    last_switch_ms: float | None = None
    live: object = None  # the cache serving after a successful switch

    def __post_init__(self):
        if self.windows < 1:
            raise PolicyEngineError(f"threshold windows {self.windows} must be at least 1")
        if self.budget_ms <= 0:
            raise PolicyEngineError(f"switch budget {self.budget_ms} ms must be positive")
        if self.entry_ns is None:
            self.entry_ns = Calibration.of(self.calibration).latency_ns("hbm", "p99")

    # -- the threshold -------------------------------------------------------------------
    def threshold(self) -> float | None:
        """baseline * (1 + drift) over the current history, or None with fewer than 2 windows."""
        if len(self.history) < 2:
            return None
        values = np.array([v for _, v in self.history])
        baseline = float(values.mean())
        drift = float(values.std()) / baseline if baseline > 0 else 0.0
        return baseline * (1.0 + drift)

    def breach(self, t: float, p99_ms: float) -> tuple[bool, float | None]:
        """Record one window; returns (fire now?, the threshold it was compared with)."""
        while self.history and self.history[0][0] < t - self.horizon_s:
            self.history.popleft()
        limit = self.threshold()
        breached = limit is not None and p99_ms > limit
        self.breaches = self.breaches + 1 if breached else 0
        self.history.append((t, p99_ms))
        if self.breaches >= self.windows:
            self.breaches = 0
            return True, limit
        return False, limit

    # -- the switch ------------------------------------------------------------------------
    def switch_cost_ms(self, cache: FrontBuffer) -> float:
        return cache.entries() * float(self.entry_ns) * 1e-6

    def hot_switch(self, cache: FrontBuffer, t: float, window: int, events: list) -> bool:
        """Prepare the back buffer, then swap it in or roll back; True when SITS took over
        (then `live` is the cache that serves)."""
        self.attempts += 1
        back = cache.back_buffer()
        cost = self.switch_cost_ms(cache)
        self.last_switch_ms = cost
        base = {"time": float(t), "window": int(window), "switch_ms": round(cost, 3), "budget_ms": self.budget_ms}
        if cost > self.budget_ms:
            del back  # the front buffer never stopped serving: nothing to undo there
            self.rollbacks += 1
            events.append({"event": "rollback", **base,
                           "to": _front_name(cache)})
            events.append({"event": "alert", **base,
                           "message": f"hot switch needed {cost:.1f} ms of model time, over the "
                                      f"{self.budget_ms:g} ms budget; rolled back"})
            return False
        self.live = cache.swap(back)
        self.fired = True
        events.append({"event": "switch", **base, "from": _front_name(cache),
                       "to": "sits"})
        return True

    def observe(self, window: int, t: float, p99_ms: float, cache: FrontBuffer, events: list) -> bool:
        """Feed one window; returns True once the SITS controller is in charge."""
        if self.fired:
            return True
        fire, limit = self.breach(t, p99_ms)
        if limit is not None and p99_ms > limit:
            events.append({"event": "breach", "time": float(t), "window": int(window), "p99_ms": round(p99_ms, 3),
                           "threshold_ms": round(limit, 3), "consecutive": self.breaches or self.windows})
        if not fire:
            return False
        return self.hot_switch(cache, t, window, events)

    def summary(self) -> dict:
        return {"fired": self.fired, "attempts": self.attempts, "rollbacks": self.rollbacks,
                "last_switch_ms": self.last_switch_ms, "entry_ns": self.entry_ns,
                "windows": self.windows, "horizon_s": self.horizon_s, "budget_ms": self.budget_ms}
