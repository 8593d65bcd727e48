"""When `policy simulate` streams without being asked (issue 24: memory without flags).

Holding a trace costs about 48 bytes a reference before any policy runs (ids, codes, hit
flags, per-request arrays; docs/scale.md): 50M references over 5M ids peaked at 2.6 GB held,
392 MB streamed. The streamed replay gives the same hits, reference for reference
(tests/test_stream.py, tests/test_stream_lines.py), but not what needs every request at once:
the cost model's TTFT, the event logs, sits's threshold engine, --jobs and --cluster,
--sort-by-time. So a plain `policy simulate` streams on its own when

1. the file is large: at least `AUTO_ORACLE_REFS` records of an oracleGeneral file (24 bytes
   each; an oracleGeneral record is a one-block request, so the TTFT it loses prices requests
   the trace does not have), or an estimated `AUTO_LINE_REFS` references of a Mooncake or
   Bailian JSONL file (`LINE_BYTES_PER_REF` bytes each, jitmode's figure), where the TTFT is
   a request's and the bar is higher; a compressed file counts `COMPRESSED_RATIO` times its size;
2. and nothing the command was given needs the whole trace (`whole_trace_options`), and every
   selected policy streams from that format with its parameters.

`--stream` asks for it whatever the size; `--no-stream` holds the whole trace whatever the size.
"""
from __future__ import annotations

import os

from .jitmode import _COMPRESSED, COMPRESSED_RATIO

__all__ = ["AUTO_LINE_REFS", "AUTO_ORACLE_REFS", "before_numpy", "estimated_references", "large_trace",
           "whole_trace_options"]

#: oracleGeneral: stream from this many records (~96 MB of file; ~200 MB held in memory)
AUTO_ORACLE_REFS = 4_000_000
#: Mooncake / Bailian JSONL: stream from this many estimated references (~1 GB held)
AUTO_LINE_REFS = 20_000_000
ORACLE_RECORD_BYTES = 24
LINE_BYTES_PER_REF = 22
LINE_FORMATS = ("mooncake", "bailian")


def estimated_references(path, fmt: str) -> int | None:
    """References the file at `path` in format `fmt` holds (exact for an uncompressed
    oracleGeneral file, else estimated from its size); None when it cannot be sized (``-``,
    ``bundled:NAME``) or the format does not stream."""
    try:
        size = os.stat(path).st_size
    except (OSError, TypeError, ValueError):
        return None
    if str(path).lower().endswith(_COMPRESSED):
        size *= COMPRESSED_RATIO
    if fmt == "oracle":
        return size // ORACLE_RECORD_BYTES
    if fmt in LINE_FORMATS:
        return size // LINE_BYTES_PER_REF
    return None


def before_numpy(path, stream: bool | None) -> bool:
    """Before numpy loads: one BLAS thread (`jitmode.quiet_blas`) when the run will stream
    (`stream` True) or may (None, and the file reaches the lowest bar, `AUTO_ORACLE_REFS`
    oracleGeneral records, whatever its format). The streamed replay does no BLAS work, and
    OpenBLAS starting a thread per core on import costs ~0.02 s of CPU, a twentieth of a
    streamed 5M-reference LRU run with its kernels built ahead of time (issue 24). Whether it
    was set."""
    if stream is False:
        return False
    if stream is None:
        try:
            size = os.stat(path).st_size
        except (OSError, TypeError, ValueError):
            return False
        if size < AUTO_ORACLE_REFS * ORACLE_RECORD_BYTES:
            return False
    from .jitmode import quiet_blas

    return quiet_blas()


def large_trace(path, fmt: str) -> int | None:
    """The estimated references when the file at `path` is large enough to stream (module
    docstring, rule 1), else None."""
    n = estimated_references(path, fmt)
    if n is None:
        return None
    return n if n >= (AUTO_ORACLE_REFS if fmt == "oracle" else AUTO_LINE_REFS) else None


def whole_trace_options(fmt: str, *, events: bool = False, jobs=None, cluster=None, skip_bad_lines: bool = False,
                        reading: dict | None = None) -> list[str]:
    """The options given that only the whole-trace replay serves (rule 2); [] when none."""
    reading = {k: v for k, v in (reading or {}).items() if v}
    out = []
    if events:
        out.append("--events")
    if jobs not in (None, 1):
        out.append("--jobs")
    if cluster is not None:
        out.append("--cluster")
    if reading.get("sort_by_time"):
        out.append("--sort-by-time")
    if fmt == "oracle":
        if skip_bad_lines:
            out.append("--skip-bad-lines")
        out.extend("--" + k.replace("_", "-") for k in ("block_tokens", "time_unit") if reading.get(k) is not None)
    return out


def policies_stream(modules, fmt: str, params: dict) -> bool:
    """Whether every policy module in `modules` streams from a `fmt` file with its `params`
    ({NAME: {parameter: value}}) (rule 2)."""
    from ..errors import PolicyEngineError
    from .stream import check_streamable
    from .stream_lines import line_streamable

    for module in modules:
        if fmt in LINE_FORMATS and not line_streamable(module):
            return False
        try:
            check_streamable(module, dict(params.get(module.NAME, {})))
        except PolicyEngineError:
            return False
    return True
