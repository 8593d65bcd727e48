"""A serving replay in short compiled calls, so it can be followed and stopped.

The scheduler kernel (`scheduler.replay`) is one numba call that runs until simulated time
reaches `t_stop`; Python acts on a signal (Ctrl-C, SIGTERM) only when that call returns, so a
whole-trace call left Ctrl-C waiting 1-20 s (issue 21). `advance` cuts every `ReplayRun.advance`
into calls of about `CHUNK_WALL_S` wall seconds each (their simulated length adapted call by
call): the kernel resumes exactly where it stopped (its state lives in arrays), so the replay is
the one-call replay, request for request, and between two calls Python raises the pending
KeyboardInterrupt, checks a stop flag, and reports progress.

Progress goes to the `Watch` installed with `watching(watch)` (the CLI's progress bar or lines;
a context variable, so the engine's signatures stay as they are): `started(meta, trace_end)`
when a replay begins, `advanced(now, trace_end)` after each call (simulated seconds reached, of
the last arrival's time), `finished(meta, seconds)` when it is done. Without a watch the calls
are cut the same way and nobody is told.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = [
    "CHUNK_WALL_S",
    "MIN_CHUNK_S",
    "Stopped",
    "Watch",
    "advance",
    "current",
    "finished",
    "started",
    "trace_end",
    "watching",
]

#: Wall seconds one compiled call aims at: Ctrl-C is acted on within about this (and one step).
CHUNK_WALL_S = 0.1
#: The shortest chunk of simulated time (a step lasts milliseconds at least).
MIN_CHUNK_S = 1e-3


class Stopped(KeyboardInterrupt):
    """The stop flag was set (`request_stop`): the replay ends between two calls like Ctrl-C."""


class Watch:
    """What a replay reports; every method a no-op here (override what you show)."""

    stop = False

    def started(self, meta: dict, trace_end: float) -> None:
        """A replay of `meta['policy']` at `meta['capacity']` blocks begins."""

    def advanced(self, now: float, trace_end: float) -> None:
        """The replay reached simulated time `now` (s) of `trace_end` (the last arrival, s)."""

    def finished(self, meta: dict, seconds: float) -> None:
        """The replay is done, in `seconds` of wall time."""


_current: ContextVar[Watch | None] = ContextVar("sitsprof_replay_watch", default=None)


@contextmanager
def watching(watch: Watch):
    """Report every replay run in the block to `watch`."""
    token = _current.set(watch)
    try:
        yield watch
    finally:
        _current.reset(token)


def current() -> Watch | None:
    return _current.get()


def trace_end(arrival) -> float:
    return float(arrival.max()) if len(arrival) else 0.0


def started(meta: dict, arrival) -> None:
    w = _current.get()
    if w is not None:
        w.started(meta, trace_end(arrival))


def finished(meta: dict, seconds: float) -> None:
    w = _current.get()
    if w is not None:
        w.finished(meta, seconds)


def advance(run, t_stop: float, call) -> float:
    """`call(t)` (one compiled scheduler call up to simulated time t; returns the time reached)
    repeated in chunks of about CHUNK_WALL_S wall seconds until `t_stop` or the end of the
    trace; returns the time reached, as one `call(t_stop)` would."""
    w = _current.get()
    end = trace_end(run.arrival)
    chunk = getattr(run, "_chunk_s", None)
    if chunk is None:
        span = end - (float(run.arrival.min()) if len(run.arrival) else 0.0)
        chunk = max(span / 1000.0, 1e-3)
    now = run.now
    while True:
        stop = min(t_stop, now + chunk)
        began = time.perf_counter()
        reached = call(stop)
        took = time.perf_counter() - began
        if w is not None:
            if w.stop:
                raise Stopped()
            w.advanced(reached, end)
        if reached < stop or reached >= t_stop:  # done (or stalled), or at the caller's stop
            run._chunk_s = chunk
            return reached
        if took < CHUNK_WALL_S / 4 or reached <= now:  # quick, or no step fitted in the chunk: longer
            chunk *= 2.0
        elif took > CHUNK_WALL_S:
            chunk = max(chunk * max(0.25, CHUNK_WALL_S / took), MIN_CHUNK_S)
        now = reached
