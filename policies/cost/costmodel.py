"""Turn a replay into time: per-request time to first token (TTFT) and per-run percentiles.

Per referenced block (``block_tokens`` tokens at block position j of its request):

hit       read the block's KV bytes from HBM: ``kv_bytes / hbm_read_bw + hbm_latency``
recompute prefill the block again: ``(2 * active_params * tokens + attention) / (peak * achieved
          fraction) + kv_bytes / hbm_write_bw``, where attention over the prefix before it
          costs ``4 * layers * q_heads * attn_dim * tokens * (start + tokens / 2)`` FLOPs
reload    copy the block back from host memory: ``kv_bytes / host_to_device_bw + hbm_latency``

A serving engine reuses only a request's cached *prefix*: with ``miss="recompute"`` every
block after the first miss is recomputed even when it is resident; with ``miss="reload"``
resident blocks past a miss are still read from HBM and missing ones reloaded from host.
Compute and bandwidth terms are divided by the preset's tensor-parallel degree. TTFT adds
one decode step (weights plus the context's KV read once). Requests are served one at a
time: no queueing is modelled, so the percentiles are those of service time, not of
latency under load.

GPU figures come from a `sitsprof.calibration.Calibration` (its attributes, no key reads
here); none given means the shipped ``hopper-published`` reference, which is not a measurement.
"""
from __future__ import annotations

import numpy as np

from sitsprof.calibration import Calibration, CalibrationError
from sitsprof.common.jit import njit

from ..errors import CostModelError
from ..traces.trace import Trace
from .models import DEFAULT_MODEL, PRESETS, ModelPreset, get_model

__all__ = [
    "DECODE_FIXED",
    "DECODE_PER_TOKEN",
    "HIT_FIXED",
    "HIT_PER_TOKEN",
    "MISS_ATTN",
    "MISS_FIXED",
    "MISS_MODES",
    "MISS_PER_TOKEN",
    "CostModel",
    "kth_smallest",
    "latency_summary",
    "leading_hits",
    "percentiles",
    "request_tokens",
    "token_column",
    "ttft_from_costs",
    "ttft_kernel",
]

MISS_MODES = ("recompute", "reload")
# Columns of the coefficient table (one row per model preset in use), all in seconds.
HIT_PER_TOKEN, HIT_FIXED, MISS_PER_TOKEN, MISS_FIXED, MISS_ATTN, DECODE_FIXED, DECODE_PER_TOKEN = range(7)


class CostModel:
    """Prices every block reference of a trace as a hit or a miss, then sums per request."""

    def __init__(self, calibration=None, model: str | ModelPreset = DEFAULT_MODEL, miss: str = "recompute",
                 stack_models: bool = True):
        if miss not in MISS_MODES:
            raise CostModelError(f"miss cost {miss!r} unknown; choose from {', '.join(MISS_MODES)}")
        #: the GPU figures (a `Calibration`: one given is used as is, a path or dict is read once here)
        self.gpu = Calibration.of(calibration)
        self.gpu.require_flops()
        if miss == "reload" and self.gpu.host_bps <= 0:
            raise CalibrationError("bandwidth.host_to_device_gbs", "is needed to price host reloads (miss='reload')")
        self.model = model if isinstance(model, ModelPreset) else get_model(model)
        self.miss = miss
        self.stack_models = stack_models

    # -- per reference --------------------------------------------------------------
    def _presets(self, trace: Trace | None) -> tuple[list[ModelPreset], np.ndarray | None]:
        """Presets in use and, per reference, its index (None when every reference uses the
        default); tenants named after a preset use that preset. No trace: the default only."""
        presets = [self.model]
        if trace is None or not (self.stack_models and trace.tenant_names):
            return presets, None
        code_to_index = np.zeros(len(trace.tenant_names) + 1, dtype=np.int64)
        for code, name in enumerate(trace.tenant_names):
            if name in PRESETS:
                if PRESETS[name] not in presets:
                    presets.append(PRESETS[name])
                code_to_index[code] = presets.index(PRESETS[name])
        if len(presets) == 1:
            return presets, None
        return presets, _preset_index(np.ascontiguousarray(trace.tenant), code_to_index.astype(np.int8))

    def coefficients(self, trace: Trace) -> tuple[np.ndarray, np.ndarray]:
        """(table, index): table[k] holds preset k's cost coefficients (columns above); index
        gives each reference's row (int8), or is empty when one preset serves every reference."""
        presets, index = self._presets(trace)
        g = self.gpu
        table = np.zeros((len(presets), 7))
        for k, p in enumerate(presets):
            tp = float(p.tensor_parallel)
            kv = float(p.kv_bytes_per_token)
            table[k, HIT_PER_TOKEN] = kv / (g.hbm_read_bps * tp)
            table[k, HIT_FIXED] = g.hbm_latency_s
            if self.miss == "reload":
                table[k, MISS_PER_TOKEN] = kv / (g.host_bps * tp)
                table[k, MISS_FIXED] = g.hbm_latency_s
            else:
                table[k, MISS_PER_TOKEN] = 2e9 * p.params_active_b / (g.flops * tp) + kv / (g.hbm_write_bps * tp)
                table[k, MISS_ATTN] = 4.0 * p.layers * p.q_heads * p.attn_dim / (g.flops * tp)
            table[k, DECODE_FIXED] = p.params_total_b * 1e9 * p.dtype_bytes / (g.hbm_read_bps * tp)
            table[k, DECODE_PER_TOKEN] = kv / (g.hbm_read_bps * tp)
        idx = np.zeros(0, dtype=np.int8) if index is None else index
        return table, idx

    def block_costs(self, trace: Trace) -> tuple[np.ndarray, np.ndarray]:
        """(hit seconds, miss seconds) for every reference."""
        table, index = self.coefficients(trace)
        rows = table[0] if not len(index) else table[index].T
        tokens = np.asarray(trace.tokens, dtype=np.float64)
        start = np.asarray(trace.position, dtype=np.float64) * trace.block_tokens
        hit = rows[HIT_PER_TOKEN] * tokens + rows[HIT_FIXED]
        miss = rows[MISS_PER_TOKEN] * tokens + rows[MISS_FIXED] + rows[MISS_ATTN] * tokens * (start + tokens / 2)
        return hit, miss

    def decode_step(self, trace: Trace, offsets: np.ndarray | None = None) -> np.ndarray:
        """Seconds of one decode step per request (weights + the request's KV, read once)."""
        table, index = self.coefficients(trace)
        offsets = trace.request_offsets if offsets is None else offsets
        first = offsets[:-1]
        rows = table[0] if not len(index) else table[index[first]].T
        tokens = request_tokens(offsets, token_column(trace), trace.block_tokens).astype(np.float64)
        return rows[DECODE_FIXED] + rows[DECODE_PER_TOKEN] * tokens

    # -- per request ----------------------------------------------------------------
    def request_ttft(self, trace: Trace, hit: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
        """Seconds to first token of every request, given per-reference hit flags."""
        offsets = trace.request_offsets if offsets is None else offsets
        table, index = self.coefficients(trace)
        out = np.zeros(len(offsets) - 1)
        ttft_kernel(0, len(out), 1, offsets, np.ascontiguousarray(hit, dtype=np.uint8),
                    token_column(trace), trace.block_tokens, index, table, self.miss == "recompute", out)
        return out

    def summarize(self, trace: Trace, hit: np.ndarray, ttft: np.ndarray | None = None,
                  offsets: np.ndarray | None = None, scratch: bool = False) -> dict:
        """Run figures: TTFT P50/P95/P99/mean (ms) and tokens per second (`ttft` if already known;
        with `scratch` the caller hands it over and its order is lost, saving a copy)."""
        own = ttft is None
        ttft = self.request_ttft(trace, hit, offsets) if own else ttft
        n_req = len(ttft)
        tokens = np.asarray(trace.tokens)
        # a constant column (zero stride): its one value times its length, the same integer
        input_tokens = float(int(tokens[0]) * len(tokens) if len(tokens) and tokens.strides[0] == 0 else np.sum(tokens))
        total = float(ttft.sum())
        out = latency_summary(ttft, overwrite=own or scratch)
        out["prefill_tokens_per_s"] = input_tokens / total if total > 0 else 0.0
        outputs = trace.request_output_tokens
        if outputs is not None and len(outputs) == n_req and np.all(outputs >= 0):
            step = self.decode_step(trace, offsets)
            busy = total + float(np.sum(outputs * step))
            out["tokens_per_s"] = float(np.sum(outputs)) / busy if busy > 0 else 0.0
        else:
            out["tokens_per_s"] = None
        out.update(calibration=self.gpu.name, calibration_kind=self.gpu.kind,
                   model=self.model.name, miss=self.miss)
        return out


def token_column(trace: Trace) -> np.ndarray:
    """`trace.tokens` for ttft_kernel / request_tokens without a copy of a constant column:
    empty (every block full) when every reference carries `block_tokens`, else int32."""
    tokens = np.asarray(trace.tokens)
    if len(tokens) and tokens.strides[0] == 0 and int(tokens[0]) == trace.block_tokens:
        return np.zeros(0, dtype=np.int32)
    return np.ascontiguousarray(tokens, dtype=np.int32)


@njit(cache=True)
def _preset_index(tenant, code_to_index):
    """Per reference, the preset row of its tenant (0 where the tenant is unknown), int8."""
    out = np.zeros(tenant.shape[0], dtype=np.int8)
    for i in range(tenant.shape[0]):
        if tenant[i] >= 0:
            out[i] = code_to_index[tenant[i]]
    return out


@njit(cache=True)
def request_tokens(offsets, tokens, block_tokens):
    """Tokens per request (int64); empty `tokens`: every block full."""
    n_req = offsets.shape[0] - 1
    out = np.zeros(n_req, dtype=np.int64)
    full = tokens.shape[0] == 0
    for r in range(n_req):
        total = 0
        for i in range(offsets[r], offsets[r + 1]):
            total += block_tokens if full else tokens[i]
        out[r] = total
    return out


@njit(cache=True)
def ttft_kernel(r0, r1, stride, offsets, hit, tokens, block_tokens, index, table, prefix_only, out):
    """TTFT of requests r0, r0+stride, ... < r1 into out[(r - r0) // stride] (the loop form of
    ttft_from_costs + decode). A block's position is its index in the request; empty
    `tokens`: every block full."""
    multi = index.shape[0] > 0
    full = tokens.shape[0] == 0
    for r in range(r0, r1, stride):
        lo = offsets[r]
        hi = offsets[r + 1]
        total = 0.0
        leading = True
        context = 0
        for i in range(lo, hi):
            k = index[i] if multi else 0
            t = block_tokens if full else tokens[i]
            tok = float(t)
            context += t
            if hit[i] and (leading or not prefix_only):
                total += table[k, 0] * tok + table[k, 1]
            else:
                if not hit[i]:
                    leading = False
                start = float(i - lo) * block_tokens
                total += table[k, 2] * tok + table[k, 3] + table[k, 4] * tok * (start + tok / 2)
        k = (index[lo] if multi else 0) if hi > lo else 0
        out[(r - r0) // stride] = total + table[k, 5] + table[k, 6] * context


def leading_hits(offsets, request, hit) -> np.ndarray:
    """Boolean per reference: a hit with no miss before it in its request (the reusable prefix)."""
    hit = np.asarray(hit, dtype=bool)
    misses = np.cumsum(~hit)
    first = offsets[:-1]
    before = misses[first] - (~hit[first])  # misses before each request's first reference
    return hit & (misses == before[request])


def ttft_from_costs(offsets, request, hit, hit_s, miss_s, prefix_only: bool) -> np.ndarray:
    """Sum per-reference costs per request; with `prefix_only`, a hit counts only in the leading run."""
    if len(hit) == 0:
        return np.zeros(max(len(offsets) - 1, 0))
    served = leading_hits(offsets, request, hit) if prefix_only else np.asarray(hit, dtype=bool)
    cost = np.where(served, hit_s, miss_s)
    csum = np.concatenate(([0.0], np.cumsum(cost)))
    return csum[offsets[1:]] - csum[offsets[:-1]]


#: A bucket of at most this many values is gathered and partitioned instead of counted again.
_GATHER = 1 << 18
#: Fewer values than this: np.percentile itself, cheaper than the select's 65,536-bucket passes
#: (compiled, 224 values: 0.17 ms against 2.5 ms; 4,096: 0.10 against 4.0 ms; interpreted,
#: common/jit.py, the select's bucket scans cost ~40 ms of Python).
_PARTITION_BELOW = 4096


@njit(cache=True)
def kth_smallest(a, k):
    """The k-th smallest (0-based) of `a`, which it reorders: np.partition(a, k)[k], by a
    Hoare quickselect (median-of-three pivot); a[k + 1:] then holds the larger ones. Here,
    not np.partition, because numba's np.partition costs ~9 s more CPU to compile on a first
    run (bench/README.md; signals.p99 uses this too)."""
    lo = 0
    hi = a.shape[0] - 1
    while hi > lo:
        mid = (lo + hi) >> 1
        if a[mid] < a[lo]:
            a[mid], a[lo] = a[lo], a[mid]
        if a[hi] < a[lo]:
            a[hi], a[lo] = a[lo], a[hi]
        if a[hi] < a[mid]:
            a[hi], a[mid] = a[mid], a[hi]
        pivot = a[mid]
        i = lo
        j = hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return a[k]  # between the two parts: equal to the pivot
    return a[k]


@njit(cache=True)
def _order_statistics(values, ranks, out):
    """out[j] = the ranks[j]-th smallest of `values`, exactly, without partitioning the whole
    array: a radix select on the float64 bit patterns (non-negative floats order as their bits
    do), 16 bits a pass, each pass counting per bucket and keeping each bucket's smallest and
    largest value. A rank is resolved when its bucket holds one value (the usual case for a
    trace's few distinct TTFTs), or, once its bucket holds at most `_GATHER` values, by
    gathering them in the next pass and selecting among those (`kth_smallest`). Two or three passes in all.
    Returns False, `out` unset, when a value is negative (-0.0 included) or NaN: the caller
    then partitions the whole array."""
    bits = values.view(np.uint64)
    n = bits.shape[0]
    m = ranks.shape[0]
    limit = np.uint64(0x7FF0000000000000)  # +inf; above it NaN, then the negative values
    prefix = np.zeros(m, dtype=np.uint64)  # the bits of rank j's value found so far
    within = ranks.astype(np.int64)  # its rank among the values sharing that prefix
    size = np.full(m, n, dtype=np.int64)  # how many values share that prefix
    done = np.zeros(m, dtype=np.bool_)
    group = np.zeros(m, dtype=np.int64)
    keys = np.zeros(m, dtype=np.uint64)
    gather = np.zeros(m, dtype=np.bool_)
    start = np.zeros(m + 1, dtype=np.int64)
    counts = np.zeros((m, 1 << 16), dtype=np.int64)
    low = np.empty((m, 1 << 16))
    high = np.empty((m, 1 << 16))
    for level in range(4):
        n_groups = 0
        for j in range(m):  # unresolved ranks sharing a prefix share a pass's counts
            if done[j]:
                continue
            group[j] = -1
            for g in range(n_groups):
                if keys[g] == prefix[j]:
                    group[j] = g
            if group[j] < 0:
                keys[n_groups] = prefix[j]
                gather[n_groups] = level > 0 and size[j] <= _GATHER
                start[n_groups + 1] = start[n_groups] + (size[j] if gather[n_groups] else 0)
                group[j] = n_groups
                n_groups += 1
        if n_groups == 0:
            break
        counts[:n_groups] = 0
        low[:n_groups] = np.inf
        high[:n_groups] = -np.inf
        gathered = np.empty(start[n_groups])
        fill = start[:n_groups].copy()
        shift = np.uint64(48 - 16 * level)
        top = np.uint64(64 - 16 * level)
        for i in range(n):
            b = bits[i]
            if level == 0:
                if b > limit:
                    return False
                g = 0
            else:
                g = -1
                above = b >> top
                for k in range(n_groups):
                    if keys[k] == above:
                        g = k
                        break
                if g < 0:
                    continue
                if gather[g]:
                    gathered[fill[g]] = values[i]
                    fill[g] += 1
                    continue
            h = np.intp((b >> shift) & np.uint64(0xFFFF))
            counts[g, h] += 1
            v = values[i]
            if v < low[g, h]:
                low[g, h] = v
            if v > high[g, h]:
                high[g, h] = v
        for j in range(m):
            if done[j]:
                continue
            g = group[j]
            if gather[g]:
                out[j] = kth_smallest(gathered[start[g]:start[g + 1]], within[j])
                done[j] = True
                continue
            h = 0
            while within[j] >= counts[g, h]:
                within[j] -= counts[g, h]
                h += 1
            prefix[j] = (prefix[j] << np.uint64(16)) | np.uint64(h)
            size[j] = counts[g, h]
            if low[g, h] == high[g, h]:
                out[j] = low[g, h]
                done[j] = True
        start[:] = 0
    return True


def _numpy_steps(n: int, qs):
    """np.percentile's own index, weight and interpolation steps for `n` values (its default,
    linear interpolation): (indices below, indices above, weights, lerp), or None where this
    numpy version keeps them elsewhere."""
    try:
        from numpy.lib import _function_base_impl as impl

        method = impl._QuantileMethods["linear"]
        q = np.true_divide(list(qs), 100)
        virtual = np.asanyarray(method["get_virtual_index"](n, q))
        below, above = impl._get_indexes(np.empty(0), virtual, n)
        return below, above, impl._get_gamma(virtual, below, method), impl._lerp
    except (ImportError, AttributeError, KeyError, TypeError):
        return None


def percentiles(seconds: np.ndarray, qs=(50, 95, 99)) -> np.ndarray:
    """`np.percentile(seconds, qs)` (its default, linear interpolation), the same floats: numpy's
    own index, weight and interpolation steps (`_numpy_steps`), on order statistics that
    `_order_statistics` selects without partitioning the whole array (a 5M-request run: ~4x
    faster), or under `_PARTITION_BELOW` values from a sort (np.percentile itself would import
    numpy.ma through np.unique: ~0.02 s of a 0.4 s CLI run). Falls back to np.percentile where
    numpy's steps are not where this numpy version keeps them, or for negative or NaN values."""
    seconds = np.ascontiguousarray(seconds, dtype=np.float64)
    n = len(seconds)
    steps = _numpy_steps(n, qs) if n else None
    if steps is None:
        return np.percentile(seconds, qs)
    below, above, gamma, lerp = steps
    if n < _PARTITION_BELOW:
        ordered = np.sort(seconds)
        if np.isnan(ordered[-1]):  # NaN sorts last; np.percentile's answer is then NaN
            return np.percentile(seconds, qs)
        return lerp(ordered[below], ordered[above], gamma)
    wanted = np.concatenate((below, above)) % n
    ranks = np.unique(wanted)
    found = np.empty(len(ranks))
    if not _order_statistics(seconds, ranks.astype(np.int64), found):
        return np.percentile(seconds, qs)
    at = np.searchsorted(ranks, wanted)
    return lerp(found[at[:len(below)]], found[at[len(below):]], gamma)


def latency_summary(seconds: np.ndarray, overwrite: bool = False) -> dict:
    """P50/P95/P99/mean of per-request seconds, in milliseconds (np.percentile's figures, by
    `percentiles`, which leaves `seconds` as it is; `overwrite` is kept for callers that pass it)."""
    if len(seconds) == 0:
        return {"requests": 0, "ttft_p50_ms": 0.0, "ttft_p95_ms": 0.0, "ttft_p99_ms": 0.0, "ttft_mean_ms": 0.0}
    mean = float(np.mean(seconds) * 1e3)
    p50, p95, p99 = percentiles(seconds) * 1e3
    return {"requests": int(len(seconds)), "ttft_p50_ms": float(p50), "ttft_p95_ms": float(p95),
            "ttft_p99_ms": float(p99), "ttft_mean_ms": mean}
