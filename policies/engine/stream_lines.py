"""Streaming replay of request-per-line JSONL traces (Mooncake, Bailian): the serving replay's
trace formats, read in chunks of requests with every policy's state kept between them.

`stream_simulate_lines(path, "mooncake", policies, capacities)` reads `chunk_requests` lines at
a time with the in-memory reader's own line loop (`traces.mooncake.iter_request_lines`, each
line checked as `read_trace` checks it), expands them into block references with its own
expansion (`traces.ids.request_blocks`: ids, and tokens per block), factorises the ids with one
persistent table (`traces.factorize.Factorizer`: the codes of the whole-trace factorisation)
and feeds `stream.StreamReplay` each chunk with its request offsets. Peak memory is then the
distinct blocks and one chunk of lines, not the trace; the block, token and prefix hit ratios,
evictions and the most blocks resident equal the in-memory replay's (tests/test_stream_lines.py).

What it leaves to the in-memory replay: policies that read each reference's next use (belady)
or the trace's time span (sits, semantic-shard: their windows are trace time, and their state
needs the span before the first chunk); the cost model's TTFT; sorting requests that arrive
out of order (the hits follow the file's order, as the in-memory replay's do without
--sort-by-time).
"""
from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType

import numpy as np

from ..traces.factorize import Factorizer
from ..traces.ids import request_blocks
from ..traces.lines import BadLines
from .replay import SimResult
from .stream import StreamError, StreamReplay, needs_future, needs_times, streamable

__all__ = [
    "CHUNK_REQUESTS",
    "count_distinct_lines",
    "line_formats",
    "line_streamable",
    "stream_simulate_lines",
]

#: Lines read at a time: about 10 MB of parsed Mooncake lines, and their blocks.
CHUNK_REQUESTS = 1 << 14


def line_formats() -> dict[str, tuple]:
    """Format name -> (the line check, the stamps' unit, default tokens per block): the same
    arguments `read_mooncake` and `read_bailian` give the shared line reader."""
    from ..traces.bailian import BAILIAN_BLOCK_TOKENS, _bailian_problem
    from ..traces.mooncake import _mooncake_problem
    from ..traces.trace import DEFAULT_BLOCK_TOKENS

    return {"mooncake": (_mooncake_problem, "ms", DEFAULT_BLOCK_TOKENS),
            "bailian": (_bailian_problem, "s", BAILIAN_BLOCK_TOKENS)}


def line_streamable(module: ModuleType) -> bool:
    """Whether `module` can be streamed from a request file: resumable, and reading neither
    next uses nor the trace's time span."""
    return streamable(module) and not (needs_future(module) or needs_times(module))


def _chunks(path: Path, fmt: str, bad: BadLines, chunk_requests: int, block_tokens: int | None,
            time_unit: str | None):
    """(ids int64, tokens int32, request offsets int64, arrival seconds) per chunk of requests."""
    from ..traces.mooncake import iter_request_lines
    from ..traces.timing import check_unit

    formats = line_formats()
    if fmt not in formats:
        raise StreamError(f"--stream reads oracleGeneral, Mooncake and Bailian traces; {path} is {fmt} "
                          "(replay it without --stream)")
    problem_of, unit, default_tokens = formats[fmt]
    tokens_per_block = default_tokens if block_tokens is None else int(block_tokens)
    signs = {"negative": False, "beyond_int64": False}
    for lines in iter_request_lines(path, problem_of, unit, check_unit(time_unit), bad, max(1, int(chunk_requests))):
        n_per, ids, tokens = request_blocks(lines.hash_ids, lines.inputs, tokens_per_block, str(path))
        _check_signs(lines.hash_ids, ids, signs, path)
        yield ids, tokens, np.concatenate(([0], np.cumsum(n_per))), lines.arrival_s


def _check_signs(hash_ids, ids: np.ndarray, seen: dict, path: Path) -> None:
    """The whole-trace rule of `hash_id_array` across chunks: ids are signed or unsigned 64-bit
    for the whole trace, so a trace with negative ids in one chunk and ids of 2**63 and up in
    another is refused as the in-memory reader refuses it (their bit patterns could collide)."""
    from ..errors import TraceFormatError

    if len(ids) == 0 or int(ids.min()) >= 0:
        return
    # Negative codes are negative ids, or ids of 2**63 and up held as bit patterns; one chunk
    # never has both (hash_id_array refuses it), so one look at the ids tells which.
    if any(h >= 2**63 for request in hash_ids for h in request):
        seen["beyond_int64"] = True
    else:
        seen["negative"] = True
    if seen["negative"] and seen["beyond_int64"]:
        raise TraceFormatError(path, "hash_ids mix negative ids with ids of 2**63 and above",
                               fix="block ids are either signed or unsigned 64-bit integers, not both in one trace")


def stream_simulate_lines(path, fmt: str, policies, capacities, chunk_requests: int = CHUNK_REQUESTS,
                          params: dict | None = None, progress=None, keep_hits: bool = False,
                          skip_bad_lines: bool = False, block_tokens: int | None = None,
                          time_unit: str | None = None) -> tuple[list[SimResult], dict]:
    """Replay the request file `path` (format `fmt`: mooncake or bailian) through every policy
    module at every capacity, reading it once. `params`: policy NAME -> its parameters;
    `progress(requests_done)` after each chunk; `keep_hits`: each result's request_hits holds
    its hits per request. Returns (results in policy-then-capacity order, trace summary; its
    `out_of_order` counts the requests arriving earlier than the one before them, replayed in
    file order as `read_trace` replays them without sort_by_time)."""
    path = Path(path)
    params = params or {}
    runs = [(m, int(c), dict(params.get(m.NAME, {}))) for m in policies for c in capacities]
    for module, _, _ in runs:  # one that is not resumable at all StreamReplay refuses, saying so
        if needs_future(module) or needs_times(module):
            what = "each reference's next use" if needs_future(module) else "the trace's time span"
            raise StreamError(f"policy {module.NAME!r} reads {what}, which a request file streamed in chunks does "
                              "not give; replay it without --stream, or leave it out")
    replay = StreamReplay(runs, keep_hits=keep_hits)
    fac = Factorizer()
    bad = BadLines(path, skip_bad_lines)
    references = requests = total_tokens = late = 0
    last_arrival = -np.inf
    codes_buf = np.empty(0, dtype=np.int32)
    read_s = 0.0
    start = time.perf_counter()
    for ids, tokens, offsets, arrival in _chunks(path, fmt, bad, chunk_requests, block_tokens, time_unit):
        # requests arriving earlier than the one before them (timing.out_of_order's count)
        late += int(np.count_nonzero(arrival[1:] < arrival[:-1])) + int(arrival[0] < last_arrival)
        last_arrival = arrival[-1]
        if len(codes_buf) < len(ids):
            codes_buf = np.empty(len(ids), dtype=np.int32)
        codes = fac.codes(ids, out=codes_buf)[:len(ids)]
        references += len(ids)
        requests += len(offsets) - 1
        total_tokens += int(tokens.sum(dtype=np.int64))
        read_s += time.perf_counter() - start
        replay.feed(codes, fac.n, tokens=tokens, offsets=offsets)
        if progress is not None:
            progress(requests)
        start = time.perf_counter()
    if references == 0:
        raise bad.empty("requests")
    results = replay.results(references, total_tokens)
    summary = {"path": str(path), "format": fmt, "references": references, "requests": requests,
               "distinct_blocks": fac.n, "read_seconds": read_s, "streamed": True, "out_of_order": late}
    if bad.count:
        summary.update(skipped_lines=bad.count, skipped_examples=list(bad.examples))
    return results, summary


def count_distinct_lines(path, fmt: str, chunk_requests: int = CHUNK_REQUESTS, skip_bad_lines: bool = False,
                         block_tokens: int | None = None, time_unit: str | None = None) -> int:
    """Distinct blocks of a request file, in one streaming pass (capacities given as a share)."""
    fac = Factorizer()
    for ids, _, _, _ in _chunks(Path(path), fmt, BadLines(Path(path), skip_bad_lines), chunk_requests, block_tokens,
                             time_unit):
        fac.codes(ids)
    return fac.n
