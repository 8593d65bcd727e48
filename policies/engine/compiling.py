"""Numba compiles as they happen, so a first run can say why it is slow.

The kernels are compiled on their first call and cached beside their modules (numba's
``cache=True``: ``__pycache__/*.nbi`` and ``*.nbc``); a later run loads them in milliseconds.
A compile happens only on a cache miss (first run, edited source, another CPU), and numba
announces each one as a ``numba:compile`` event. `watch_compiles(on_start, on_end)` calls
``on_start(name)`` when an outermost compile begins and ``on_end(name, seconds)`` when it ends
(nested compiles of the functions it calls are part of it); `name` is the compiled function,
``module.function``.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sitsprof.common.jit import interpreted

__all__ = ["FIRST_RUN_NOTE", "watch_compiles"]

FIRST_RUN_NOTE = "compiling kernels (first run only)"


def _name(event) -> str:
    dispatcher = (getattr(event, "data", None) or {}).get("dispatcher")
    func = getattr(dispatcher, "py_func", None)
    if func is None:
        return "kernel"
    return f"{func.__module__.rsplit('.', 1)[-1]}.{func.__qualname__}"


@contextmanager
def watch_compiles(on_start: Callable[[str], None] | None = None,
                   on_end: Callable[[str, float], None] | None = None) -> Iterator[dict]:
    """Report numba compiles while the block runs; yields a dict counting them (`count`, `seconds`).
    Kernels interpreted (common/jit.py) compile nothing: then numba is not imported for this."""
    stats = {"count": 0, "seconds": 0.0}
    if interpreted():
        yield stats
        return
    from numba.core import event

    depth = [0]
    started = [0.0]

    class _Listener(event.Listener):
        def on_start(self, ev):
            depth[0] += 1
            if depth[0] == 1:
                started[0] = time.perf_counter()
                if on_start is not None:
                    on_start(_name(ev))

        def on_end(self, ev):
            depth[0] -= 1
            if depth[0] == 0:
                seconds = time.perf_counter() - started[0]
                stats["count"] += 1
                stats["seconds"] += seconds
                if on_end is not None:
                    on_end(_name(ev), seconds)

    with event.install_listener("numba:compile", _Listener()):
        yield stats
