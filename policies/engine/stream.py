"""Streaming replay: a trace read in chunks, every policy's state kept between them.

`stream_simulate(path, policies, capacities)` replays an oracleGeneral file (libCacheSim's
binary format) through each (policy module, capacity) without holding the trace: records are
read `chunk_refs` at a time (`traces.oracle.iter_oracle_chunks`), their ids factorised by one
persistent table (`traces.factorize.Factorizer`, the codes of the whole-trace factorisation),
and each run's kernel serves the chunk through its resumable form. Peak memory is then the
distinct blocks (the id table, about 12-24 bytes each, and each policy's per-block state)
plus the capacity-sized queues and one chunk, not the trace's length.

Resumable form (every classic policy; sits and semantic-shard through the module their
STREAM_FORM names; docs/scale.md; which names a module has is read once, by
`engine.protocol.stream_capabilities`): a module exposes
`new_stream_state(n_blocks, capacity, **params) -> state` (a tuple of arrays),
`grow_state(state, n_blocks, capacity, **params) -> state` (more block ids: per-block arrays
grown, queue contents kept), `max_resident(state)`, and either
`stream_window(state, block, lo, hi, capacity, hit, **params) -> evictions` (references
lo..hi-1) or, for a policy that works request by request (prefix_lru),
`stream_requests(state, block, req_offsets, capacity, hit) -> evictions`. A module that reads
the future (belady: `STREAM_FUTURE = True`) takes one more argument, `future`: for each
reference of the window, the position in the whole trace of the next reference to the same
block, or the trace's length + the block's dense id when there is none (`belady.next_uses`'s
keys). `stream_simulate` takes them from the file's next_access_vtime when its head shows
they are there and right (and checks every one as the chunks pass: a broken chain replays
the belady runs again the other way), else computes them first: one forward pass writes the
dense codes to a temporary file (4 bytes a reference), one backward pass over that file writes
each reference's next position (8 bytes a reference), and the replay reads them beside the
trace. A module that reads trace time (sits: `STREAM_TIMES = True`) gets `info` (references,
first and last timestamp: `trace_span`) in new_stream_state and each chunk's `times` and
`tokens` (obj_size) in stream_window, and may have `stream_finish(state) -> extra` (its last
window's decision, its event log). Distinct blocks are not known in advance, so the state
starts small and grows geometrically (`GROWTH`) between chunks as new ids appear; the hit
flags are the in-memory replay's, reference for reference (tests/test_stream.py, chunk sizes
1, 7, 1000 and whole).

What streaming gives up: per-request figures that need the whole trace (`request_hits` is
empty; the cost model's TTFT is not computed), sits's threshold engine, the check that
each next_access_vtime points at a record of the same object for the policies that do not
read it (that record may lie in another chunk; belady's runs check the whole chain), and
--skip-bad-lines (the first bad record is refused). An oracleGeneral record is one request of one block, so
the prefix hit ratio is the block hit ratio; the token hit ratio weighs hits by obj_size.
"""
from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

from sitsprof.common.jit import njit

from ..errors import PolicyEngineError
from ..traces.factorize import Factorizer
from .params import check_params, kernel_params
from .protocol import StreamCapabilities, stream_capabilities
from .replay import SimResult, request_stats

__all__ = [
    "CHUNK_REFS",
    "GROWTH",
    "HEAD_REFS",
    "StreamError",
    "StreamReplay",
    "check_streamable",
    "count_distinct",
    "file_pointer_base",
    "needs_future",
    "needs_times",
    "stream_form",
    "stream_hits",
    "stream_simulate",
    "streamable",
    "trace_span",
]

#: Default chunk: 1M references (24 MB of records, 4 MB of codes, 1 MB of hit flags).
CHUNK_REFS = 1 << 20
#: Per-block state grows to at least this factor of its size when new ids outgrow it.
GROWTH = 1.5
_FIRST_BLOCKS = 1 << 16


class StreamError(PolicyEngineError):
    """A policy or option that the streaming replay cannot serve."""


def stream_form(module: ModuleType) -> ModuleType:
    """The module holding `module`'s resumable form: itself, or the one its STREAM_FORM names
    (an adaptive policy's, imported by name so the engine does not depend on that layer)."""
    return stream_capabilities(module).form or module


def streamable(module: ModuleType) -> bool:
    """Whether `module` has the resumable form the streaming replay needs."""
    return stream_capabilities(module).streams


def needs_future(module: ModuleType) -> bool:
    """Whether `module`'s stream_window reads each reference's next use (belady)."""
    return stream_capabilities(module).needs_future


def needs_times(module: ModuleType) -> bool:
    """Whether `module`'s stream_window reads each reference's time and size, and its state
    the trace's length and time span (sits: windows of trace time)."""
    return stream_capabilities(module).needs_times


@dataclass
class _Run:
    module: ModuleType
    capacity: int
    params: dict
    form: ModuleType | None = None
    caps: StreamCapabilities | None = None
    state: tuple = ()
    evictions: int = 0
    hits: int = 0
    prefix_hits: int = 0  # hits inside each request's leading run of hits
    hit_tokens: int = 0
    seconds: float = 0.0
    kept: list = field(default_factory=list)  # per-reference hit flags, chunk by chunk (keep_hits)
    kept_requests: list = field(default_factory=list)  # hits per request, where offsets were fed


_NO_TOKENS = np.zeros(0, dtype=np.int32)  # `request_stats` without weights


@njit(cache=True)
def _weighted_hits(hit, tokens):
    total = 0
    for i in range(hit.shape[0]):
        if hit[i]:
            total += tokens[i]
    return total


def check_streamable(module: ModuleType, params: dict) -> None:
    """StreamError when `module` has no resumable form; PolicyEngineError when `params` are
    not what its stream takes or out of range."""
    if not streamable(module):
        raise StreamError(
            f"policy {module.NAME!r} cannot be streamed (it has no resumable form: it needs the whole trace); "
            "replay it without --stream, or leave it out")
    declared = stream_capabilities(module).params
    allowed = list(declared if declared is not None else kernel_params(module))
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise PolicyEngineError(
            f"policy {module.NAME!r} has no parameter {', '.join(unknown)}; "
            f"it takes {', '.join(allowed) if allowed else 'none'}")
    check_params(module, params)


class StreamReplay:
    """Runs of (module, capacity, params) fed chunk by chunk with dense block ids.

    `feed(block, n_blocks, tokens=None, offsets=None, future=None)`: `block` the chunk's dense
    ids (all below `n_blocks`, the distinct blocks so far), `tokens` per-reference weights or
    None (weight 1), `offsets` the chunk's request offsets (0..len) or None (one reference
    each), `future` the chunk's next-use keys (module docstring; needed by belady runs only).
    `results(references, total_tokens)` then gives one SimResult per run (with keep_hits, its
    request_hits are the per-reference hit flags: one request a reference, as in oracleGeneral)."""

    def __init__(self, runs: Iterable[tuple[ModuleType, int, dict]], keep_hits: bool = False,
                 first_blocks: int = _FIRST_BLOCKS, info: dict | None = None):
        self.runs = []
        for module, capacity, params in runs:
            check_streamable(module, dict(params))
            caps = stream_capabilities(module)
            self.runs.append(_Run(module, int(capacity), dict(params), caps.form, caps))
        self.info = info  # references, first_time, last_time: for the runs that read times
        self.keep_hits = keep_hits
        self.first_blocks = max(int(first_blocks), 1)
        self.allocated = 0
        self._hit = np.zeros(0, dtype=np.uint8)

    def _grow(self, n_blocks: int) -> None:
        if n_blocks <= self.allocated:
            return
        first = self.allocated == 0
        self.allocated = max(n_blocks, self.first_blocks if first else int(self.allocated * GROWTH))
        for run in self.runs:
            if first:
                extra = {"info": self.info} if run.caps.needs_times else {}
                run.state = run.form.new_stream_state(self.allocated, run.capacity, **extra, **run.params)
            else:
                run.state = run.form.grow_state(run.state, self.allocated, run.capacity, **run.params)

    def feed(self, block: np.ndarray, n_blocks: int, tokens: np.ndarray | None = None,
             offsets: np.ndarray | None = None, future: np.ndarray | None = None,
             times: np.ndarray | None = None) -> None:
        block = np.ascontiguousarray(block, dtype=np.int32)
        n = len(block)
        if n == 0:
            return
        self._grow(int(n_blocks))
        if len(self._hit) < n:
            self._hit = np.zeros(n, dtype=np.uint8)
        hit = self._hit[:n]
        if offsets is not None:
            offsets = np.asarray(offsets, dtype=np.int64)
        uniform = None
        sizes = tokens
        if tokens is not None:
            tokens = np.ascontiguousarray(tokens, dtype=np.int64)
            if int(tokens.min()) == int(tokens.max()):
                uniform, tokens = int(tokens[0]), None
        for run in self.runs:
            start = time.perf_counter()
            form = run.form
            if run.caps.needs_future:
                if future is None:
                    raise StreamError(f"policy {run.module.NAME!r} reads each reference's next use: stream it "
                                      "from an oracleGeneral file (stream_simulate), which gives them")
                ev = form.stream_window(run.state, block, 0, n, run.capacity, hit, future[:n], **run.params)
            elif run.caps.needs_times:
                if times is None or sizes is None:
                    raise StreamError(f"policy {run.module.NAME!r} reads each reference's time and size: stream "
                                      "it from an oracleGeneral file (stream_simulate), which gives them")
                ev = form.stream_window(run.state, block, 0, n, run.capacity, hit, times=times[:n],
                                        tokens=np.minimum(sizes[:n], 2**31 - 1), **run.params)
            elif not run.caps.by_request:
                ev = form.stream_window(run.state, block, 0, n, run.capacity, hit, **run.params)
            else:
                offs = np.arange(n + 1, dtype=np.int64) if offsets is None else offsets
                ev = form.stream_requests(run.state, block, offs, run.capacity, hit, **run.params)
            run.seconds += time.perf_counter() - start
            run.evictions += int(ev)
            h = int(np.count_nonzero(hit))
            run.hits += h
            if tokens is not None:
                run.hit_tokens += int(_weighted_hits(hit, tokens))
            else:
                run.hit_tokens += h * (1 if uniform is None else uniform)
            if self.keep_hits:
                run.kept.append(hit.copy())
            if offsets is None:  # a request a reference: each hit is its request's leading run
                run.prefix_hits += h
            else:
                per_request = np.empty(len(offsets) - 1, dtype=np.int32)
                run.prefix_hits += int(request_stats(hit, offsets, _NO_TOKENS, per_request)[1])
                if self.keep_hits:
                    run.kept_requests.append(per_request)

    def hits_of(self, k: int) -> np.ndarray:
        """Run k's per-reference hit flags (only with keep_hits)."""
        kept = self.runs[k].kept
        return np.concatenate(kept) if kept else np.zeros(0, dtype=np.uint8)

    def request_hits_of(self, k: int) -> np.ndarray:
        """Run k's hits per request (only with keep_hits): each request's count of hit blocks
        where `offsets` were fed, else its one flag."""
        per_request = self.runs[k].kept_requests
        return np.concatenate(per_request) if per_request else self.hits_of(k).astype(np.int32)

    def results(self, references: int, total_tokens: int, prefix_hits: list[int] | None = None,
                extra: dict | None = None) -> list[SimResult]:
        out = []
        for k, run in enumerate(self.runs):
            prefix = run.prefix_hits if prefix_hits is None else prefix_hits[k]
            more = run.form.stream_finish(run.state) if run.caps.finishes and run.state else {}
            out.append(SimResult(
                policy=run.module.NAME, capacity=run.capacity, references=int(references), hits=run.hits,
                block_hit_ratio=run.hits / references if references else 0.0,
                token_hit_ratio=run.hit_tokens / total_tokens if total_tokens else 0.0,
                prefix_hit_ratio=prefix / references if references else 0.0,
                evictions=more.pop("evictions_total", run.evictions),
                max_resident=run.form.max_resident(run.state) if run.state else 0,
                request_hits=self.request_hits_of(k) if self.keep_hits else np.zeros(0, dtype=np.int32),
                seconds=run.seconds,
                extra={**run.params, "streamed": True, **more, **(extra or {})},
            ))
        return out


def stream_hits(module: ModuleType, chunks: Iterable[np.ndarray], capacity: int, params: dict | None = None,
                offsets: Iterable[np.ndarray] | None = None, first_blocks: int = _FIRST_BLOCKS
                ) -> tuple[np.ndarray, int, int]:
    """Replay raw int64 ids arriving in `chunks` through one policy; returns (per-reference hit
    flags, evictions, max_resident). For tests and callers with their own reader."""
    replay = StreamReplay([(module, capacity, params or {})], keep_hits=True, first_blocks=first_blocks)
    fac = Factorizer()
    offs = iter(offsets) if offsets is not None else None
    for chunk in chunks:
        codes = fac.codes(np.asarray(chunk, dtype=np.int64))
        replay.feed(codes, fac.n, offsets=next(offs) if offs is not None else None)
    run = replay.runs[0]
    return replay.hits_of(0), run.evictions, (run.form.max_resident(run.state) if run.state else 0)


#: The id table starts with room for this many distinct ids (or the file's records, when fewer):
#: 2**21 slots, 24 MiB at most, allocated lazily (a page is touched when an id lands in it).
FIRST_IDS = 1_500_000


def _factorizer(path) -> Factorizer:
    """The persistent id table for the oracleGeneral file at `path`, sized up front for
    min(records, FIRST_IDS) distinct ids: growing it from the smallest table (2**16 slots,
    doubled at 3/4 full, every id rehashed each time) took 0.14 s of CPU where the final size
    from the start took 0.085 s, on 5M references over 829k ids (issue 24, bench_stream.py).
    The codes are the same whatever the size (first appearance). A compressed file is not
    sized (that would be one more decompressing pass): it starts small."""
    from ..traces.opening import compression
    from ..traces.oracle import ORACLE_DTYPE

    try:
        records = os.stat(path).st_size // ORACLE_DTYPE.itemsize if compression(path) is None else 0
    except (OSError, TypeError, ValueError, PolicyEngineError):  # the reader says what is wrong
        records = 0
    ids = min(records, FIRST_IDS)
    return Factorizer(bits=max(16, math.ceil(math.log2(ids * 4 / 3))) if ids else 16)


def _oracle_records(path, chunk_refs: int):
    from ..traces.oracle import iter_oracle_chunks

    return iter_oracle_chunks(path, chunk_refs)


def _oracle_chunks(path, chunk_refs: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    for lo, records in _oracle_records(path, chunk_refs):
        yield lo, records["obj_id"].view(np.int64), records["obj_size"]


# ------------------------------------------------------------ next uses, for belady (STREAM_FUTURE)
_NEVER_RAW = (-1, 2**63 - 1)
#: Records of the file's head that decide whether its next_access_vtime can be used.
HEAD_REFS = 1 << 20


@njit(cache=True)
def _file_keys(codes, raw, lo, n_total, base, expect, out):
    """Next-use keys from the file's next_access_vtime (`base`: what it counts records from),
    checked against the trace as it passes: expect[b] is the position block b's previous
    record named (-1: none, -2: b not seen yet). Returns the index of the first record whose
    position its block's previous record did not name, -1 if none."""
    bad = -1
    for i in range(codes.shape[0]):
        b = codes[i]
        e = expect[b]
        if e != -2 and e != lo + i and bad < 0:
            bad = i
        v = raw[i]
        j = v - base
        if v == -1 or v == 9223372036854775807 or j >= n_total:  # never, or past this file's end
            out[i] = n_total + b
            expect[b] = -1
        else:
            out[i] = j
            expect[b] = j
    return bad


@njit(cache=True)
def _backward_next(codes, lo, seen, out):
    """out[i]: the position of the next reference to codes[i] (-1: none), walking back from
    the chunk's end; seen[b]: block b's earliest position after this chunk (-1: none)."""
    for i in range(codes.shape[0] - 1, -1, -1):
        b = codes[i]
        out[i] = seen[b]
        seen[b] = lo + i


@njit(cache=True)
def _computed_keys(codes, nxt, n_total, out):
    for i in range(codes.shape[0]):
        out[i] = nxt[i] if nxt[i] >= 0 else n_total + codes[i]


def file_pointer_base(path, head: int | None = None) -> int | None:
    """What the file's next_access_vtime counts records from (0 or 1) when its first `head`
    records show it is there and right, else None (absent, all -1, or wrong: compute it).
    Every pointer of the head must name the next record of the same id within the head, or
    lie beyond it (or be -1) where the id does not come back within it."""
    from ..traces.oracle import iter_oracle_chunks, next_access_vtime

    for _, records in iter_oracle_chunks(path, HEAD_REFS if head is None else head):
        ids = records["obj_id"].view(np.int64)
        raw = records["next_access_vtime"].astype(np.int64)
        break
    k = len(ids)
    true = next_access_vtime(ids)
    if not (true >= 0).any():
        return None  # no id comes back within the head: nothing to tell the count from
    never = (raw == _NEVER_RAW[0]) | (raw == _NEVER_RAW[1])
    for base in (0, 1):
        j = np.where(never, -1, raw - base)
        j[j >= k] = -1  # beyond the head: checked as the replay streams
        if np.array_equal(j, true):
            return base
    return None


class _FileFuture:
    """Keys from the file's next_access_vtime, every pointer checked as the chunks pass."""

    def __init__(self, base: int, n_total: int):
        self.base, self.n_total = base, n_total
        self.expect = np.full(0, -2, dtype=np.int64)
        self.out = np.empty(0, dtype=np.int64)
        self.broken_at = None  # the first record whose chain is broken

    def keys(self, lo: int, codes: np.ndarray, records, n_blocks: int) -> np.ndarray:
        if len(self.expect) < n_blocks:
            grown = np.full(max(n_blocks, int(len(self.expect) * GROWTH)), -2, dtype=np.int64)
            grown[:len(self.expect)] = self.expect
            self.expect = grown
        if len(self.out) < len(codes):
            self.out = np.empty(len(codes), dtype=np.int64)
        out = self.out[:len(codes)]
        bad = int(_file_keys(codes, records["next_access_vtime"], np.int64(lo), np.int64(self.n_total),
                             np.int64(self.base), self.expect, out))
        if bad >= 0 and self.broken_at is None:
            self.broken_at = lo + bad
        return out

    def finish(self) -> None:
        if self.broken_at is None and (self.expect >= 0).any():
            self.broken_at = self.n_total  # a pointer into the file that no record answered

    def close(self) -> None:
        pass


class _ComputedFuture:
    """Keys computed before the replay: a forward pass writes the dense codes to a temporary
    file (4 bytes a reference), a backward pass over it each reference's next position
    (8 bytes a reference); the replay reads the latter beside the trace."""

    def __init__(self, path, fac: Factorizer, n_total: int, chunk_refs: int, temp_dir=None):
        self.n_total = n_total
        self.folder = tempfile.TemporaryDirectory(prefix="sitsprof-next-", dir=temp_dir)
        try:
            self._compute(path, fac, chunk_refs)
        except BaseException:
            self.folder.cleanup()
            raise
        # kept open across the replay's chunks, closed by close()
        self.handle = open(self.next_path, "rb")  # noqa: SIM115
        self.out = np.empty(0, dtype=np.int64)
        self.broken_at = None

    def _compute(self, path, fac: Factorizer, chunk_refs: int) -> None:
        n_total = self.n_total
        folder = Path(self.folder.name)
        codes_path, self.next_path = folder / "codes.i4", folder / "next.i8"
        buf = np.empty(0, dtype=np.int32)
        with open(codes_path, "wb") as fh:
            for _, ids, _ in _oracle_chunks(path, chunk_refs):
                if len(buf) < len(ids):
                    buf = np.empty(len(ids), dtype=np.int32)
                fac.codes(ids, out=buf)[:len(ids)].tofile(fh)
        seen = np.full(max(fac.n, 1), -1, dtype=np.int64)
        step = max(1, min(int(chunk_refs), n_total))
        out = np.empty(step, dtype=np.int64)
        with open(codes_path, "rb") as src, open(self.next_path, "wb") as dst:
            dst.truncate(n_total * 8)
            for hi in range(n_total, 0, -step):
                lo = max(0, hi - step)
                src.seek(lo * 4)
                codes = np.fromfile(src, dtype=np.int32, count=hi - lo)
                _backward_next(codes, np.int64(lo), seen, out[:hi - lo])
                dst.seek(lo * 8)
                out[:hi - lo].tofile(dst)
        codes_path.unlink()

    def keys(self, lo: int, codes: np.ndarray, records, n_blocks: int) -> np.ndarray:
        nxt = np.fromfile(self.handle, dtype=np.int64, count=len(codes))
        if len(self.out) < len(codes):
            self.out = np.empty(len(codes), dtype=np.int64)
        out = self.out[:len(codes)]
        _computed_keys(codes, nxt, np.int64(self.n_total), out)
        return out

    def finish(self) -> None:
        pass

    def close(self) -> None:
        self.handle.close()
        self.folder.cleanup()


def _replay_pass(path, replay: StreamReplay, fac: Factorizer, chunk_refs: int, future=None, progress=None,
                 times: bool = False):
    """One forward pass of the file through `replay`; returns (references, total tokens, seconds
    reading and factorising)."""
    references = total_tokens = 0
    codes_buf = np.empty(0, dtype=np.int32)
    read_s = 0.0
    start = time.perf_counter()
    for lo, records in _oracle_records(path, chunk_refs):
        ids, sizes = records["obj_id"].view(np.int64), records["obj_size"]
        if len(codes_buf) < len(ids):
            codes_buf = np.empty(len(ids), dtype=np.int32)
        codes = fac.codes(ids, out=codes_buf)[:len(ids)]
        tokens = np.minimum(sizes, 2**31 - 1)
        references += len(ids)
        total_tokens += int(tokens.sum(dtype=np.int64))
        keys = None if future is None else future.keys(lo, codes, records, fac.n)
        read_s += time.perf_counter() - start
        replay.feed(codes, fac.n, tokens=tokens, future=keys, times=records["timestamp"] if times else None)
        if progress is not None:
            progress(lo + len(ids))
        start = time.perf_counter()
    if future is not None:
        future.finish()
    return references, total_tokens, read_s


def stream_simulate(path, policies, capacities, chunk_refs: int = CHUNK_REFS, params: dict | None = None,
                    progress=None, keep_hits: bool = False, temp_dir=None, note=None, cost: dict | None = None
                    ) -> tuple[list[SimResult], dict]:
    """Replay the oracleGeneral file `path` through every policy module in `policies` at every
    capacity, reading it once, `chunk_refs` records at a time. `params`: policy NAME -> its
    parameters. Returns (results in policy-then-capacity order, trace summary: references,
    distinct blocks, seconds reading and factorising). `progress(records_done)` is called
    after each chunk; `note(text)` is told of extra passes (belady's next uses).

    Belady runs read each reference's next use: from the file's next_access_vtime when
    `file_pointer_base` accepts it (checked as it streams; if a pointer turns out wrong, those
    runs are replayed again with computed ones), else computed first in `temp_dir` (default:
    the system's, TMPDIR) by two extra passes (`_ComputedFuture`). `keep_hits`: each result's
    request_hits holds its per-reference hit flags (for tests; 4 bytes a reference). `cost`:
    the cost model's keywords (calibration, model, miss) for the adaptive policies' P99 signal."""
    from ..traces.oracle import oracle_records

    params = params or {}
    runs = [(m, int(c), dict(params.get(m.NAME, {}))) for m in policies for c in capacities]
    times = any(needs_times(m) for m, _, _ in runs)
    cost = {k: v for k, v in (cost or {}).items() if v is not None}  # None: the cost model's default
    info = {**trace_span(path), "cost": cost} if times else None
    replay = StreamReplay(runs, keep_hits=keep_hits, info=info)
    fac = _factorizer(path)
    future = None
    if any(needs_future(m) for m, _, _ in runs):
        n_total = oracle_records(path)
        base = file_pointer_base(path)
        if base is None:
            if note is not None:
                note("belady: next_access_vtime absent or wrong in the file's head; computing each reference's "
                     f"next use first (two extra passes, {12 * n_total / 2**20:,.1f} MiB of temporary files)")
            future = _ComputedFuture(path, fac, n_total, chunk_refs, temp_dir)
        else:
            future = _FileFuture(base, n_total)
    try:
        references, total_tokens, read_s = _replay_pass(path, replay, fac, chunk_refs, future, progress, times)
    finally:
        if future is not None:
            future.close()
    results = replay.results(references, total_tokens)
    if future is not None and future.broken_at is not None:
        if note is not None:
            note(f"belady: next_access_vtime does not match the trace (record {future.broken_at + 1}); replaying "
                 "belady again with next uses computed (three more passes)")
        redo = [k for k, (m, _, _) in enumerate(runs) if needs_future(m)]
        again = StreamReplay([runs[k] for k in redo], keep_hits=keep_hits)
        computed = _ComputedFuture(path, fac, future.n_total, chunk_refs, temp_dir)
        try:
            _replay_pass(path, again, fac, chunk_refs, computed)
        finally:
            computed.close()
        for k, result in zip(redo, again.results(references, total_tokens)):
            results[k] = result
    summary = {"path": str(path), "format": "oracle", "references": references, "requests": references,
               "distinct_blocks": fac.n, "read_seconds": read_s, "streamed": True}
    return results, summary


def trace_span(path) -> dict:
    """References and first and last timestamps of an oracleGeneral file: its first record and
    its last (read by seeking, or by one pass over a compressed file)."""
    from ..traces.opening import compression
    from ..traces.oracle import ORACLE_DTYPE, iter_oracle_chunks, oracle_records

    n = oracle_records(path)
    first = last = None
    if compression(path) is None:
        with open(path, "rb") as fh:
            head = np.frombuffer(fh.read(ORACLE_DTYPE.itemsize), dtype=ORACLE_DTYPE)
            fh.seek((n - 1) * ORACLE_DTYPE.itemsize)
            tail = np.frombuffer(fh.read(ORACLE_DTYPE.itemsize), dtype=ORACLE_DTYPE)
        first, last = float(head["timestamp"][0]), float(tail["timestamp"][0])
    else:
        for lo, records in iter_oracle_chunks(path, CHUNK_REFS):
            if lo == 0:
                first = float(records["timestamp"][0])
            last = float(records["timestamp"][-1])
    return {"references": n, "first_time": first, "last_time": last}


def count_distinct(path, chunk_refs: int = CHUNK_REFS) -> int:
    """Distinct ids of an oracleGeneral file, in one streaming pass (for capacities given as a
    share of the distinct blocks, which a single streaming pass cannot know in advance)."""
    fac = _factorizer(path)
    buf = np.empty(0, dtype=np.int32)
    for _, ids, _ in _oracle_chunks(path, chunk_refs):
        if len(buf) < len(ids):
            buf = np.empty(len(ids), dtype=np.int32)
        fac.codes(ids, out=buf)
    return fac.n
