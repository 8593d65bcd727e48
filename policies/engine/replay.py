"""Replay a prepared trace through one policy module and summarise what a serving engine would see.

`run_kernel(Prepared(trace), module, capacity, params)` runs one policy kernel (see
docs/CONTRACTS.md) over the trace's dense block ids and turns its per-reference hit flags
into the figures below in one compiled pass over the requests (no Python work per
reference, no per-reference temporaries). Looking a policy up by name is one layer up
(`policies.sweep.simulate`), so this module imports no policy.

block_hit_ratio   hits / references
token_hit_ratio   tokens carried by hit references / all tokens (`Trace.tokens`)
prefix_hit_ratio  per request only the leading run of hits counts, since a serving engine can
                  reuse only a cached prefix; summed over requests, divided by all references
request_hits      hits per request (int32 array, one entry per request; in a trace of one
                  reference per request it is made from the hit flags when first read)
evictions, max_resident  as the kernel reports them
seconds           wall time of the kernel alone (the JIT compile excluded after the first call)
"""
from __future__ import annotations

import dis
import sys
import time
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np

from sitsprof.common.jit import njit

from ..errors import PolicyEngineError
from ..traces.ids import trace_from_ids
from ..traces.offsets import request_offsets
from ..traces.trace import Trace
from .params import check_params, kernel_params

__all__ = [
    "Prepared",
    "SimResult",
    "as_trace",
    "dense_blocks",
    "hit_flags_of",
    "one_reference_each",
    "reads_offsets",
    "request_stats",
    "result_from_hits",
    "run_kernel",
    "set_hit_flags",
    "summarise",
    "token_weights",
]


@dataclass
class SimResult:
    """What one (policy, capacity) replay of a trace produced."""

    policy: str
    capacity: int
    references: int
    hits: int
    block_hit_ratio: float
    token_hit_ratio: float
    prefix_hit_ratio: float
    evictions: int
    max_resident: int
    request_hits: np.ndarray
    seconds: float
    extra: dict = field(default_factory=dict)

    def to_dict(self, request_hits: bool = False) -> dict:
        """Plain JSON-serialisable fields; the per-request array only when `request_hits`."""
        out = {
            "policy": self.policy,
            "capacity": int(self.capacity),
            "references": int(self.references),
            "hits": int(self.hits),
            "block_hit_ratio": float(self.block_hit_ratio),
            "token_hit_ratio": float(self.token_hit_ratio),
            "prefix_hit_ratio": float(self.prefix_hit_ratio),
            "evictions": int(self.evictions),
            "max_resident": int(self.max_resident),
            "requests": int(self.n_requests),
            "seconds": float(self.seconds),
            "extra": {k: _plain(v) for k, v in self.extra.items()},
        }
        if request_hits:
            out["request_hits"] = self.request_hits.tolist()
        return out

    @property
    def n_requests(self) -> int:
        """len(request_hits), without building it."""
        return len(self.__dict__["_request_hits"])


class _HitsOfFlags:
    """`SimResult.request_hits` of a trace of one reference per request, not yet built: the
    replay's hit flags (1 byte a reference), widened to int32 0/1 when first read."""

    __slots__ = ("flags",)

    def __init__(self, flags: np.ndarray):
        self.flags = flags

    def __len__(self) -> int:
        return len(self.flags)

    def build(self) -> np.ndarray:
        return (self.flags != 0).astype(np.int32)


def hit_flags_of(result) -> np.ndarray | None:
    """The hit flags (1 byte a reference) behind a one-reference-per-request result whose
    `request_hits` has not been built yet, else None (the parallel sweep sends these bit-packed)."""
    value = getattr(result, "__dict__", {}).get("_request_hits")
    return value.flags if isinstance(value, _HitsOfFlags) else None


def set_hit_flags(result, flags: np.ndarray) -> None:
    """Give `result` the lazy `request_hits` of these hit flags (the inverse of `hit_flags_of`)."""
    result.__dict__["_request_hits"] = _HitsOfFlags(flags)


def _get_request_hits(self) -> np.ndarray:
    value = self.__dict__["_request_hits"]
    if isinstance(value, _HitsOfFlags):
        value = self.__dict__["_request_hits"] = value.build()
    return value


def _set_request_hits(self, value) -> None:
    self.__dict__["_request_hits"] = value


# a field of the dataclass (constructor, repr, eq, fields(), pickling) read through a property,
# so the per-request array of a one-reference-per-request replay exists only once asked for
SimResult.request_hits = property(_get_request_hits, _set_request_hits, doc="hits per request (int32)")


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def as_trace(trace_or_blocks) -> Trace:
    """A Trace as is; a 1-D sequence of block ids as a trace of one-block requests."""
    if isinstance(trace_or_blocks, Trace):
        return trace_or_blocks
    ids = np.asarray(trace_or_blocks)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise PolicyEngineError(
            f"expected a Trace or a 1-D array of integer block ids, got {type(trace_or_blocks).__name__}"
            f" of dtype {getattr(ids, 'dtype', '?')} and shape {getattr(ids, 'shape', '?')}"
        )
    return trace_from_ids(ids)


def dense_blocks(trace: Trace) -> tuple[np.ndarray, int]:
    """The trace's block ids as contiguous int32 and their count, checked to lie in
    0..n_blocks-1 (a compiled kernel indexes arrays with them unchecked)."""
    block = np.ascontiguousarray(trace.block, dtype=np.int32)
    n_blocks = int(trace.n_blocks)
    if len(block) and (int(block.min()) < 0 or int(block.max()) >= n_blocks):
        raise PolicyEngineError(
            f"trace block ids must be dense in 0..{n_blocks - 1}; got "
            f"{int(block.min())}..{int(block.max())} (build traces with the readers)"
        )
    return block, n_blocks


def one_reference_each(trace: Trace) -> bool:
    """Whether request i is reference i (oracleGeneral, CSV, id traces): `request` int32
    0..n-1, as `trace_from_ids` builds it. Checked in full: one pass over the column."""
    request = np.asarray(trace.request)
    n = len(request)
    if not n or request.dtype != np.int32 or int(request[0]) != 0 or int(request[-1]) != n - 1:
        return False
    return bool(_is_identity(np.ascontiguousarray(request)))


@njit(cache=True)
def _is_identity(request):
    bad = 0
    for i in range(request.shape[0]):  # no early exit: the loop vectorises
        bad |= request[i] ^ i
    return bad == 0


_READS = {}  # kernel code -> whether it reads its req_offsets argument


def reads_offsets(kernel) -> bool:
    """Whether a compiled KERNEL's code ever loads its `req_offsets` argument (only prefix-LRU
    does); anything that is not a numba function with that argument counts as reading it."""
    func = getattr(kernel, "py_func", None)
    code = getattr(func, "__code__", None)
    if code is None or code.co_argcount < 2:
        return True
    if code not in _READS:
        name = code.co_varnames[1]
        _READS[code] = name in code.co_cellvars or any(
            ins.opname.startswith("LOAD") and name in (ins.argval if isinstance(ins.argval, tuple) else (ins.argval,))
            for ins in dis.get_instructions(code)  # 3.12+ pairs loads: LOAD_FAST_LOAD_FAST (a, b)
        )
    return _READS[code]


class Prepared:
    """Per-trace arrays every replay needs, computed once for many (policy, capacity) runs.

    In a trace of one reference per request (`one_each`) the request offsets are 0..n and are
    built only when something reads `offsets` (a kernel that reads them, the cost model), and a
    replay's per-request hits are its hit flags: the result keeps the flags (`hit`, handed
    over; the next replay gets a fresh array) and widens them only when `request_hits` is read.
    """

    def __init__(self, trace: Trace):
        self.trace = trace
        self.block, self.n_blocks = dense_blocks(trace)
        self.one_each = one_reference_each(trace)
        self._offsets = None
        self.weights = token_weights(trace)
        self.hit = np.zeros(len(self.block), dtype=np.uint8)
        self._hit_state = "zero"  # "zero": fresh from np.zeros; "used": written; "lent": a result holds it

    @property
    def offsets(self) -> np.ndarray:
        if self._offsets is None:
            if self.one_each:
                self._offsets = np.arange(len(self.block) + 1, dtype=np.int64)
            else:
                self._offsets = request_offsets(np.ascontiguousarray(self.trace.request), self.trace.n_requests)
        return self._offsets

    def kernel_offsets(self, kernel) -> np.ndarray:
        """The offsets to hand `kernel`: the real ones when it reads them, else two entries."""
        if self._offsets is not None or not self.one_each or reads_offsets(kernel):
            return self.offsets
        return np.array([0, len(self.block)], dtype=np.int64)

    def fresh_hit(self) -> np.ndarray:
        """The hit array for the next replay, all zeros."""
        if self._hit_state == "lent":
            self.hit = np.zeros(len(self.block), dtype=np.uint8)
        elif self._hit_state == "used":
            self.hit.fill(0)  # the contract asks kernels to write every flag; do not depend on it
        self._hit_state = "used"
        return self.hit


def token_weights(trace: Trace) -> tuple[int | None, np.ndarray, int]:
    """(weight, tokens, total tokens) for `summarise`: a column with one value for every
    reference (zero-stride) is that weight and an empty `tokens`, so no per-reference copy
    is made; otherwise weight None and the column as contiguous int32."""
    tokens = np.asarray(trace.tokens)
    if len(tokens) and tokens.strides[0] == 0:
        weight = int(tokens[0])
        return weight, np.zeros(0, dtype=np.int32), weight * len(tokens)
    tokens = np.ascontiguousarray(tokens, dtype=np.int32)
    return None, tokens, int(tokens.sum(dtype=np.int64))


class _NotANumber(Exception):
    """A parameter that is not a number (or None)."""


def _typing_errors() -> tuple:
    """What a kernel call raises for parameters of the wrong type: numba's TypingError when
    numba is loaded (evaluated after the call, so a first compiled call counts), and ours."""
    errors = sys.modules.get("numba.core.errors")
    return (_NotANumber,) if errors is None else (_NotANumber, errors.TypingError)


def run_kernel(prep: Prepared, module: ModuleType, capacity: int, params: dict) -> SimResult:
    """Replay `prep` through `module`'s KERNEL at `capacity` (checked by the caller) with `params`."""
    allowed = list(kernel_params(module))
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise PolicyEngineError(
            f"policy {module.NAME!r} has no parameter {', '.join(unknown)}; "
            f"it takes {', '.join(allowed) if allowed else 'none'}"
        )
    check_params(module, params)
    hit = prep.fresh_hit()
    offsets = prep.kernel_offsets(module.KERNEL)
    start = time.perf_counter()
    try:
        if not all(v is None or isinstance(v, (int, float, np.number)) for v in params.values()):
            raise _NotANumber  # what numba refuses as a TypingError, refused before any kernel runs
        evictions, max_resident = module.KERNEL(
            prep.block, offsets, np.int64(prep.n_blocks), np.int64(capacity), hit, **params
        )
    except _typing_errors():
        given = ", ".join(f"{k}={v!r}" for k, v in params.items())
        raise PolicyEngineError(
            f"policy {module.NAME!r} cannot take {given}: parameters are numbers "
            f"({', '.join(allowed)})"
        ) from None
    seconds = time.perf_counter() - start
    if prep.one_each and prep.weights[0] is not None:
        prep._hit_state = "lent"  # the result keeps these flags as its request_hits
        return _flag_result(prep.weights, module.NAME, capacity, hit, evictions, max_resident, seconds, params)
    return summarise(prep.offsets, prep.weights, module.NAME, capacity, hit, evictions, max_resident, seconds, params)


def _flag_result(weights, name, capacity, hit, evictions, max_resident, seconds, extra) -> SimResult:
    """`summarise` where request i is reference i and every reference weighs the same: each
    request's hits are its one flag and its leading run of hits is that flag, so the figures
    are the count of set flags, and request_hits is built from `hit` only when read."""
    weight, _, total_tokens = weights
    hits = int(np.count_nonzero(hit))
    return _result(name, capacity, len(hit), hits, hits, hits * weight, total_tokens, evictions, max_resident,
                   _HitsOfFlags(hit), seconds, extra)


def _result(name, capacity, n, hits, prefix_hits, hit_tokens, total_tokens, evictions, max_resident,
            request_hits, seconds, extra) -> SimResult:
    return SimResult(
        policy=name,
        capacity=int(capacity),
        references=n,
        hits=hits,
        block_hit_ratio=hits / n if n else 0.0,
        token_hit_ratio=int(hit_tokens) / total_tokens if total_tokens else 0.0,
        prefix_hit_ratio=int(prefix_hits) / n if n else 0.0,
        evictions=int(evictions),
        max_resident=int(max_resident),
        request_hits=request_hits,
        seconds=float(seconds),
        extra=dict(extra),
    )


@njit(cache=True)
def request_stats(hit, offsets, tokens, request_hits):
    """Per-request hits (into `request_hits`, every entry written), all hits, hits inside each
    request's leading run of hits, and hit tokens (summed from `tokens`; 0 when `tokens` is
    empty, i.e. every reference weighs the same)."""
    n_requests = offsets.shape[0] - 1
    weighted = tokens.shape[0] > 0
    hits = 0
    prefix_hits = 0
    hit_tokens = 0
    for r in range(n_requests):  # branch-free in the flags: hits and misses come unpredictably
        count = 0
        leading = 1
        for i in range(offsets[r], offsets[r + 1]):
            h = np.int64(hit[i] != 0)
            count += h
            leading &= h
            prefix_hits += leading
            if weighted:
                hit_tokens += tokens[i] * h
        request_hits[r] = count
        hits += count
    return hits, prefix_hits, hit_tokens


def summarise(offsets, weights, name, capacity, hit, evictions, max_resident, seconds, extra) -> SimResult:
    """The SimResult of one replay from its per-reference hit flags, in one compiled pass over
    the requests; `weights` from token_weights. Shared by the engine and the trace-aware
    policies (sits, semantic-shard) and the cost model, so every path counts alike."""
    weight, tokens, total_tokens = weights
    n = len(hit)
    # from numpy, not the compiled pass: huge pages instead of a fault per 4 KiB (offsets.py)
    request_hits = np.empty(len(offsets) - 1, dtype=np.int32)
    hits, prefix_hits, hit_tokens = request_stats(hit, offsets, tokens, request_hits)
    hits = int(hits)
    if weight is not None:
        hit_tokens = hits * weight
    return _result(name, capacity, n, hits, prefix_hits, hit_tokens, total_tokens, evictions, max_resident,
                   request_hits, seconds, extra)


def result_from_hits(trace: Trace, offsets, name, capacity, hit, evictions, max_resident, seconds, extra) -> SimResult:
    """The SimResult of a replay that did not go through `run_kernel` (the adaptive policies'
    `run`), from its per-reference hit flags, by the same per-request pass."""
    return summarise(offsets, token_weights(trace), name, capacity, hit, evictions, max_resident, seconds, extra)
