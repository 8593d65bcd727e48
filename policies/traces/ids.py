"""Dense block ids and the two `Trace` builders every reader (and the generator) ends in.

Policies index flat arrays by block, so every trace's ids become dense int32 codes in order
of first appearance, through one compiled factorisation (`factorize.py`), never a Python
dict per id. A trace is built one of two ways: one reference per request (oracle, CSV,
synthetic id arrays: `trace_from_ids`) or Mooncake-style multi-block requests
(`trace_from_requests`).
"""
from __future__ import annotations

import itertools

import numpy as np

from ..errors import TraceFormatError
from .trace import DEFAULT_BLOCK_TOKENS, Trace

__all__ = [
    "INT32_MAX",
    "constant_column",
    "dense_ids",
    "hash_id_array",
    "request_blocks",
    "trace_from_ids",
    "trace_from_requests",
]

INT32_MAX = 2**31 - 1


def dense_ids(original: np.ndarray) -> tuple[np.ndarray, int]:
    """Factorise ids into dense int32 codes 0..k-1 in order of first appearance; returns (codes, k).

    Integer ids go through the compiled factorisation in `factorize.py` (the codes of
    `pandas.factorize(ids, sort=False)`, without importing pandas); uint64 ids are taken as
    their int64 bit patterns, which keeps them distinct and in the same order. Anything else
    (floats, objects) falls back to pandas.factorize."""
    ids = np.asarray(original)
    if ids.dtype.kind in "iub" and ids.ndim == 1 and len(ids) <= INT32_MAX:
        from .factorize import factorize_int64

        if ids.dtype == np.uint64:
            ids = ids.view(np.int64)
        return factorize_int64(ids)
    import pandas as pd

    codes, uniques = pd.factorize(ids, sort=False)
    if len(uniques) > INT32_MAX:
        raise TraceFormatError("<trace>", f"{len(uniques)} distinct blocks do not fit int32 ids")
    return codes.astype(np.int32, copy=False), len(uniques)


def hash_id_array(hash_ids, total: int, source: str = "") -> np.ndarray:
    """The ids of all requests in one int64 array. Ids may be signed 64-bit or unsigned
    64-bit (vLLM's and SGLang's block hashes, up to 2**64 - 1): unsigned ones >= 2**63 are
    held as their int64 bit pattern (two's complement), which keeps them distinct; a trace
    mixing negative ids with ids >= 2**63 is refused, as their patterns could collide."""
    chain = itertools.chain.from_iterable
    try:
        return np.fromiter(chain(hash_ids), dtype=np.int64, count=total)
    except OverflowError:
        pass
    try:
        return np.fromiter(chain(hash_ids), dtype=np.uint64, count=total).view(np.int64)
    except OverflowError:
        raise TraceFormatError(
            source or "<trace>", "hash_ids mix negative ids with ids of 2**63 and above",
            fix="block ids are either signed or unsigned 64-bit integers, not both in one trace",
        ) from None


def constant_column(value, n: int, dtype) -> np.ndarray:
    """A read-only length-`n` column holding `value` everywhere, in no memory (zero stride)."""
    return np.broadcast_to(np.asarray(value, dtype=dtype), (n,))


def trace_from_ids(
    obj_ids,
    times=None,
    tokens=None,
    tenant=None,
    tenant_names: tuple[str, ...] = (),
    source: str = "",
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    codes: tuple[np.ndarray, int] | None = None,
) -> Trace:
    """A Trace where every reference is its own request (oracle/CSV style, synthetic traces).

    `request` is then 0..n-1 as int32 (int64 past 2^31 references) and the columns that are
    the same for every reference (position 0; tokens 1 and tenant -1 when not given) are
    read-only zero-stride views, so a trace costs about 20 bytes a reference plus its times
    (docs/CONTRACTS.md, `Trace`). `codes`: `dense_ids(obj_ids)` when the caller has it already."""
    original = np.ascontiguousarray(obj_ids)
    if original.dtype == np.uint64:
        original = original.view(np.int64)
    original = original.astype(np.int64, copy=False)
    n = len(original)
    block, n_blocks = dense_ids(original) if codes is None else codes
    return Trace(
        time=constant_column(0.0, n, np.float64) if times is None else np.asarray(times, dtype=np.float64),
        request=np.arange(n, dtype=np.int32 if n <= INT32_MAX else np.int64),
        block=block,
        original_id=original,
        position=constant_column(0, n, np.int32),
        tokens=constant_column(1, n, np.int32) if tokens is None else np.asarray(tokens, dtype=np.int32),
        tenant=constant_column(-1, n, np.int32) if tenant is None else np.asarray(tenant, dtype=np.int32),
        tenant_names=tuple(tenant_names),
        source=source,
        block_tokens=block_tokens,
        n_blocks=n_blocks,
    )


def request_blocks(hash_ids, input_tokens, block_tokens: int = DEFAULT_BLOCK_TOKENS, source: str = ""
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Requests as block references: (blocks per request int64, every reference's id int64 by
    `hash_id_array`, its tokens int32). Every block carries `block_tokens` tokens but a
    request's last, which carries `input - block_tokens*(n-1)` clamped to [1, block_tokens].
    `trace_from_requests` and the streaming replay of request files (engine/stream_lines.py)
    both expand requests here, so a streamed chunk's blocks and tokens are the whole trace's."""
    n_per = np.fromiter((len(ids) for ids in hash_ids), dtype=np.int64, count=len(hash_ids))
    total = int(n_per.sum())
    tokens = np.full(total, block_tokens, dtype=np.int32)
    last = np.asarray(input_tokens, dtype=np.int64) - block_tokens * (n_per - 1)
    tokens[np.cumsum(n_per) - 1] = np.clip(last, 1, block_tokens)
    return n_per, hash_id_array(hash_ids, total, source), tokens


def trace_from_requests(
    hash_ids,
    arrival_ms,
    input_tokens,
    output_tokens=None,
    tenant=None,
    tenant_names: tuple[str, ...] = (),
    source: str = "",
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    arrival_s=None,
) -> Trace:
    """A Trace of multi-block requests, Mooncake style: one reference per hash id.

    hash_ids: one sequence of block ids per request (signed or unsigned 64-bit, see
    `hash_id_array`); arrival_ms (or arrival_s, seconds, when given), input_tokens,
    output_tokens and tenant (codes into tenant_names): one value per request. Every block
    carries `block_tokens` tokens except a request's last: `input - block_tokens*(n-1)` in
    [1, block_tokens].
    """
    n_per, original, tokens = request_blocks(hash_ids, input_tokens, block_tokens, source)
    total = len(original)
    ends = np.cumsum(n_per)
    request = np.repeat(np.arange(len(n_per), dtype=np.int64), n_per)
    position = (np.arange(total, dtype=np.int64) - np.repeat(ends - n_per, n_per)).astype(np.int32)
    block, n_blocks = dense_ids(original)
    per_request_tenant = np.full(len(n_per), -1) if tenant is None else np.asarray(tenant)
    arrival = (np.asarray(arrival_ms, dtype=np.float64) / 1000.0 if arrival_s is None
               else np.asarray(arrival_s, dtype=np.float64))
    return Trace(
        time=np.repeat(arrival, n_per),
        request=request,
        block=block,
        original_id=original,
        position=position,
        tokens=tokens,
        tenant=np.repeat(per_request_tenant.astype(np.int32), n_per),
        tenant_names=tuple(tenant_names),
        request_output_tokens=None if output_tokens is None else np.asarray(output_tokens, dtype=np.int64),
        source=source,
        block_tokens=block_tokens,
        n_blocks=n_blocks,
    )
