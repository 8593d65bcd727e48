"""Mooncake JSONL traces: one request a line, one block reference per hash id.

One JSON object a line: `timestamp` (ms from the trace start, as the format says; a string
of digits is nanoseconds, `timing.py`; `--time-unit` overrides both), `input_length` and
`output_length` (tokens) and `hash_ids` (one id per 512-token block of the prompt; an id
names the block together with its whole prefix). Each line is one request; its blocks are
its references, in order. Every block carries 512 tokens except the last, which carries
`input_length - 512*(n-1)` clamped to [1, 512] (`block_tokens` for a trace at another
block size). Hash ids are signed or unsigned 64-bit integers.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .ids import trace_from_requests
from .lines import BadLines, count_problem, hash_ids_problem, jsonl_rows, with_skips
from .timing import stamp_problem, stamp_seconds
from .trace import DEFAULT_BLOCK_TOKENS, Trace

__all__ = ["RequestLines", "iter_request_lines", "read_mooncake", "read_request_lines"]

_MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def _mooncake_problem(row) -> str | None:
    """Why a parsed Mooncake line is unusable, or None when it is fine."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got {type(row).__name__}"
    for name in _MOONCAKE_FIELDS:
        if name not in row:
            return f"missing field {name!r}"
    problem = stamp_problem("timestamp", row["timestamp"])
    for name in ("input_length", "output_length"):
        problem = problem or count_problem(name, row[name], "an integer token count")
    if problem is not None:
        return problem
    return hash_ids_problem(row["hash_ids"])


def read_mooncake(path, skip_bad_lines: bool = False, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                  time_unit: str | None = None) -> Trace:
    """Read a Mooncake JSONL trace: one request a line, one reference per hash id."""
    return read_request_lines(path, _mooncake_problem, "ms", skip_bad_lines, block_tokens, time_unit)


def read_request_lines(path, problem_of, stamp_unit: str, skip_bad_lines: bool, block_tokens: int,
                       time_unit: str | None) -> Trace:
    """A JSONL trace of one request a line (`timestamp`, `input_length`, `output_length`,
    `hash_ids`), each line checked by `problem_of`, stamps in `stamp_unit` unless `time_unit`
    says otherwise: the reader of Mooncake's format and of Bailian's, which adds fields to it."""
    path = Path(path)
    bad = BadLines(path, skip_bad_lines)
    whole = next(iter_request_lines(path, problem_of, stamp_unit, time_unit, bad), None)
    if whole is None:
        raise bad.empty("requests")
    trace = trace_from_requests(
        whole.hash_ids, None, whole.inputs, whole.outputs, source=str(path), block_tokens=block_tokens,
        arrival_s=whole.arrival_s,
    )
    return with_skips(trace, bad) if bad.count else trace


@dataclass
class RequestLines:
    """Consecutive good request lines of a JSONL trace: arrival seconds (float64), input and
    output token counts and hash id lists, one entry per request."""

    arrival_s: np.ndarray
    inputs: list
    outputs: list
    hash_ids: list


def iter_request_lines(path, problem_of, stamp_unit: str, time_unit: str | None, bad: BadLines,
                       chunk_requests: int | None = None) -> Iterator[RequestLines]:
    """The good lines of a request-per-line JSONL trace, `chunk_requests` requests at a time
    (None: all in one), in file order: `read_request_lines` takes one chunk of everything, the
    streaming replay (engine/stream_lines.py) many. Stamps become seconds chunk by chunk
    (`stamp_seconds` converts each stamp alone, so chunks give the whole file's values)."""
    stamps: list = []
    inputs: list[int] = []
    outputs: list[int] = []
    id_lists: list[list[int]] = []
    limit = chunk_requests if chunk_requests is not None else -1
    for row in jsonl_rows(Path(path), bad, problem_of):
        stamps.append(row["timestamp"])
        inputs.append(row["input_length"])
        outputs.append(row["output_length"])
        id_lists.append(row["hash_ids"])
        if len(id_lists) == limit:
            yield RequestLines(stamp_seconds(stamps, stamp_unit, time_unit), inputs, outputs, id_lists)
            stamps, inputs, outputs, id_lists = [], [], [], []
    if id_lists:
        yield RequestLines(stamp_seconds(stamps, stamp_unit, time_unit), inputs, outputs, id_lists)
