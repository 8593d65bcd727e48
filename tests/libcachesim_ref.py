"""Run libCacheSim (PyPI `libcachesim`, the reference) live on a block sequence.

Each block id becomes one object of size 1 in file order, written as an oracleGeneral trace
(24-byte records `<u4 ts, <u8 id, <u4 size, <i8 next>`, next = index of the next request to
the same object or -1, by `sitsprof.policies.traces.oracle.write_oracle_general`), then replayed
with libCacheSim's own reader and `process_trace`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

# CLI policy name -> libcachesim class name.
LCS_CLASSES = {
    "lru": "LRU",
    "fifo": "FIFO",
    "lfu": "LFU",
    "sieve": "Sieve",
    "arc": "ARC",
    "lirs": "LIRS",
    "s3fifo": "S3FIFO",
    "twoq": "TwoQ",
    "2q": "TwoQ",  # the registry's name for twoq.py
    "belady": "Belady",  # offline optimal; reads next_access_vtime from the oracleGeneral records
}


def write_oracle(path: Path, ids) -> Path:
    """Write `ids` (one object of size 1 each, file order) as an oracleGeneral trace."""
    from sitsprof.policies.traces.oracle import write_oracle_general

    return Path(write_oracle_general(path, np.asarray(ids, dtype=np.int64)))


def lcs_hit_ratio(oracle_path: Path, policy: str, capacity: int, hashpower: int = 20) -> float:
    """libCacheSim's object hit ratio for `policy` at `capacity` objects.

    `hashpower` sizes libCacheSim's (growable) hash table; its default of 24 allocates
    about 128 MiB per cache, which dominates on small traces. It does not change results.
    """
    import libcachesim as lcs

    reader = lcs.TraceReader(str(oracle_path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    cache = getattr(lcs, LCS_CLASSES[policy])(capacity, hashpower=hashpower)
    miss_ratio, _byte_miss_ratio = cache.process_trace(reader)
    return 1.0 - miss_ratio


def zipf_ids(n_requests: int, n_objects: int, alpha: float, seed: int) -> np.ndarray:
    """Seeded Zipf(alpha) object ids over a finite population (rank r with weight r^-alpha)."""
    rng = np.random.default_rng(seed)
    weights = np.arange(1, n_objects + 1, dtype=np.float64) ** -alpha
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ranks = np.searchsorted(cdf, rng.random(n_requests), side="right")
    perm = rng.permutation(n_objects)  # popular objects are not the low ids
    return perm[np.minimum(ranks, n_objects - 1)].astype(np.int64)
