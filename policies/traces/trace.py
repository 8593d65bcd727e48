"""The one columnar trace every reader produces and every policy consumes.

A trace is a sequence of KV-cache block references in arrival order. Block ids are dense
integers 0..n_blocks-1 (factorised from the original ids) so policies can index flat arrays
instead of hashing objects. Requests are contiguous runs of references, in order.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "Trace",
]

DEFAULT_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class Trace:
    """Columnar block-reference trace; every per-reference array has the same length.

    time         float64  seconds since the trace's start
    request      int64    request index (non-decreasing; references of one request are contiguous);
                          int32 0..n-1 in traces of one reference per request (oracle, CSV, ids)
    block        int32    dense block id, 0..n_blocks-1, in order of first appearance
    original_id  int64    the id as the trace file gave it
    position     int32    position of the block within its request (0 = first block)
    tokens       int32    tokens this reference carries (a request's last block may be partial)
    tenant       int32    tenant / model-stack code into `tenant_names`, -1 where unknown

    A column that holds one value for every reference (position 0 and tenant -1 of
    one-reference requests, a constant size, no times) may be a read-only zero-stride view
    (`np.broadcast_to`): it indexes, slices and sums like any array but costs no memory.
    Treat columns as read-only; code that hands one to a compiled loop should make it
    contiguous (`np.ascontiguousarray`) or, for a constant, use its one value.
    """

    time: np.ndarray
    request: np.ndarray
    block: np.ndarray
    original_id: np.ndarray
    position: np.ndarray
    tokens: np.ndarray
    tenant: np.ndarray
    tenant_names: tuple[str, ...] = ()
    # Per-request output length in tokens (-1 where the trace does not say), for the cost model.
    request_output_tokens: np.ndarray | None = None
    source: str = ""
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    n_blocks: int = field(default=-1)
    # Input lines (or records) a reader skipped with skip_bad_lines=True, and the first few
    # of them as "file:line: problem" strings, so callers can report what was dropped.
    skipped_lines: int = 0
    skipped_examples: tuple[str, ...] = ()
    # Per-request prompt text (None where a request has none), when the trace carries it (the
    # request JSONL format's `prompt`); semantic-shard's embedding shard key clusters it.
    request_texts: tuple[str | None, ...] | None = None

    def __post_init__(self) -> None:
        n = len(self.block)
        for name in ("time", "request", "original_id", "position", "tokens", "tenant"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Trace.{name} has {len(getattr(self, name))} entries, block has {n}")
        if self.n_blocks < 0:
            object.__setattr__(self, "n_blocks", int(self.block.max()) + 1 if n else 0)

    def __len__(self) -> int:
        return len(self.block)

    @property
    def n_requests(self) -> int:
        return int(self.request[-1]) + 1 if len(self.request) else 0

    @property
    def span_s(self) -> float:
        """Seconds of trace time from the first reference to the last (0 for an empty trace),
        the denominator of per-second rates such as evictions per second."""
        return float(self.time[-1] - self.time[0]) if len(self.time) else 0.0

    @property
    def request_offsets(self) -> np.ndarray:
        """CSR offsets: references of request r are [offsets[r], offsets[r+1]), int64.

        Computed on each access (a frozen trace caches nothing); a caller that needs them
        for many replays keeps the array."""
        from .offsets import request_offsets  # compiled: numba loads only when replaying

        return request_offsets(np.ascontiguousarray(self.request), self.n_requests)
