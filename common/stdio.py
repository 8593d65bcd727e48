"""Results written to standard output are checked like files: nothing lost in silence.

`--json > full-disk/out.json` used to exit 0 with a truncated document (the failed write was
the interpreter's last flush, after `main` had returned), and a table printed onto a full disk
ended in "internal error: OSError". Here, for the duration of a command, `sys.stdout` is a thin
wrapper whose failed write or flush is a `StdoutError` (an OutputError: one line, exit 2), and
`finish()` flushes it while errors can still be reported. After a failure whatever is still
buffered is sent to /dev/null, so the interpreter's own flush at exit cannot print a second
message ("Exception ignored ... OSError").

A closed pipe (`sitsprof ... | head`) is not an error: EPIPE stays a BrokenPipeError, which the
CLI ends quietly with status 0, as `head`'s reader expects.
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager

from sitsprof.common.errors import OutputError

__all__ = ["NAME", "CheckedStream", "StdoutError", "checked_stdout", "discard_buffered", "finish"]

NAME = "standard output"


class StdoutError(OutputError):
    """Standard output could not take the results (full disk, quota, /dev/full, I/O error)."""

    action = "write results to"


def _checked(call, *args, stream=None):
    try:
        return call(*args)
    except BrokenPipeError:
        if stream is not None:
            stream.failed = True
        raise
    except OutputError:
        raise
    except OSError as exc:
        if stream is not None:
            stream.failed = True
        error = StdoutError.from_os_error(NAME, exc, action=StdoutError.action)
        raise error from exc


class CheckedStream:
    """`stream` whose write/flush failures are StdoutError; everything else is the stream's own."""

    def __init__(self, stream):
        self._stream = stream
        self.failed = False  # a write or flush failed (and was reported by whoever caught it)

    @property
    def wrapped(self):
        return self._stream

    def write(self, text):
        return _checked(self._stream.write, text, stream=self)

    def writelines(self, lines):
        return _checked(self._stream.writelines, lines, stream=self)

    def flush(self):
        return _checked(self._stream.flush, stream=self)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def discard_buffered(stream=None) -> None:
    """Point the stream's file descriptor at /dev/null: what is still buffered, and the flush at
    exit, go nowhere instead of failing a second time. A stream with no descriptor (a test's
    capture) is left as it is."""
    stream = stream if stream is not None else sys.stdout
    stream = getattr(stream, "wrapped", stream)
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


@contextmanager
def checked_stdout():
    """`sys.stdout` checked for the duration (see the module docstring); the previous one after."""
    previous = sys.stdout
    if previous is None or isinstance(previous, CheckedStream):
        yield previous
        return
    sys.stdout = CheckedStream(previous)
    try:
        yield sys.stdout
    finally:
        if sys.stdout.__class__ is CheckedStream:
            sys.stdout = previous


def finish() -> None:
    """Flush standard output now, while a failure can still be reported (StdoutError or
    BrokenPipeError); after either, the rest is discarded. A stream that already failed (the
    command reported it) is only discarded."""
    stream = sys.stdout
    if stream is None:
        return
    if getattr(stream, "failed", False):
        discard_buffered(stream)
        return
    try:
        stream.flush() if isinstance(stream, CheckedStream) else _checked(stream.flush)
    except OSError:
        discard_buffered(stream)
        raise
