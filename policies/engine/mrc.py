"""Hit/miss-ratio curves: exact LRU in one pass, any other policy exactly or by spatial sampling.

LRU (Mattson et al. 1970): the LRU stack distance of a reference is 1 + the number of
distinct blocks referenced since the previous reference to the same block (-1 for a first
reference). LRU with capacity C hits exactly the references whose distance is at most C, so
one pass gives the hit ratio at every capacity. Distances come from a Fenwick tree over
reference positions in which only the latest reference of each block is marked: the
distinct blocks since position p are the marks after p. O(n log n) time, O(n) memory.

Other policies have no stack property, so each point of their curve is a replay. Where
replaying the whole trace at every point is too slow, `policy_curve` samples (SHARDS,
Waldspurger et al., FAST'15): keep the references of blocks whose hash falls below
T = rate * 2^24 (every reference of a kept block, none of a dropped one), replay the sample
at capacity C * rate, and read the sample's hit ratio as the curve's at C. `rate` is the
kept share of distinct blocks (not the nominal one), so a sample that drew a few blocks
more or fewer than asked is scaled by what it drew. A point whose scaled capacity would be
under `MIN_SAMPLED_BLOCKS` uses a higher rate (up to the whole trace), since tiny sampled
caches are where the estimate is worst and the knee of a curve often lies there. Measured
error: docs/RESEARCH.md ("Sampled curves") and `sitsprof policy mrc --help`.
"""
from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from sitsprof.common.jit import njit

from ..classic import lru
from ..errors import PolicyEngineError
from ..traces.hashing import GOLDEN
from ..traces.offsets import request_offsets
from .capacity import check_capacity
from .replay import Prepared, as_trace, dense_blocks, run_kernel

__all__ = [
    "EXACT_BUDGET",
    "HASH_BITS",
    "LOG_FROM",
    "MIN_RATE",
    "MIN_SAMPLED_BLOCKS",
    "Curve",
    "Sample",
    "Sampler",
    "auto_rate",
    "block_hash",
    "block_hashes",
    "curve_capacities",
    "lru_hit_counts",
    "lru_hit_ratio_curve",
    "lru_stack_distances",
    "mean_absolute_error",
    "point_rate",
    "policy_curve",
    "sampled_hit_ratio",
    "shards_sample",
]

# Exact curves cost one replay of the whole trace per point; above this many references
# replayed per policy (about 3 s of a classic kernel) `policy_curve(sample="auto")` samples.
EXACT_BUDGET = 50_000_000
MIN_RATE = 0.001  # the smallest automatic rate (SHARDS' 0.1%)
MIN_SAMPLED_BLOCKS = 1000  # a sampled point's cache holds at least this many blocks, else its rate rises
HASH_BITS = 24  # hash values 0 .. 2^24-1; a rate is kept as a threshold T on them
LOG_FROM = 1e-4  # log-spaced curves start at 0.01% of the distinct blocks (at least 1 block)


@njit(cache=True)
def _stack_pass(block, n_blocks, dist, hist):
    """One pass over the trace: writes each reference's distance into `dist` (-1 when cold)
    and/or counts distances into `hist` (hist[d] = references at distance d); either may be
    an empty array to skip it, so a curve needs no per-reference output."""
    n = block.shape[0]
    keep = dist.shape[0] > 0
    count = hist.shape[0] > 0
    last = np.full(max(n_blocks, 1), -1, dtype=np.int64)
    tree = np.zeros(n + 1, dtype=np.int32)  # Fenwick tree over positions 1..n
    marks = 0
    for i in range(n):
        b = block[i]
        p = last[b]
        if p < 0:
            if keep:
                dist[i] = -1
        else:
            j = p + 1  # marks at positions <= p
            before = 0
            while j > 0:
                before += tree[j]
                j -= j & -j
            d = marks - before + 1
            if keep:
                dist[i] = d
            if count:
                hist[d] += 1
            j = p + 1  # unmark p: b's latest reference moves to i
            while j <= n:
                tree[j] -= 1
                j += j & -j
            marks -= 1
        j = i + 1
        while j <= n:
            tree[j] += 1
            j += j & -j
        marks += 1
        last[b] = i


def _blocks(trace_or_blocks) -> tuple[np.ndarray, int]:
    return dense_blocks(as_trace(trace_or_blocks))


def lru_stack_distances(block) -> np.ndarray:
    """LRU stack distance of every reference (int64; -1 for a block's first reference).

    `block` is a Trace or a 1-D array of any integer ids (factorised into dense ids first).
    """
    blocks, n_blocks = _blocks(block)
    dist = np.empty(len(blocks), dtype=np.int64)
    _stack_pass(blocks, n_blocks, dist, np.empty(0, dtype=np.int64))
    return dist


def lru_hit_counts(trace_or_blocks, capacities: Iterable) -> np.ndarray:
    """LRU hits at each capacity (int64), identical to simulating LRU at each one."""
    caps = np.asarray([check_capacity(c) for c in capacities], dtype=np.int64)
    blocks, n_blocks = _blocks(trace_or_blocks)
    return _dense_lru_hits(blocks, n_blocks, caps)


def _dense_lru_hits(blocks, n_blocks, caps) -> np.ndarray:
    hist = np.zeros(n_blocks + 1, dtype=np.int64)  # a distance is at most n_blocks
    _stack_pass(blocks, n_blocks, np.empty(0, dtype=np.int64), hist)
    # hits(C) = number of references with 1 <= distance <= C
    cumulative = np.cumsum(hist)
    return cumulative[np.minimum(caps, n_blocks)]


def lru_hit_ratio_curve(trace_or_blocks, capacities: Iterable) -> np.ndarray:
    """LRU block hit ratio at each capacity (float64), from one pass over the trace."""
    caps = list(capacities)
    trace = as_trace(trace_or_blocks)
    n = len(trace)
    hits = lru_hit_counts(trace, caps)
    return hits / n if n else np.zeros(len(caps))


def curve_capacities(n_blocks: int, points: int = 20, spacing: str = "log") -> np.ndarray:
    """Up to `points` distinct capacities (>= 1) ending at n_blocks.

    "log" (the default): geometric from LOG_FROM of the blocks (at least 1) to all of them, so
    every decade gets its share of points and the knee of a curve, usually below 10% of the
    blocks, shows; "linear": evenly spaced from n_blocks/points. Rounding to whole blocks can
    merge points on small traces, so fewer may come back."""
    if points < 1:
        raise ValueError(f"points must be at least 1, got {points}")
    top = max(int(n_blocks), 1)
    if spacing == "log":
        low = max(1.0, top * LOG_FROM)
        raw = np.geomspace(low, top, points) if points > 1 else np.array([float(top)])
    elif spacing == "linear":
        raw = np.linspace(top / points, top, points)
    else:
        raise ValueError(f"spacing must be 'log' or 'linear', got {spacing!r}")
    caps = np.unique(np.minimum(np.ceil(raw - 1e-9), top).astype(np.int64))
    return caps[caps >= 1]


@njit(cache=True)
def block_hash(original_id):
    """The sampling hash of a block id: 24 bits of a multiply-xorshift-multiply mix with GOLDEN
    (the second round keeps runs of consecutive ids from sampling in a regular pattern)."""
    x = np.uint64(original_id) * GOLDEN
    x ^= x >> np.uint64(29)
    x *= GOLDEN
    return x >> np.uint64(64 - HASH_BITS)


@njit(cache=True)
def block_hashes(block, original_id, n_blocks):
    """`block_hash` of each dense block's id (from its first reference), as uint32."""
    out = np.zeros(max(n_blocks, 1), dtype=np.uint32)
    seen = np.zeros(max(n_blocks, 1), dtype=np.uint8)
    for i in range(block.shape[0]):
        b = block[i]
        if not seen[b]:
            seen[b] = 1
            out[b] = np.uint32(block_hash(original_id[i]))
    return out


@njit(cache=True)
def _sample_pass(block, request, hashes, n_blocks, threshold):
    """References of blocks whose hash is below threshold: their new dense ids (in order of
    first appearance), their new request indices, and the kept block and request counts."""
    n = block.shape[0]
    m = 0
    for i in range(n):
        if hashes[block[i]] < threshold:
            m += 1
    code = np.full(max(n_blocks, 1), -1, dtype=np.int32)
    out = np.empty(m, dtype=np.int32)
    out_request = np.empty(m, dtype=np.int64)
    m = 0
    kept = 0
    last_request = -1
    requests = 0
    for i in range(n):
        b = block[i]
        if hashes[b] >= threshold:
            continue
        c = code[b]
        if c < 0:
            c = kept
            code[b] = c
            kept += 1
        if request[i] != last_request:
            last_request = request[i]
            requests += 1
        out[m] = c
        out_request[m] = requests - 1
        m += 1
    return out, out_request, kept, requests


@dataclass(frozen=True)
class Sample:
    """A spatial sample of a trace: dense block ids of the kept references, their request
    offsets, the share of the trace's distinct blocks kept (`rate`), and the reference
    counts of the sample and of the whole trace."""

    block: np.ndarray
    offsets: np.ndarray
    n_blocks: int
    rate: float
    references: int
    trace_references: int


class Sampler:
    """SHARDS samples of one trace at any rate; block hashes are computed once."""

    def __init__(self, trace_or_blocks):
        trace = as_trace(trace_or_blocks)
        self.block, self.n_blocks = dense_blocks(trace)
        self.request = np.ascontiguousarray(trace.request)
        self.hashes = block_hashes(self.block, np.ascontiguousarray(trace.original_id, dtype=np.int64),
                                   self.n_blocks)

    def sample(self, rate: float) -> Sample:
        """Every reference of the blocks whose `block_hash` is below rate * 2^24."""
        _check_rate(rate)
        threshold = np.uint32(min(1 << HASH_BITS, max(1, round(rate * (1 << HASH_BITS)))))
        out, out_request, kept, n_requests = _sample_pass(self.block, self.request, self.hashes, self.n_blocks,
                                                          threshold)
        rate_kept = kept / self.n_blocks if self.n_blocks else 1.0
        return Sample(out, request_offsets(out_request, n_requests), int(kept), rate_kept, len(out), len(self.block))


def _check_rate(rate) -> None:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 1:
        raise PolicyEngineError(f"sample rate {rate!r} is not in (0, 1]; give e.g. 0.01 for 1% of the blocks")


def shards_sample(trace_or_blocks, rate: float) -> Sample:
    """The SHARDS spatial sample of a trace at `rate` (0 < rate <= 1): every reference of the
    blocks whose `block_hash` is below rate * 2^24. `Sample.rate` is the share of distinct
    blocks kept, which scales capacities (it is `rate` up to the sampling noise)."""
    _check_rate(rate)
    return Sampler(trace_or_blocks).sample(rate)


@dataclass
class Curve:
    """One policy's hit-ratio curve. `method`: "stack-distance" (exact LRU, one pass),
    "replay" (exact: the whole trace replayed at each point) or "shards" (sampled);
    `rates[i]`: the share of distinct blocks point i replayed (1.0 where exact)."""

    policy: str
    capacities: np.ndarray
    hit_ratios: np.ndarray
    method: str
    rates: np.ndarray
    seconds: float

    def to_dict(self) -> dict:
        """The `curves` entry of a policy-results document (docs/policy-results.md)."""
        return {
            "policy": self.policy,
            "method": self.method,
            "sample_rate": float(self.rates.min()) if len(self.rates) else 1.0,
            "seconds": float(self.seconds),
            "points": [
                {"capacity": int(c), "hit_ratio": float(h), "miss_ratio": float(1.0 - h), "rate": float(r)}
                for c, h, r in zip(self.capacities, self.hit_ratios, self.rates)
            ],
        }


def auto_rate(references: int, points: int, budget: int = EXACT_BUDGET) -> float:
    """The sample rate `policy_curve(sample="auto")` uses: 1.0 (exact) while references *
    points fits in `budget`, else the rate that fits it, but at least MIN_RATE."""
    work = max(int(references), 1) * max(int(points), 1)
    if work <= budget:
        return 1.0
    return max(MIN_RATE, budget / work)


def point_rate(rate: float, capacity: int, min_blocks: int = MIN_SAMPLED_BLOCKS) -> float:
    """The rate a sampled point at `capacity` uses: `rate`, raised so that the sampled cache
    holds at least `min_blocks` blocks (1.0: replay the whole trace)."""
    return 1.0 if rate >= 1.0 else min(1.0, max(rate, min_blocks / capacity))


def _exact_ratios(trace, module: ModuleType, caps: np.ndarray) -> np.ndarray:
    n = len(trace)
    if module is lru:
        return lru_hit_counts(trace, caps) / n if n else np.zeros(len(caps))
    prep = Prepared(trace)
    return np.array([run_kernel(prep, module, int(c), {}).block_hit_ratio for c in caps], dtype=np.float64)


def policy_curve(trace_or_blocks, module: ModuleType, capacities: Iterable, sample="auto",
                 budget: int = EXACT_BUDGET, min_blocks: int = MIN_SAMPLED_BLOCKS) -> Curve:
    """`module`'s block hit ratio at each capacity.

    `sample`: "auto" (exact while the replays fit `budget`, see auto_rate; LRU always
    exact), "exact" (or 1.0), or a rate in (0, 1) for SHARDS sampling, each point at
    `point_rate` (`min_blocks`: the smallest sampled cache; lower is faster and less
    accurate, docs/RESEARCH.md). LRU's exact curve is one stack-distance pass whatever the number of
    points. Capacities are checked (`check_capacity`)."""
    caps = np.asarray([check_capacity(c) for c in capacities], dtype=np.int64)
    trace = as_trace(trace_or_blocks)
    if isinstance(sample, str):
        if sample == "exact":
            rate = 1.0
        elif sample == "auto":
            rate = 1.0 if module is lru else auto_rate(len(trace), len(caps), budget)
        else:
            raise PolicyEngineError(f"sample {sample!r} is not 'auto', 'exact' or a rate in (0, 1]; "
                                    "give e.g. --sample 0.01")
    else:
        _check_rate(sample)
        rate = float(sample)
    start = time.perf_counter()
    if isinstance(min_blocks, bool) or not isinstance(min_blocks, int) or min_blocks < 1:
        raise PolicyEngineError(f"min_blocks {min_blocks!r} is not a whole number of blocks >= 1; give e.g. 1000")
    rates = np.array([point_rate(rate, int(c), min_blocks) for c in caps], dtype=np.float64)
    ratios = np.empty(len(caps), dtype=np.float64)
    full = rates >= 1.0
    if full.any():
        ratios[full] = _exact_ratios(trace, module, caps[full])
    if full.all():
        method = "stack-distance" if module is lru else "replay"
        return Curve(module.NAME, caps, ratios, method, rates, time.perf_counter() - start)
    sampler = Sampler(trace)
    for want in np.unique(rates[~full]):
        s = sampler.sample(float(want))
        for i in np.flatnonzero(rates == want):
            ratios[i] = sampled_hit_ratio(s, module, int(caps[i]))
            rates[i] = s.rate
    return Curve(module.NAME, caps, ratios, "shards", rates, time.perf_counter() - start)


def sampled_hit_ratio(sample: Sample, module: ModuleType, capacity: int) -> float:
    """The hit ratio at `capacity` estimated from `sample`: the sample replayed at
    capacity * sample.rate (at least 1 block), its misses divided by the references a sample
    of that rate holds on average (SHARDS-adj). Misses spread over many blocks, so they scale
    with the rate; references do not: one hot block drawn or missed moves a sample's
    reference count (and its plain hit ratio) far from rate * references."""
    if sample.references == 0 or sample.rate <= 0:
        return 0.0
    scaled = max(1, round(capacity * sample.rate))
    if module is lru:
        hits = int(_dense_lru_hits(sample.block, sample.n_blocks, np.array([scaled], dtype=np.int64))[0])
    else:
        hit = np.zeros(sample.references, dtype=np.uint8)
        module.KERNEL(sample.block, sample.offsets, np.int64(sample.n_blocks), np.int64(scaled), hit)
        hits = int(hit.sum(dtype=np.int64))
    misses = sample.references - hits
    return float(min(1.0, max(0.0, 1.0 - misses / (sample.rate * sample.trace_references))))


def mean_absolute_error(estimate: Curve, exact: Curve) -> float:
    """Mean |estimate - exact| over the points both curves share (by capacity)."""
    common, a, b = np.intersect1d(estimate.capacities, exact.capacities, return_indices=True)
    if not len(common):
        raise ValueError("the curves share no capacity")
    return float(np.mean(np.abs(estimate.hit_ratios[a] - exact.hit_ratios[b])))
