"""Opening a trace file: the one place that knows compression and the bundled traces.

Every reader opens its file through `open_binary` (or `open_text`), which hands back the
*decompressed* bytes: gzip, xz and bzip2 are recognised by their first bytes, not by the
name, so a misnamed file still reads and a plain one is read as is. A new kind of input
(zstd, stdin) is one more case in `open_binary` and nothing else changes.

`resolve(path)` turns the name of a bundled trace (`bundled:mooncake`, see `BUNDLED`) into
the file shipped in the package; `inner_name(path)` is the file name without its
compression suffix, which format detection goes by (`trace.jsonl.gz` is JSONL).
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib
from pathlib import Path

from ..errors import TraceFormatError

DATA = Path(__file__).resolve().parent.parent / "data"
#: Traces shipped in the package, by the name `bundled:<name>` gives (sources in NOTICE).
BUNDLED = {"mooncake": DATA / "mooncake_conversation.jsonl.xz"}
BUNDLED_PREFIX = "bundled:"

#: First bytes -> compression read here.
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"BZh", "bz2"))
#: First bytes -> compression recognised but not read (yet): the fix is to decompress first.
_UNREAD_MAGIC = ((b"\x28\xb5\x2f\xfd", "zstd", "zstd -d"), (b"\x04\x22\x4d\x18", "lz4", "lz4 -d"))
_OPENERS = {"gzip": gzip.open, "xz": lzma.open, "bz2": bz2.open}
COMPRESSED_SUFFIXES = (".gz", ".xz", ".bz2")
#: What a damaged compressed stream raises besides OSError (gzip.BadGzipFile is one).
DECOMPRESS_ERRORS = (EOFError, lzma.LZMAError, zlib.error)


def resolve(path) -> Path:
    """`path` as a Path, with `bundled:<name>` replaced by the shipped file."""
    text = str(path)
    if text.startswith(BUNDLED_PREFIX):
        name = text[len(BUNDLED_PREFIX):]
        if name not in BUNDLED:
            raise TraceFormatError(text, f"no bundled trace named {name!r}",
                                   fix="bundled traces: " + ", ".join(BUNDLED_PREFIX + n for n in BUNDLED))
        return BUNDLED[name]
    return Path(path)


def compression(path) -> str | None:
    """'gzip', 'xz' or 'bz2' from the file's first bytes, None for a plain file."""
    with open(path, "rb") as handle:
        head = handle.read(6)
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    for magic, kind, tool in _UNREAD_MAGIC:
        if head.startswith(magic):
            raise TraceFormatError(path, f"{kind}-compressed traces are not read yet",
                                   fix=f"decompress it first ({tool}); gzip, xz and bzip2 are read as they are")
    return None


def open_binary(path, buffering: int = -1):
    """A binary handle over the decompressed bytes of `path` (the file itself when plain)."""
    kind = compression(path)
    if kind is None:
        return open(path, "rb", buffering=buffering)
    return _OPENERS[kind](path, "rb")


def open_text(path, encoding: str = "utf-8", errors: str = "strict"):
    """`open_binary(path)` decoded as text (universal newlines)."""
    return io.TextIOWrapper(open_binary(path), encoding=encoding, errors=errors)


def data_size(path) -> int:
    """Bytes of decompressed data in `path`: the file size when plain, else counted by reading."""
    if compression(path) is None:
        return Path(path).stat().st_size
    total = 0
    with open_binary(path) as handle:
        while chunk := handle.read(1 << 20):
            total += len(chunk)
    return total


def inner_name(path) -> str:
    """The lower-cased file name without a compression suffix (`a.jsonl.gz` -> `a.jsonl`)."""
    name = Path(path).name.lower()
    for suffix in COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
