"""Dynamic threshold engine: hot-switch from the baseline behaviour to SITS when P99 drifts up.

Per window the engine sees the window's P99 (ms, from the cost model) at trace time t:

- history: the P99 of earlier windows that ended within the last ``horizon_s`` (15 minutes
  of trace time by default);
- baseline = mean of that history; drift = its standard deviation / baseline, so the
  threshold baseline * (1 + drift) is mean + one standard deviation (at least two earlier
  windows are needed, else nothing breaches);
- a window whose P99 exceeds the threshold is a breach; ``windows`` (3) consecutive breaches
  fire the switch, and the count restarts after every attempt.

The switch uses double-buffered metadata: the back buffer is a copy of the live (front)
metadata prepared while the front keeps serving; its cost in *model time* is a dependent
walk over every list entry (resident and ghost), ``entries * entry_ns``, where ``entry_ns``
defaults to the calibration's HBM latency (P99 where measured, else P50). If that exceeds
``budget_ms`` (200 ms) the back buffer is discarded, the front (baseline) stays in service,
and a ``rollback`` and an ``alert`` event are logged; otherwise the buffers swap and the
SITS controller takes over (``switch`` event).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..reports.calibration import latency_ns, load_calibration
from .errors import PolicyEngineError



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

    def __post_init__(self):
        if self.windows < 1:
            raise PolicyEngineError(f"threshold windows {self.windows} must be at least 1")
        if self.budget_ms <= 0:
            raise PolicyEngineError(f"switch budget {self.budget_ms} ms must be positive")
        if self.entry_ns is None:
            cal = self.calibration if isinstance(self.calibration, dict) else load_calibration(self.calibration)
            self.entry_ns = latency_ns(cal, "hbm", "p99")

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
    def switch_cost_ms(self, cache) -> float:
        entries = int(np.sum(cache.sizes))
        return entries * float(self.entry_ns) * 1e-6

    def hot_switch(self, cache, t: float, window: int, events: list) -> bool:
        """Prepare the back buffer, then swap it in or roll back; True when SITS took over."""
        self.attempts += 1
        back = cache.snapshot()
        cost = self.switch_cost_ms(cache)
        self.last_switch_ms = cost
        base = {"time": float(t), "window": int(window), "switch_ms": round(cost, 3), "budget_ms": self.budget_ms}
        if cost > self.budget_ms:
            del back  # the front buffer never stopped serving: nothing to undo there
            self.rollbacks += 1
            events.append({"event": "rollback", **base, "to": "baseline"})
            events.append({"event": "alert", **base,
                           "message": f"hot switch needed {cost:.1f} ms of model time, over the {self.budget_ms:g} ms budget; rolled back"})
            return False
        cache.adopt(back)
        self.fired = True
        events.append({"event": "switch", **base, "from": "baseline", "to": "sits"})
        return True

    def observe(self, window: int, t: float, p99_ms: float, cache, events: list) -> bool:
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
