"""Streaming replay: a trace read in chunks, every policy's state kept between them.

`stream_simulate(path, policies, capacities)` replays an oracleGeneral file (libCacheSim's
binary format) through each (policy module, capacity) without holding the trace: records are
read `chunk_refs` at a time (`traces.oracle.iter_oracle_chunks`), their ids factorised by one
persistent table (`traces.factorize.Factorizer`, the codes of the whole-trace factorisation),
and each run's kernel serves the chunk through its resumable form. Peak memory is then the
distinct blocks (the id table, about 12-24 bytes each, and each policy's per-block state)
plus the capacity-sized queues and one chunk, not the trace's length.

Resumable form (the classic policies besides belady; docs/scale.md): a module exposes
`new_stream_state(n_blocks, capacity, **params) -> state` (a tuple of arrays),
`grow_state(state, n_blocks, capacity, **params) -> state` (more block ids: per-block arrays
grown, queue contents kept), `max_resident(state)`, and either
`stream_window(state, block, lo, hi, capacity, hit, **params) -> evictions` (references
lo..hi-1) or, for a policy that works request by request (prefix_lru),
`stream_requests(state, block, req_offsets, capacity, hit) -> evictions`. Distinct blocks are
not known in advance, so the state starts small and grows geometrically (`GROWTH`) between
chunks as new ids appear; the hit flags are the in-memory replay's, reference for reference
(tests/test_stream.py, chunk sizes 1, 7, 1000 and whole).

What streaming gives up: per-request figures that need the whole trace (`request_hits` is
empty; the cost model's TTFT is not computed), the check that each next_access_vtime points
at a record of the same object (that record may lie in another chunk), and --skip-bad-lines
(the first bad record is refused). An oracleGeneral record is one request of one block, so
the prefix hit ratio is the block hit ratio; the token hit ratio weighs hits by obj_size.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np

from sitsprof.common.jit import njit

from ..errors import PolicyEngineError
from ..traces.factorize import Factorizer
from .params import check_params, kernel_params
from .replay import SimResult

#: Default chunk: 1M references (24 MB of records, 4 MB of codes, 1 MB of hit flags).
CHUNK_REFS = 1 << 20
#: Per-block state grows to at least this factor of its size when new ids outgrow it.
GROWTH = 1.5
_FIRST_BLOCKS = 1 << 16


class StreamError(PolicyEngineError):
    """A policy or option that the streaming replay cannot serve."""


def streamable(module: ModuleType) -> bool:
    """Whether `module` has the resumable form the streaming replay needs."""
    return hasattr(module, "new_stream_state") and (
        hasattr(module, "stream_window") or hasattr(module, "stream_requests"))


@dataclass
class _Run:
    module: ModuleType
    capacity: int
    params: dict
    state: tuple = ()
    evictions: int = 0
    hits: int = 0
    hit_tokens: int = 0
    seconds: float = 0.0
    kept: list = field(default_factory=list)


@njit(cache=True)
def _weighted_hits(hit, tokens):
    total = 0
    for i in range(hit.shape[0]):
        if hit[i]:
            total += tokens[i]
    return total


def _check(module: ModuleType, params: dict) -> None:
    if not streamable(module):
        raise StreamError(
            f"policy {module.NAME!r} cannot be streamed (it needs the whole trace: "
            f"{'the future of every reference' if module.NAME == 'belady' else 'adaptive windows'}); "
            "replay it without --stream, or leave it out")
    allowed = list(kernel_params(module))
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise PolicyEngineError(
            f"policy {module.NAME!r} has no parameter {', '.join(unknown)}; "
            f"it takes {', '.join(allowed) if allowed else 'none'}")
    check_params(module, params)


class StreamReplay:
    """Runs of (module, capacity, params) fed chunk by chunk with dense block ids.

    `feed(block, n_blocks, tokens=None, offsets=None)`: `block` the chunk's dense ids (all
    below `n_blocks`, the distinct blocks so far), `tokens` per-reference weights or None
    (weight 1), `offsets` the chunk's request offsets (0..len) or None (one reference each).
    `results(references, total_tokens)` then gives one SimResult per run."""

    def __init__(self, runs: Iterable[tuple[ModuleType, int, dict]], keep_hits: bool = False,
                 first_blocks: int = _FIRST_BLOCKS):
        self.runs = []
        for module, capacity, params in runs:
            _check(module, dict(params))
            self.runs.append(_Run(module, int(capacity), dict(params)))
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
                run.state = run.module.new_stream_state(self.allocated, run.capacity, **run.params)
            else:
                run.state = run.module.grow_state(run.state, self.allocated, run.capacity, **run.params)

    def feed(self, block: np.ndarray, n_blocks: int, tokens: np.ndarray | None = None,
             offsets: np.ndarray | None = None) -> None:
        block = np.ascontiguousarray(block, dtype=np.int32)
        n = len(block)
        if n == 0:
            return
        self._grow(int(n_blocks))
        if len(self._hit) < n:
            self._hit = np.zeros(n, dtype=np.uint8)
        hit = self._hit[:n]
        uniform = None
        if tokens is not None:
            tokens = np.ascontiguousarray(tokens, dtype=np.int64)
            if int(tokens.min()) == int(tokens.max()):
                uniform, tokens = int(tokens[0]), None
        for run in self.runs:
            start = time.perf_counter()
            if hasattr(run.module, "stream_window"):
                ev = run.module.stream_window(run.state, block, 0, n, run.capacity, hit, **run.params)
            else:
                offs = np.arange(n + 1, dtype=np.int64) if offsets is None else np.asarray(offsets, dtype=np.int64)
                ev = run.module.stream_requests(run.state, block, offs, run.capacity, hit, **run.params)
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

    def hits_of(self, k: int) -> np.ndarray:
        """Run k's per-reference hit flags (only with keep_hits)."""
        kept = self.runs[k].kept
        return np.concatenate(kept) if kept else np.zeros(0, dtype=np.uint8)

    def results(self, references: int, total_tokens: int, prefix_hits: list[int] | None = None,
                extra: dict | None = None) -> list[SimResult]:
        out = []
        for k, run in enumerate(self.runs):
            prefix = run.hits if prefix_hits is None else prefix_hits[k]
            out.append(SimResult(
                policy=run.module.NAME, capacity=run.capacity, references=int(references), hits=run.hits,
                block_hit_ratio=run.hits / references if references else 0.0,
                token_hit_ratio=run.hit_tokens / total_tokens if total_tokens else 0.0,
                prefix_hit_ratio=prefix / references if references else 0.0,
                evictions=run.evictions, max_resident=run.module.max_resident(run.state),
                request_hits=np.zeros(0, dtype=np.int32), seconds=run.seconds,
                extra={**run.params, "streamed": True, **(extra or {})},
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
    return replay.hits_of(0), run.evictions, (run.module.max_resident(run.state) if run.state else 0)


def _oracle_chunks(path, chunk_refs: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    from ..traces.oracle import iter_oracle_chunks

    for lo, records in iter_oracle_chunks(path, chunk_refs):
        yield lo, records["obj_id"].view(np.int64), records["obj_size"]


def stream_simulate(path, policies, capacities, chunk_refs: int = CHUNK_REFS, params: dict | None = None,
                    progress=None) -> tuple[list[SimResult], dict]:
    """Replay the oracleGeneral file `path` through every policy module in `policies` at every
    capacity, reading it once, `chunk_refs` records at a time. `params`: policy NAME -> its
    parameters. Returns (results in policy-then-capacity order, trace summary: references,
    distinct blocks, seconds reading and factorising). `progress(records_done)` is called
    after each chunk."""
    params = params or {}
    runs = [(m, int(c), dict(params.get(m.NAME, {}))) for m in policies for c in capacities]
    replay = StreamReplay(runs)
    fac = Factorizer()
    references = total_tokens = 0
    codes_buf = np.empty(0, dtype=np.int32)
    read_s = 0.0
    start = time.perf_counter()
    for lo, ids, sizes in _oracle_chunks(path, chunk_refs):
        if len(codes_buf) < len(ids):
            codes_buf = np.empty(len(ids), dtype=np.int32)
        codes = fac.codes(ids, out=codes_buf)
        tokens = np.minimum(sizes, 2**31 - 1)
        references += len(ids)
        total_tokens += int(tokens.sum(dtype=np.int64))
        read_s += time.perf_counter() - start
        replay.feed(codes, fac.n, tokens=tokens)
        if progress is not None:
            progress(lo + len(ids))
        start = time.perf_counter()
    summary = {"path": str(path), "format": "oracle", "references": references, "requests": references,
               "distinct_blocks": fac.n, "read_seconds": read_s, "streamed": True}
    return replay.results(references, total_tokens), summary


def count_distinct(path, chunk_refs: int = CHUNK_REFS) -> int:
    """Distinct ids of an oracleGeneral file, in one streaming pass (for capacities given as a
    share of the distinct blocks, which a single streaming pass cannot know in advance)."""
    fac = Factorizer()
    buf = np.empty(0, dtype=np.int32)
    for _, ids, _ in _oracle_chunks(path, chunk_refs):
        if len(buf) < len(ids):
            buf = np.empty(len(ids), dtype=np.int32)
        fac.codes(ids, out=buf)
    return fac.n
