"""Bad-input bookkeeping and JSONL rows, shared by every reader.

A reader either stops at the first bad line with a `TraceFormatError` naming the file, the
line (or record) and the problem, or, with `skip_bad_lines=True`, drops bad lines, counts
them in `Trace.skipped_lines` and keeps the first few in `Trace.skipped_examples`. One
`BadLines` per read holds that choice, so the readers only say what is wrong where. The two
JSONL formats (Mooncake, requests) also share the line loop and the `hash_ids` check.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from ..errors import TraceFormatError
from .opening import open_binary
from .trace import Trace

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_SKIP_EXAMPLES",
    "UINT64_MAX",
    "BadLines",
    "count_problem",
    "hash_ids_problem",
    "is_int",
    "jsonl_rows",
    "millis_problem",
    "shown",
    "with_skips",
]

MAX_SKIP_EXAMPLES = 5
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1


class BadLines:
    """Raises on the first bad line, or (skip mode) counts them and keeps a few examples."""

    def __init__(self, path: Path, skip: bool):
        self.path = path
        self.skip = skip
        self.count = 0
        self.examples: list[str] = []

    def bad(self, line: int, problem: str, fix: str | None = None) -> None:
        if not self.skip:
            raise TraceFormatError(self.path, problem, line=line, fix=fix)
        self.count += 1
        if len(self.examples) < MAX_SKIP_EXAMPLES:
            self.examples.append(f"{self.path}:{line}: {problem}")

    def empty(self, what: str) -> TraceFormatError:
        """The error for a trace with nothing usable in it."""
        if self.count:
            return TraceFormatError(
                self.path,
                f"no valid {what}: all {self.count} were bad (first: {self.examples[0]})",
            )
        return TraceFormatError(self.path, f"empty trace: no {what}")


def with_skips(trace: Trace, bad: BadLines) -> Trace:
    """`trace` carrying the count and examples of the lines `bad` dropped."""
    return dataclasses.replace(trace, skipped_lines=bad.count, skipped_examples=tuple(bad.examples))


def is_int(value) -> bool:
    return type(value) is int  # bool is a subclass of int and is not a count


def shown(value) -> str:
    """`repr(value)` cut to fit in a one-line message (a 400-digit integer is not read by anyone)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text)} characters)"


def count_problem(name: str, value, kind: str = "an integer") -> str | None:
    """Why `value` is not a usable count (a non-negative int64), or None."""
    if not is_int(value):
        return f"{name} must be {kind}, got {shown(value)}"
    if value < 0:
        return f"negative size: {name} is {shown(value)}"
    if value > INT64_MAX:
        return f"{name} {shown(value)} is beyond the 64-bit integer range"
    return None


def millis_problem(name: str, value) -> str | None:
    """Why `value` is not a usable time in milliseconds (a finite number in [0, 2**63)), or None.

    Integers beyond 64 bits would overflow the float64/int64 columns a trace is held in."""
    if not (is_int(value) or (type(value) is float and math.isfinite(value))):
        return f"{name} must be a number of milliseconds, got {shown(value)}"
    if value < 0:
        return f"negative {name} {shown(value)}"
    if value > INT64_MAX:
        return f"{name} {shown(value)} is beyond the 64-bit range of a time in milliseconds"
    return None


def hash_ids_problem(ids, signed: bool = True) -> str | None:
    """Why a `hash_ids` field is unusable, or None when it is a non-empty list of 64-bit ids:
    signed or unsigned (vLLM's and SGLang's block hashes reach 2**64 - 1; `ids.hash_id_array`
    holds them as int64 bit patterns); `signed=False` where the format has no negative ids."""
    if not isinstance(ids, list):
        return f"hash_ids must be a list of integers, got {type(ids).__name__}"
    if not ids:
        return "hash_ids is empty (a request needs at least one block)"
    if set(map(type, ids)) != {int}:  # one C-level pass (a generator per id cost 0.15 s on Mooncake)
        bad = next(h for h in ids if type(h) is not int)
        return f"hash_ids holds a non-integer id {shown(bad)}"
    low, high = min(ids), max(ids)
    if not signed and low < 0:
        return f"hash_ids holds a negative id {shown(low)} (this format's ids are 0 and up)"
    if low < INT64_MIN:
        return "hash_ids holds an id outside the 64-bit integer range"
    if high > UINT64_MAX:
        return f"hash_ids holds an id {shown(high)} beyond the unsigned 64-bit range (2**64 - 1)"
    return None


def jsonl_rows(path: Path, bad: BadLines, problem_of):
    """The parsed objects of a JSONL file that `problem_of` finds nothing wrong with."""
    loads = json.loads
    with open_binary(path) as handle:
        for lineno, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                row = loads(raw)
            except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
                detail = getattr(exc, "msg", None) or type(exc).__name__
                bad.bad(lineno, f"not valid JSON ({detail})")
                continue
            except RecursionError:  # arrays or objects nested thousands deep
                bad.bad(lineno, "not valid JSON (nested too deeply to read)")
                continue
            problem = problem_of(row)
            if problem is not None:
                bad.bad(lineno, problem)
                continue
            yield row
