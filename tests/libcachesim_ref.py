"""Run libCacheSim (PyPI `libcachesim`, the reference) live on a block sequence.

Each block id becomes one object of size 1 in file order, written as an oracleGeneral trace
(24-byte records `<u4 ts, <u8 id, <u4 size, <i8 next>`, next = index of the next request to
the same object or -1), then replayed with `process_trace`.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ORACLE_DTYPE = np.dtype([("ts", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])

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
}


def next_access(ids: np.ndarray) -> np.ndarray:
    """For each position, the index of the next occurrence of the same id, or -1."""
    ids = np.asarray(ids)
    n = len(ids)
    order = np.argsort(ids, kind="stable")
    nxt = np.full(n, -1, dtype=np.int64)
    same = ids[order[1:]] == ids[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def write_oracle(path: Path, ids, ts=None) -> Path:
    """Write `ids` (one object of size 1 each) as an oracleGeneral binary trace."""
    ids = np.asarray(ids, dtype=np.uint64)
    rec = np.empty(len(ids), dtype=ORACLE_DTYPE)
    rec["ts"] = np.arange(len(ids)) if ts is None else ts
    rec["id"] = ids
    rec["size"] = 1
    rec["next"] = next_access(ids)
    rec.tofile(path)
    return Path(path)


def lcs_hit_ratio(oracle_path: Path, policy: str, capacity: int) -> float:
    """libCacheSim's object hit ratio for `policy` at `capacity` objects."""
    import libcachesim as lcs

    reader = lcs.TraceReader(str(oracle_path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    cache = getattr(lcs, LCS_CLASSES[policy])(capacity)
    miss_ratio, _byte_miss_ratio = cache.process_trace(reader)
    return 1.0 - miss_ratio


def load_mooncake_blocks(path: Path, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(hash ids in file order, request offsets) from a Mooncake JSONL trace; a minimal loader."""
    ids: list[int] = []
    offsets = [0]
    with open(path) as fh:
        for n, line in enumerate(fh):
            if limit is not None and n >= limit:
                break
            ids.extend(json.loads(line)["hash_ids"])
            offsets.append(len(ids))
    return np.asarray(ids, dtype=np.int64), np.asarray(offsets, dtype=np.int64)


def dense(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense int32 ids in order of first appearance, and how many there are."""
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int32)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first), dtype=np.int32)
    return rank[inverse].astype(np.int32), len(first)


def zipf_ids(n_requests: int, n_objects: int, alpha: float, seed: int) -> np.ndarray:
    """Seeded Zipf(alpha) object ids over a finite population (rank r with weight r^-alpha)."""
    rng = np.random.default_rng(seed)
    weights = np.arange(1, n_objects + 1, dtype=np.float64) ** -alpha
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ranks = np.searchsorted(cdf, rng.random(n_requests), side="right")
    perm = rng.permutation(n_objects)  # popular objects are not the low ids
    return perm[np.minimum(ranks, n_objects - 1)].astype(np.int64)
