"""Process signals that must not skip cleanup.

Python turns SIGINT into KeyboardInterrupt, so `finally` blocks run; SIGTERM and SIGHUP
kill the process outright by default, which would leave locked clocks locked and a run
directory unmarked. `terminate_raises()` makes them exceptions too, and `signals_ignored()`
holds all three off while the cleanup itself runs, so a second Ctrl-C cannot cut it short.
Handlers can only be installed from the main thread; elsewhere both are no-ops.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


class _Terminated(SystemExit):
    """Raised in the main thread by SIGTERM/SIGHUP; the exit status is 128 + the signal number.

    Its name is part of a run's meta.json (`error: "_Terminated: 143"`), so it stays."""


def _raise_terminated(signum, frame):
    raise _Terminated(128 + signum)


@contextmanager
def _signal_handlers(handler, signals):
    """`handler` for `signals` for the duration, then the previous handlers again (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def terminate_raises():
    """Turn SIGTERM and SIGHUP into an exception for the duration (main thread only)."""
    return _signal_handlers(_raise_terminated, (signal.SIGTERM, signal.SIGHUP))


def signals_ignored():
    """Hold off SIGINT/SIGTERM/SIGHUP for the duration (main thread only)."""
    return _signal_handlers(signal.SIG_IGN, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
