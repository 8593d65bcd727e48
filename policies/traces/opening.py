"""Opening a trace file: the one place that knows compression and the bundled traces.

Every reader opens its file through `open_binary` (or `open_text`), which hands back the
*decompressed* bytes: gzip, xz, bzip2 and zstd (the `zstandard` package; concatenated
frames read as one stream, as `zstd -d` does) are recognised by their first bytes, not by
the name, so a misnamed file still reads and a plain one is read as is. lz4 is named, not
misread. This is the one place that knows compression.

`resolve(path)` turns the name of a bundled trace (`bundled:mooncake`, see `BUNDLED`) into
the file shipped in the package, and `-` (standard input, as libCacheSim's tools take it)
into a temporary copy of everything on stdin, made once per process, so format detection
sniffs its first bytes and the readers open it as often as they need (removed at exit). A path
that is a pipe (`<(zstd -dc t.jsonl.zst)`, /dev/fd/63, a named FIFO) is read the same way: it can
be read only once, and detection's sniff used to eat its head, so the readers found it "empty";
`inner_name(path)` is the file name without its compression suffix, which format detection
goes by (`trace.jsonl.gz` is JSONL).
"""
from __future__ import annotations

import atexit
import bz2
import gzip
import io
import lzma
import sys
import tempfile
import zlib
from pathlib import Path

from ..errors import TraceFormatError

__all__ = [
    "BUNDLED",
    "BUNDLED_PREFIX",
    "COMPRESSED_SUFFIXES",
    "DATA",
    "DECOMPRESS_ERRORS",
    "STDIN",
    "compression",
    "data_size",
    "inner_name",
    "open_binary",
    "open_text",
    "pipe_copy",
    "resolve",
    "stdin_copy",
]

DATA = Path(__file__).resolve().parent.parent / "data"
#: Traces shipped in the package, by the name `bundled:<name>` gives (sources in NOTICE).
BUNDLED = {"mooncake": DATA / "mooncake_conversation.jsonl.xz"}
BUNDLED_PREFIX = "bundled:"
#: The path that means standard input.
STDIN = "-"

#: First bytes -> compression read here.
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"BZh", "bz2"), (b"\x28\xb5\x2f\xfd", "zstd"))
#: First bytes -> compression recognised but not read (yet): the fix is to decompress first.
_UNREAD_MAGIC = ((b"\x04\x22\x4d\x18", "lz4", "lz4 -d"),)
COMPRESSED_SUFFIXES = (".gz", ".xz", ".bz2", ".zst", ".zstd")


def _zstd_error_types() -> tuple[type[BaseException], ...]:
    try:
        import zstandard
    except ImportError:
        return ()
    return (zstandard.ZstdError,)


#: What a damaged compressed stream raises besides OSError (gzip.BadGzipFile is one).
DECOMPRESS_ERRORS = (EOFError, lzma.LZMAError, zlib.error) + _zstd_error_types()
_stdin_copy: Path | None = None
_pipe_copies: dict[str, Path] = {}  # pipe path -> its copy, made once per process


def _open_zstd(path, mode: str = "rb"):
    """A buffered binary handle over a zstd stream (every frame, as `zstd -d` reads them)."""
    try:
        import zstandard
    except ImportError:
        raise TraceFormatError(path, "zstd-compressed trace, and the zstandard package is not installed",
                               fix="pip install zstandard, or decompress it first with zstd -d") from None
    source = open(path, "rb")  # noqa: SIM115 - the returned reader closes it (closefd)
    raw = zstandard.ZstdDecompressor().stream_reader(source, read_across_frames=True, closefd=True)
    return io.BufferedReader(raw)


_OPENERS = {"gzip": gzip.open, "xz": lzma.open, "bz2": bz2.open, "zstd": _open_zstd}


def _remove_stdin_copy() -> None:
    for copy in ([_stdin_copy] if _stdin_copy is not None else []) + list(_pipe_copies.values()):
        copy.unlink(missing_ok=True)
        try:
            copy.parent.rmdir()
        except OSError:
            pass
    _pipe_copies.clear()


def _copy_stream(stream, name: str) -> Path:
    """All of `stream` in a temporary file `name`, in a folder of its own (removed at exit), so
    messages name the copy ".../NAME:LINE" and no suffix misleads detection."""
    copy = Path(tempfile.mkdtemp(prefix="sitsprof-")) / name
    with open(copy, "wb") as out:
        while chunk := stream.read(1 << 20):
            out.write(chunk)
    if _stdin_copy is None and not _pipe_copies:
        atexit.register(_remove_stdin_copy)
    return copy


def _is_pipe(path: Path) -> bool:
    """True for a FIFO or a socket (a shell's `<(...)`): data that can be read only once."""
    import stat

    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):  # missing, or a name no file can have: the reader says so
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def pipe_copy(path: Path) -> Path:
    """The temporary file holding all of the pipe `path` (read once per process)."""
    key = str(path)
    if key not in _pipe_copies or not _pipe_copies[key].exists():
        try:
            with open(path, "rb") as stream:
                _pipe_copies[key] = _copy_stream(stream, "pipe")
        except OSError as exc:
            raise TraceFormatError(path, f"cannot read the pipe: {exc.strerror or exc}",
                                   fix="give a file, or the trace on standard input as -") from None
    return _pipe_copies[key]


def stdin_copy(stream=None) -> Path:
    """The temporary file holding all of standard input (read once per process, on first use)."""
    global _stdin_copy
    if _stdin_copy is not None and _stdin_copy.exists():
        return _stdin_copy
    stream = sys.stdin.buffer if stream is None else stream
    if stream.isatty():
        raise TraceFormatError("<stdin>", "no trace on standard input (it is a terminal)",
                               fix="pipe a trace in, e.g. zstd -dc t.jsonl.zst | sitsprof policy simulate -")
    _stdin_copy = _copy_stream(stream, "stdin")
    return _stdin_copy


def resolve(path) -> Path:
    """`path` as a Path, with `bundled:<name>` replaced by the shipped file, and `-` and a pipe
    by a copy of what they hold."""
    text = str(path)
    if text == STDIN:
        return stdin_copy()
    if text.startswith(BUNDLED_PREFIX):
        name = text[len(BUNDLED_PREFIX):]
        if name not in BUNDLED:
            raise TraceFormatError(text, f"no bundled trace named {name!r}",
                                   fix="bundled traces: " + ", ".join(BUNDLED_PREFIX + n for n in BUNDLED))
        return BUNDLED[name]
    path = Path(path)
    return pipe_copy(path) if _is_pipe(path) else path


def compression(path) -> str | None:
    """'gzip', 'xz', 'bz2' or 'zstd' from the file's first bytes, None for a plain file."""
    with open(path, "rb") as handle:
        head = handle.read(6)
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    for magic, kind, tool in _UNREAD_MAGIC:
        if head.startswith(magic):
            raise TraceFormatError(path, f"{kind}-compressed traces are not read yet",
                                   fix=f"decompress it first ({tool}); gzip, xz, bzip2 and zstd are read as they are")
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
