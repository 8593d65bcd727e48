"""Did the replica keep up? A replay's latencies describe a cache only while the engine serves
requests as fast as they arrive; past that they describe a queue that grows with the trace's
length, and comparing policies there compares queues.

Two measures over the run (`measure(res)`), both shares of the arrival rate:

* **served share**: completed requests per second over the run (first arrival to the last
  step) over requests arriving per second (first to last arrival). An engine that keeps up
  finishes within a few request lifetimes of the last arrival: on an hour of trace the share
  is within a few percent of 1; an overloaded one drains its backlog long after.
* **queue growth**: the waiting queue (requests arrived and not yet first scheduled) at the
  last arrival minus at the first tenth of the arrival window, over the requests that arrived
  in between: the share of arrivals the queue absorbed instead of the engine. A replica that
  keeps up admits each request within a step or two however long it then runs, so its queue
  stays near empty; one that does not (too little compute, or a pool too small for the
  requests in flight) holds a queue that grows with the trace.

Saturated when the queue absorbed more than 1 - KEEPS_UP (5%) of the arrivals
and grew by at least MIN_GROWTH requests. The served share is reported, not tested: on a short
trace, or a replica a router gave a handful of requests, the last requests' own lifetimes
after the last arrival lower it though nothing queued. A replay whose requests all arrive at
once (no arrival rate) or come from a closed loop (`--concurrency`: a client waits for its answer, so no
queue can grow) has no rate to keep up with: `saturated` is None and `why` says so.
"""
from __future__ import annotations

import numpy as np

__all__ = ["KEEPS_UP", "MIN_GROWTH", "flag_text", "measure", "merged", "saturation_lines"]

#: a replica keeps up when its queue absorbs at most 1 - KEEPS_UP of the arrivals
KEEPS_UP = 0.95
#: fewer requests than this of queue growth is noise (a replica given a handful of requests)
MIN_GROWTH = 3


def measure(res) -> dict:
    """`saturated` (True, False or None) and `saturation` (the figures and why) of one
    scheduler.ReplayResult."""
    arrival = np.asarray(res.arrival, dtype=np.float64)
    n = len(arrival)
    done = res.t_done >= 0  # finished (a rejected or unfinished request has none)
    t0 = float(arrival.min()) if n else 0.0
    t_last = float(arrival.max()) if n else 0.0
    closed = bool(res.extra.get("closed_loop"))
    if n < 2 or not np.isfinite(t_last) or t_last - t0 <= 0 or closed:
        why = ("closed loop: each client waits for its answer, no queue can grow" if closed
               else "every request arrives at once: a batch, with no arrival rate to keep up with")
        return {"saturated": None, "saturation": {"why": why}}
    arrival_rate = (n - 1) / (t_last - t0)  # n arrivals span n - 1 gaps
    run_s = max(float(res.end_s) - t0, 1e-12)
    completed_rate = int(done.sum()) / run_s
    served = completed_rate / arrival_rate
    # waiting = arrived and not yet first scheduled, at the last arrival and early in the window:
    # a replica that keeps up admits each request within a step or two, so its queue stays near
    # empty however long the requests then run; one that does not, a queue that grows
    sched = np.where(res.t_sched >= 0, res.t_sched, np.inf)
    early = t0 + 0.1 * (t_last - t0)

    def waiting(t):  # arrived before t (not at t: the last arrival is not yet waiting at its own instant)
        before = arrival < t
        return int(np.sum(before) - np.sum(sched[before] <= t))

    grew = waiting(t_last) - waiting(early)
    arrived = int(np.sum((arrival >= early) & (arrival < t_last)))
    absorbed = grew / max(arrived, 1)
    growth = grew / (t_last - early)  # requests per second
    saturated = bool(absorbed > 1 - KEEPS_UP and grew >= MIN_GROWTH)
    if saturated:
        why = (f"the waiting queue grew by {grew:,} requests ({100 * absorbed:.0f}% of the arrivals; "
               f"{waiting(t_last):,} waiting at the last arrival); served {completed_rate:.3g} requests/s of "
               f"{arrival_rate:.3g} arriving ({100 * served:.0f}%)")
    else:
        why = (f"kept up: {waiting(t_last):,} waiting at the last arrival; served {100 * served:.0f}% of the "
               f"{arrival_rate:.3g} requests/s arriving over the run")
    return {"saturated": saturated,
            "saturation": {"arrival_rate": arrival_rate, "completed_rate": completed_rate, "served_share": served,
                           "queue_growth_per_s": growth, "queue_absorbed_share": absorbed,
                           "waiting_at_last_arrival": waiting(t_last), "why": why}}


def merged(rows: list[dict]) -> dict:
    """The aggregate row's flag over its instances: saturated when any instance is (its share
    of the traffic queues), None when none has a rate."""
    flags = [r.get("saturated") for r in rows]
    if any(f is True for f in flags):
        bad = [r.get("instance") for r in rows if r.get("saturated")]
        return {"saturated": True, "saturation": {"why": f"instance(s) {', '.join(map(str, bad))} saturated"}}
    if flags and all(f is False for f in flags):
        return {"saturated": False, "saturation": {"why": "every instance kept up"}}
    return {"saturated": None, "saturation": {"why": "no arrival rate"}}


def saturation_lines(rows: list[dict]) -> list[str]:
    """Lines under a table: the policy comparisons a saturated replica spoils."""
    bad = [r for r in rows if r.get("saturated")]
    by_pool: dict[int, set] = {}
    for r in rows:
        by_pool.setdefault(r["capacity"], set()).add(r["policy"])
    return [f"comparing {', '.join(sorted(by_pool[cap]))} at {cap:,} blocks on a saturated replica: its latencies "
            "measure its queue, not its cache (the fewest replicas that keep up: policy plan)"
            for cap in sorted({r["capacity"] for r in bad}) if len(by_pool[cap]) > 1]


def flag_text(row: dict) -> str:
    """The table's 'kept up' cell."""
    s = row.get("saturated")
    if s is None:
        return "-"
    if not s:
        return "yes"
    share = (row.get("saturation") or {}).get("served_share")
    return f"NO {100 * share:.0f}%" if share is not None else "NO"
