"""Which reader a trace file needs (from its name, else its first bytes) and `read_trace`.

The one entry point the commands use: `read_trace(path, format=None)` picks the format
(`FORMATS`; the readers are one module each: mooncake, bailian, requests, oracle, csvfile),
turns a missing or unreadable file into a `TraceFormatError`, and returns the `Trace`.
Files are opened through `opening.py`: gzip, xz, bzip2 and zstd are read as they are,
`bundled:mooncake` names the trace shipped in the package and `-` reads standard input
(sniffed by content). A JSONL file is Bailian when its first object has `chat_id`,
`parent_chat_id` or `turn`, the request format when it has `model_stack`, else Mooncake.

Beyond the reader, `read_trace` applies what holds for every format (`timing.py`): the time
unit (`time_unit`, else the format's, else a guess with a warning: CSV), the block size
(`block_tokens`, else the format's: 16 for Bailian, 512 otherwise) and arrival order (a
`TraceWarning` with the count of requests out of order, or `sort_by_time=True` to sort).
"""
from __future__ import annotations

import dataclasses
import json
from contextlib import contextmanager
from pathlib import Path

from sitsprof.common.errors import OutputError

from ..errors import TraceFormatError
from . import timing
from .bailian import BAILIAN_BLOCK_TOKENS, MARKER_FIELDS, read_bailian
from .csvfile import read_csv
from .mooncake import read_mooncake
from .opening import DECOMPRESS_ERRORS, inner_name, open_binary, resolve
from .oracle import read_oracle
from .requests import read_requests
from .trace import DEFAULT_BLOCK_TOKENS, Trace

__all__ = [
    "FORMATS",
    "detect_format",
    "read_trace",
    "reading_errors",
    "trace_file",
]

FORMATS: tuple[str, ...] = ("mooncake", "bailian", "oracle", "csv", "requests")

_FORMAT_FIX = "pass --format mooncake, bailian, oracle, csv or requests"

_SUFFIXES = {
    ".jsonl": "mooncake",
    ".ndjson": "mooncake",
    ".json": "mooncake",
    ".csv": "csv",
    ".oraclegeneral": "oracle",
    ".oracle": "oracle",
    ".bin": "oracle",
}
_COMPRESSED = (".lz4",)  # gzip, xz, bzip2 and zstd are read (opening.py)


def detect_format(path) -> str:
    """The trace format of `path`, from its extension, else from its first bytes."""
    path = resolve(path)
    name = inner_name(path)
    if name.endswith(_COMPRESSED):
        raise TraceFormatError(path, "lz4-compressed traces are not read yet", fix="decompress it first (lz4 -d)")
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix):
            return _sniff_jsonl(path) if fmt == "mooncake" else fmt
    with open_binary(path) as handle:
        head = handle.read(4096)
    if not head.strip():
        raise TraceFormatError(path, "empty trace: the file has no data")
    if b"\x00" in head:
        return "oracle"
    text = head.lstrip()
    if text.startswith(b"{"):
        return _sniff_jsonl(path)
    first_line = text.split(b"\n", 1)[0]
    if b"," in first_line:
        return "csv"
    raise TraceFormatError(path, "cannot tell the trace format from its name or content", fix=_FORMAT_FIX)


def _sniff_jsonl(path: Path) -> str:
    """'requests' when the first JSON object has a `model_stack` field, 'bailian' when it has
    `chat_id`, `parent_chat_id` or `turn`, else 'mooncake'."""
    with open_binary(path) as handle:
        for raw in handle:
            if raw.strip():
                try:
                    first = json.loads(raw)
                except (ValueError, RecursionError):
                    return "mooncake"  # the reader reports the bad line
                if not isinstance(first, dict):
                    return "mooncake"
                if "model_stack" in first:
                    return "requests"
                return "bailian" if any(name in first for name in MARKER_FIELDS) else "mooncake"
    return "mooncake"


def read_trace(
    path,
    format: str | None = None,  # noqa: A002 - mirrors the CLI's --format
    skip_bad_lines: bool = False,
    block_tokens: int | None = None,
    time_unit: str | None = None,
    sort_by_time: bool = False,
) -> Trace:
    """Read a trace file in any supported format (auto-detected when `format` is None).

    block_tokens: tokens per block (default the format's: 16 for Bailian, else 512); time_unit:
    s, ms, us or ns, overriding the format's unit or the guess; sort_by_time: replay requests
    in arrival order (stable) instead of warning that they are out of order."""
    if block_tokens is not None and (type(block_tokens) is not int or block_tokens < 1):
        raise TraceFormatError(path, f"block size {block_tokens!r} tokens",
                               fix="--block-tokens takes a whole number >= 1")
    time_unit = timing.check_unit(time_unit)
    with reading_errors(path):
        trace = _read_trace(resolve(path), format, skip_bad_lines, block_tokens, time_unit)
    late = timing.out_of_order(trace)
    if late and sort_by_time:
        return timing.sort_by_time(trace)
    if late:
        timing.warn_out_of_order(trace, late)
    return trace


@contextmanager
def reading_errors(path):
    """What reading `path` raises as the OS or a decompressor says it, as one TraceFormatError
    naming the file (read_trace, and the streaming replay, which reads as it goes)."""
    try:
        yield
    except OutputError:  # --stream prints as it reads: a full stdout is not the trace's fault
        raise
    except OSError as exc:  # unreadable file, vanished mid-read, not really gzip, ...
        raise TraceFormatError(path, f"cannot read the file: {exc.strerror or exc}") from None
    except DECOMPRESS_ERRORS as exc:  # a truncated or damaged compressed stream
        raise TraceFormatError(path, f"damaged compressed file: {exc}") from None


def trace_file(path) -> Path:
    """`path` resolved (`bundled:<name>`, `-`) and checked to be a file; TraceFormatError otherwise."""
    path = resolve(path)
    if not path.exists():
        raise TraceFormatError(path, "no such file")
    if path.is_dir():
        raise TraceFormatError(path, "is a directory, not a trace file")
    return path


def _read_trace(path: Path, format, skip_bad_lines: bool, block_tokens, time_unit) -> Trace:  # noqa: A002
    path = trace_file(path)
    if format is None:
        fmt = detect_format(path)
    else:
        fmt = str(format).strip().lower()
        if fmt == "oraclegeneral":
            fmt = "oracle"
        if fmt not in FORMATS:
            raise TraceFormatError(path, f"unknown trace format {format!r}", fix=_FORMAT_FIX)
    if fmt == "mooncake":
        return read_mooncake(path, skip_bad_lines=skip_bad_lines, block_tokens=block_tokens or DEFAULT_BLOCK_TOKENS,
                             time_unit=time_unit)
    if fmt == "bailian":
        return read_bailian(path, skip_bad_lines=skip_bad_lines, block_tokens=block_tokens or BAILIAN_BLOCK_TOKENS,
                            time_unit=time_unit)
    if fmt == "requests":
        return read_requests(path, skip_bad_lines=skip_bad_lines, block_tokens=block_tokens or DEFAULT_BLOCK_TOKENS,
                             time_unit=time_unit)
    if fmt == "oracle":
        trace = read_oracle(path, skip_bad_lines=skip_bad_lines)
        unit = timing.choose_unit(trace.time, path, declared="s", given=time_unit)  # libCacheSim's clock: s
    else:
        trace = read_csv(path, skip_bad_lines=skip_bad_lines)
        unit = timing.choose_unit(trace.time, path, given=time_unit, default="s")  # documented s, else guessed
    changes = {}
    if unit != "s":
        changes["time"] = timing.to_seconds(trace.time, unit)
    if block_tokens is not None:
        changes["block_tokens"] = block_tokens
    return dataclasses.replace(trace, **changes) if changes else trace
