"""Process signals that must not skip cleanup.

Python turns SIGINT into KeyboardInterrupt, so `finally` blocks run; SIGTERM and SIGHUP
kill the process outright by default, which would leave locked clocks locked and a run
directory unmarked. `terminate_raises()` makes them exceptions too, and `signals_ignored()`
holds all three off while the cleanup itself runs, so a second Ctrl-C cannot cut it short.
`signals_deferred()` holds them too but delivers them when the block ends: for work that must
not be cut in half (marking a run finished) yet must not swallow the user's Ctrl-C.
Handlers can only be installed from the main thread; elsewhere both are no-ops.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

__all__ = ["Terminated", "signals_deferred", "signals_ignored", "terminate_raises"]


class Terminated(SystemExit):
    """Raised in the main thread by SIGTERM/SIGHUP; the exit status (`code`) is 128 + the signal
    number, and its text says which signal, for a run's meta.json `error`."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"terminated by signal {self.signum} ({signal.Signals(self.signum).name})"


def _raise_terminated(signum, frame):
    raise Terminated(signum)


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


_DEFERRED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Deferral:
    """The signals noted while deferred; `released()` lets them act at once for a while."""

    def __init__(self):
        self.caught: list[int] = []
        self._previous: dict = {}

    def _note(self, signum, frame):
        self.caught.append(signum)

    def _hold(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._note) for sig in _DEFERRED}

    def _let_go(self) -> None:
        previous, self._previous = self._previous, {}
        for sig, old in previous.items():
            signal.signal(sig, old)
        caught, self.caught = list(dict.fromkeys(self.caught)), []
        for sig in caught:  # through the handler now in place: KeyboardInterrupt, Terminated, ...
            signal.raise_signal(sig)

    @contextmanager
    def released(self):
        """Inside a deferral: signals act at once for the duration (any held so far first)."""
        try:
            self._let_go()
            yield
        finally:
            self._hold()


@contextmanager
def signals_deferred():
    """Hold SIGINT/SIGTERM/SIGHUP for the duration, then deliver them through the handlers the
    block started with (main thread only; elsewhere a no-op). Yields the deferral, whose
    `released()` lets signals through for a part of the block."""
    deferral = _Deferral()
    deferral._hold()
    try:
        yield deferral
    finally:
        deferral._let_go()
