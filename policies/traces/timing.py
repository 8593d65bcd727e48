"""Trace time: units, the guess where a format does not say, and arrival order.

Every reader ends its timestamps here, so a unit is never taken silently:

- `to_seconds(values, unit)` scales raw stamps by `UNITS` (s, ms, us, ns).
- `choose_unit(values, source, declared, given)`: the user's `--time-unit` when given, else
  the unit the format declares (Mooncake and the request format: ms; Bailian: s;
  oracleGeneral: s, libCacheSim's clock), else a guess from the magnitude (`guess_unit`),
  announced as a `TraceWarning` naming the guess and the option when the guess is not the
  format's documented default or could be either (CSV: seconds by its documentation).
- Timestamps written as strings of digits (the form of traces whose nanosecond counts pass
  JSON's exact integers, 2**53) are integer nanoseconds unless `--time-unit` says otherwise:
  `stamp_problem` validates a JSON stamp, `stamp_seconds` converts a list of them.
- `out_of_order(trace)` counts the requests that arrive before the one ahead of them;
  `sort_by_time(trace)` reorders whole requests by arrival, stably (ties keep file order),
  with block ids re-densified in the new order of first appearance.

Warnings are `TraceWarning`s (Python's `warnings`), which the command line prints as one
`sitsprof: warning:` line each; library callers can filter or record them.
"""
from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np

from ..errors import TraceFormatError

__all__ = [
    "INT64_MAX",
    "STRING_UNIT",
    "UNITS",
    "UNIT_NAMES",
    "TraceWarning",
    "check_unit",
    "choose_unit",
    "guess_unit",
    "out_of_order",
    "out_of_order_message",
    "request_starts",
    "sort_by_time",
    "stamp_problem",
    "stamp_seconds",
    "to_seconds",
    "warn",
    "warn_out_of_order",
]

#: Units per second of each `--time-unit` choice (stamps are divided by it: exact for ms, as x / 1000).
UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}
UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
#: The unit of a timestamp written as a string of digits.
STRING_UNIT = "ns"
INT64_MAX = 2**63 - 1
#: Absolute (epoch) stamps fall in [1e8, 1e10) seconds: from 1973 to 2286.
_EPOCH_LO, _EPOCH_HI = 1e8, 1e10
#: A relative trace is guessed to span at most this many seconds (11.6 days).
_SPAN_MAX_S = 1e6
#: Whole-number stamps spanning more than this could be seconds or milliseconds alike.
_AMBIGUOUS_SPAN = 1e4


class TraceWarning(UserWarning):
    """Something about a trace that was read the way the message says, not refused."""


def warn(message: str) -> None:
    warnings.warn(message, TraceWarning, stacklevel=3)


def check_unit(unit: str | None) -> str | None:
    """`unit` lower-cased when it is one of `UNITS` (None passes), else a TraceFormatError."""
    if unit is None:
        return None
    key = str(unit).strip().lower()
    if key not in UNITS:
        raise TraceFormatError("--time-unit", f"unknown time unit {unit!r}", fix="use s, ms, us or ns")
    return key


def to_seconds(values, unit: str) -> np.ndarray:
    """`values` (raw stamps) in seconds, float64."""
    return np.asarray(values, dtype=np.float64) / UNITS[unit]


def guess_unit(values) -> tuple[str, bool, str]:
    """(unit, sure, why) from the stamps' magnitude: epoch-like stamps by which unit puts them
    between 1973 and 2286, trace-relative ones by which unit makes the span at most 11.6 days.
    `sure` is False where whole numbers spanning over 10^4 could be seconds or milliseconds."""
    v = np.asarray(values, dtype=np.float64)
    if not len(v):
        return "s", True, "no timestamps"
    lo, hi = float(v.min()), float(v.max())
    for unit, per_s in UNITS.items():
        if _EPOCH_LO <= lo / per_s < _EPOCH_HI:
            return unit, True, f"the first stamp {lo:.6g} is a date in {UNIT_NAMES[unit]} since 1970"
    span = hi - lo
    for unit, per_s in UNITS.items():
        if span / per_s <= _SPAN_MAX_S:
            whole = bool(np.all(v == np.floor(v)))
            sure = not (unit == "s" and whole and span > _AMBIGUOUS_SPAN)
            return unit, sure, f"they span {span:.6g}, {span / per_s / 3600:.3g} h in {UNIT_NAMES[unit]}"
    return "ns", False, f"they span {span:.6g}"


def choose_unit(values, source, declared: str | None = None, given: str | None = None,
                default: str = "s") -> str:
    """The unit to read `values` in (module docstring); warns when it is a guess worth saying."""
    given = check_unit(given)
    if given is not None:
        return given
    if declared is not None:
        return declared
    unit, sure, why = guess_unit(values)
    if unit != default or not sure:
        warn(f"{source}: timestamps read as {UNIT_NAMES[unit]}, a guess ({why}); "
             f"pass --time-unit s|ms|us|ns to set the unit")
    return unit


def stamp_problem(name: str, value) -> str | None:
    """Why `value` is not a usable JSON timestamp (a finite number >= 0, or a string of
    digits: integer nanoseconds), or None."""
    if type(value) is str:
        text = value.strip()
        if not text.isascii() or not text.isdigit():
            return f"{name} must be a number, or nanoseconds as a string of digits, got {_shown(value)}"
        if len(text) > 19 or int(text) > INT64_MAX:
            return f"{name} {_shown(value)} is beyond the 64-bit range of a time in nanoseconds"
        return None
    if not (type(value) is int or (type(value) is float and math.isfinite(value))):
        return f"{name} must be a number (or nanoseconds as a string of digits), got {_shown(value)}"
    if value < 0:
        return f"negative {name} {_shown(value)}"
    if value > INT64_MAX:
        return f"{name} {_shown(value)} is beyond the 64-bit range of a timestamp"
    return None


def stamp_seconds(stamps: list, unit: str, given: str | None = None) -> np.ndarray:
    """Seconds of each JSON stamp: numbers in `unit`, digit strings in nanoseconds (both in
    `given` when the user set --time-unit)."""
    given = check_unit(given)
    number_unit = given or unit
    if not any(type(s) is str for s in stamps):
        return to_seconds(stamps, number_unit)
    string_per_s = UNITS[given or STRING_UNIT]
    per_s = UNITS[number_unit]
    return np.fromiter(((int(s) / string_per_s) if type(s) is str else s / per_s for s in stamps),
                       dtype=np.float64, count=len(stamps))


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text)} characters)"


def request_starts(trace) -> np.ndarray:
    """The arrival time of each request (the time of its first reference); read-only: in a
    trace of one reference per request it is the time column itself, not a gathered copy."""
    if not len(trace):
        return np.zeros(0)
    if _one_reference_each(trace):
        return np.asarray(trace.time)
    offsets = _offsets(trace)
    return np.asarray(trace.time)[offsets[:-1]]


def _one_reference_each(trace) -> bool:
    request = np.asarray(trace.request)
    n = len(request)
    return bool(n and request.dtype == np.int32 and int(request[-1]) == n - 1)


def _offsets(trace) -> np.ndarray:
    request = np.asarray(trace.request)
    n = len(request)
    if _one_reference_each(trace):
        return np.arange(n + 1, dtype=np.int64)  # one reference per request
    starts = np.flatnonzero(np.r_[True, request[1:] != request[:-1]])
    return np.r_[starts, n].astype(np.int64)


def out_of_order(trace) -> int:
    """Requests that arrive earlier than the request before them."""
    starts = request_starts(trace)
    return int(np.count_nonzero(starts[1:] < starts[:-1]))


def out_of_order_message(source: str, count: int,
                         advice: str = "pass --sort-by-time to replay in time order") -> str:
    """What to tell of `count` requests out of order in `source` (read_trace's warning, and the
    streaming replay's, whose advice differs)."""
    return (f"{source or 'trace'}: {count:,} request(s) arrive earlier than the one before them "
            f"(timestamps out of order); replayed in file order: {advice}")


def warn_out_of_order(trace, count: int) -> None:
    warn(out_of_order_message(trace.source, count))


def sort_by_time(trace):
    """`trace` with whole requests in arrival order (stable), ids re-densified; as is when sorted."""
    from .ids import dense_ids

    starts = request_starts(trace)
    if not np.any(starts[1:] < starts[:-1]):
        return trace
    offsets = _offsets(trace)
    order = np.argsort(starts, kind="stable")
    lengths = np.diff(offsets)[order]
    new_ends = np.cumsum(lengths)
    gather = np.repeat(offsets[:-1][order] - (new_ends - lengths), lengths) + np.arange(int(new_ends[-1]))
    request_dtype = np.asarray(trace.request).dtype
    request = np.repeat(np.arange(len(order), dtype=request_dtype), lengths)

    def take(column):
        column = np.asarray(column)
        return column if column.strides and column.strides[0] == 0 else column[gather]

    original = np.asarray(trace.original_id)[gather]
    block, n_blocks = dense_ids(original)
    changes = dict(time=np.asarray(trace.time)[gather], request=request, block=block, original_id=original,
                   position=take(trace.position), tokens=take(trace.tokens), tenant=take(trace.tenant),
                   n_blocks=n_blocks)
    if trace.request_output_tokens is not None:
        changes["request_output_tokens"] = np.asarray(trace.request_output_tokens)[order]
    if trace.request_texts is not None:
        changes["request_texts"] = tuple(trace.request_texts[i] for i in order)
    return dataclasses.replace(trace, **changes)
