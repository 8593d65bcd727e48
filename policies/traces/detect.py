"""Which reader a trace file needs (from its name, else its first bytes) and `read_trace`.

The one entry point the commands use: `read_trace(path, format=None)` picks the format
(`FORMATS`; the readers are one module each: mooncake, requests, oracle, csvfile), turns a
missing or unreadable file into a `TraceFormatError`, and returns the `Trace`. Files are
opened through `opening.py`: gzip, xz and bzip2 are read as they are, and `bundled:mooncake`
names the trace shipped in the package.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import TraceFormatError
from .csvfile import read_csv
from .mooncake import read_mooncake
from .opening import DECOMPRESS_ERRORS, inner_name, open_binary, resolve
from .oracle import read_oracle
from .requests import read_requests
from .trace import DEFAULT_BLOCK_TOKENS, Trace

FORMATS: tuple[str, ...] = ("mooncake", "oracle", "csv", "requests")

_FORMAT_FIX = "pass --format mooncake, oracle, csv or requests"

_SUFFIXES = {
    ".jsonl": "mooncake",
    ".ndjson": "mooncake",
    ".json": "mooncake",
    ".csv": "csv",
    ".oraclegeneral": "oracle",
    ".oracle": "oracle",
    ".bin": "oracle",
}
_COMPRESSED = (".zst", ".lz4")  # gzip, xz and bzip2 are read (opening.py)


def detect_format(path) -> str:
    """The trace format of `path`, from its extension, else from its first bytes."""
    path = resolve(path)
    name = inner_name(path)
    if name.endswith(_COMPRESSED):
        raise TraceFormatError(path, "zstd- or lz4-compressed traces are not read yet", fix="decompress it first")
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
    """'requests' when the first JSON object has a `model_stack` field, else 'mooncake'."""
    with open_binary(path) as handle:
        for raw in handle:
            if raw.strip():
                try:
                    first = json.loads(raw)
                except (ValueError, RecursionError):
                    return "mooncake"  # the reader reports the bad line
                return "requests" if isinstance(first, dict) and "model_stack" in first else "mooncake"
    return "mooncake"


def read_trace(
    path,
    format: str | None = None,  # noqa: A002 - mirrors the CLI's --format
    skip_bad_lines: bool = False,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
) -> Trace:
    """Read a trace file in any supported format (auto-detected when `format` is None)."""
    try:
        return _read_trace(resolve(path), format, skip_bad_lines, block_tokens)
    except OSError as exc:  # unreadable file, vanished mid-read, not really gzip, ...
        raise TraceFormatError(path, f"cannot read the file: {exc.strerror or exc}") from None
    except DECOMPRESS_ERRORS as exc:  # a truncated or damaged compressed stream
        raise TraceFormatError(path, f"damaged compressed file: {exc}") from None


def _read_trace(path: Path, format, skip_bad_lines: bool, block_tokens: int) -> Trace:  # noqa: A002
    if not path.exists():
        raise TraceFormatError(path, "no such file")
    if path.is_dir():
        raise TraceFormatError(path, "is a directory, not a trace file")
    if format is None:
        fmt = detect_format(path)
    else:
        fmt = str(format).strip().lower()
        if fmt == "oraclegeneral":
            fmt = "oracle"
        if fmt not in FORMATS:
            raise TraceFormatError(path, f"unknown trace format {format!r}", fix=_FORMAT_FIX)
    if fmt == "mooncake":
        return read_mooncake(path, skip_bad_lines=skip_bad_lines, block_tokens=block_tokens)
    if fmt == "oracle":
        return read_oracle(path, skip_bad_lines=skip_bad_lines)
    if fmt == "requests":
        return read_requests(path, skip_bad_lines=skip_bad_lines, block_tokens=block_tokens)
    return read_csv(path, skip_bad_lines=skip_bad_lines)
