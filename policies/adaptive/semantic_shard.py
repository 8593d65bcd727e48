"""Semantic shard cache: requests grouped into shards, each shard an LRU with its own slots.

Shard key (``shard_key``):
- ``auto`` (default): ``embedding`` when the trace carries prompt texts (the request JSONL
  format's ``prompt``, `Trace.request_texts`), else ``first-block``;
- ``first-block``: the request's first block id, i.e. its system prompt / root;
- ``tenant`` or ``stack``: the trace's tenant / model-stack column;
- ``embedding``: the prompts embedded (``embedder``: ``hashed`` n-grams by default, or a
  local sentence-transformers / model2vec model; nothing is downloaded) and clustered online
  by cosine similarity: a request joins the most similar cluster centroid when that
  similarity is >= ``similarity`` (0.65), else opens a cluster (`adaptive/embedding.py`);
  the cluster id is the key. The clustering of one trace's texts is done once and reused
  by the replays at other capacities.
Keys map onto at most ``shards`` (16) shards by hash (`hash_shards`).

Capacity: shards start with equal slots; after every window (``window_s`` of trace time) the
SITS action matrix (entropy H, P99 d, score; see signals.py) decides whether the slots move;
when they do they are rebalanced in proportion to each shard's decayed reference count (at
least one slot each), and shards above their new size evict from their LRU tail.

TTL: an entry is valid while ``now - last access < ttl_s`` (180 s of trace time by default);
an expired entry is a miss and is dropped (counted as an expiry, not an eviction). Expired
entries sit at an LRU tail, so they are dropped from the tails as shards are touched.

A block lives in the shard that inserted it; a request of another shard that finds it
resident hits (counted as a cross-shard hit).
"""
from __future__ import annotations

import time

import numpy as np

from sitsprof.common.jit import njit

from ..classic._structs import NIL, move_to_head, new_lists, pop_tail, push_head, unlink
from ..cost.costmodel import CostModel, token_column
from ..engine.capacity import check_capacity
from ..engine.replay import result_from_hits
from ..engine.tenancy import ctcci
from ..errors import PolicyEngineError
from ..traces.hashing import GOLDEN
from ..traces.trace import DEFAULT_BLOCK_TOKENS, Trace
from .embedding import DEFAULT_THRESHOLD, cluster_texts
from .signals import P99_SAMPLE, action_cell, adapt_alpha, migration_score, window_bounds, window_signals

__all__ = [
    "DESCRIPTION",
    "KERNEL",
    "NAME",
    "PARAMS",
    "PARAM_RANGES",
    "SHARD_KEYS",
    "STREAM_FORM",
    "allocate",
    "embedding_shards",
    "hash_shards",
    "replay_shards",
    "request_keys",
    "request_shards",
    "resolve_key",
    "run",
    "shrink",
]

NAME = "semantic-shard"
DESCRIPTION = ("Semantic shard cache: per-shard LRU slots rebalanced by demand, TTL expiry (180 s), "
               "shard eviction counts")
SHARD_KEYS = ("auto", "first-block", "tenant", "stack", "embedding")
#: Its resumable form for the streaming replay (engine/stream.py finds it by this name).
STREAM_FORM = "sitsprof.policies.adaptive.semantic_stream"
# The tuning keywords of `run` (engine.params.accepted), with run's defaults; the rest of its
# keywords are data (texts, embedder, offsets, hit_out) or the cost model's (calibration, model, miss).
PARAMS = {"shard_key": "auto", "shards": 16, "ttl_s": 180.0, "window_s": 60.0, "memory": 0.5,
          "similarity": DEFAULT_THRESHOLD, "embedder": "hashed", "gated": True, "alpha": 0.6}
# Valid values of PARAMS (engine/params.py checks every entry point against them, with the reason).
PARAM_RANGES = {
    "shard_key": ("one of " + ", ".join(SHARD_KEYS), "what groups requests into shards"),
    "shards": ("int [1, 1048576]", "shards the keys hash onto; each needs at least one slot of the capacity"),
    "ttl_s": ("(0, inf)", "how long, in trace seconds, an entry stays valid after its last access"),
    "window_s": ("(0, inf)", "the rebalancing window in trace seconds; a window of 0 s holds no request"),
    "memory": ("[0, 1]", "the decay of each shard's reference count per window: 0 forgets at once, 1 never"),
    "similarity": ("[-1, 1]", "the cosine similarity at which a prompt joins a cluster"),
    "alpha": ("[0, 1]", "the entropy term's weight in the migration score; the P99 term gets 1 - alpha"),
}


@njit(cache=True)
def _drop(prev, nxt, head, tail, size, owner, s, x):
    unlink(prev, nxt, head, tail, s, x)
    size[s] -= 1
    owner[x] = -1


@njit(cache=True)
def _expire_tail(prev, nxt, head, tail, size, owner, last_t, s, now, ttl):
    dropped = 0
    x = tail[s]
    while x != NIL and now - last_t[x] >= ttl:
        _drop(prev, nxt, head, tail, size, owner, s, x)
        dropped += 1
        x = tail[s]
    return dropped


@njit(cache=True)
def replay_shards(block, req_shard, offsets, now, r0, r1, prev, nxt, head, tail, size, cap, owner, last_t, ttl,
                  hit, evicted, expired, cross, demand):
    """Serve requests r0..r1-1 (every reference of request r in shard req_shard[r]); adds
    each shard's references to `demand`."""
    for r in range(r0, r1):
        s = req_shard[r]
        demand[s] += offsets[r + 1] - offsets[r]
        for i in range(offsets[r], offsets[r + 1]):
            b = block[i]
            t = now[i]
            o = owner[b]
            if o >= 0:
                if t - last_t[b] < ttl:
                    hit[i] = 1
                    move_to_head(prev, nxt, head, tail, o, b)
                    last_t[b] = t
                    if o != s:
                        cross[0] += 1
                    continue
                _drop(prev, nxt, head, tail, size, owner, np.int64(o), b)  # shard ids as int64: one compile
                expired[o] += 1
            hit[i] = 0
            expired[s] += _expire_tail(prev, nxt, head, tail, size, owner, last_t, np.int64(s), t, ttl)
            while size[s] >= cap[s] and size[s] > 0:
                x = pop_tail(prev, nxt, head, tail, s)
                size[s] -= 1
                owner[x] = -1
                evicted[s] += 1
            push_head(prev, nxt, head, tail, s, b)
            size[s] += 1
            owner[b] = s
            last_t[b] = t


@njit(cache=True)
def shrink(prev, nxt, head, tail, size, cap, owner, last_t, now, ttl, evicted, expired):
    """Bring every shard within its slots: expired tails first, then LRU evictions."""
    for s in range(size.shape[0]):
        expired[s] += _expire_tail(prev, nxt, head, tail, size, owner, last_t, s, now, ttl)
        while size[s] > cap[s]:
            x = pop_tail(prev, nxt, head, tail, s)
            size[s] -= 1
            owner[x] = -1
            evicted[s] += 1


def embedding_shards(texts, embedder="hashed", similarity: float = DEFAULT_THRESHOLD,
                     search: str = "auto") -> np.ndarray:
    """Cluster labels of request texts (online, by cosine similarity; -1 for a request with no
    text): `embedding.cluster_texts`; `embedder` a spec string or a callable."""
    return cluster_texts(texts, embedder, similarity, search).labels


def resolve_key(shard_key: str, texts) -> str:
    """The shard key a run uses: ``auto`` is ``embedding`` when there are texts, else ``first-block``."""
    _check_key(shard_key)
    if shard_key == "auto":
        return "embedding" if texts is not None else "first-block"
    return shard_key


def request_keys(trace: Trace, shard_key: str = "auto", texts=None, embedder="hashed",
                 similarity: float = DEFAULT_THRESHOLD) -> np.ndarray:
    """One key per request (int64): the first block id, tenant code or embedding cluster."""
    texts = trace.request_texts if texts is None else texts
    shard_key = resolve_key(shard_key, texts)
    if shard_key == "embedding":
        return _clustering(trace, texts, embedder, similarity).labels
    first = trace.request_offsets[:-1]
    keys = (trace.block if shard_key == "first-block" else trace.tenant)[first].astype(np.int64)
    if shard_key != "first-block":
        _check_tenant(shard_key, len(keys) and np.all(keys < 0))
    return keys


def request_shards(trace: Trace, offsets: np.ndarray, shards: int, shard_key: str = "auto", texts=None,
                   embedder="hashed", similarity: float = DEFAULT_THRESHOLD) -> np.ndarray:
    """The shard of every request, in the narrowest signed integer that holds `shards`: the
    hash of request_keys(...) (hash_shards, one compiled pass that reads each request's first
    reference, no per-request int64 temporaries; embedding cluster labels hashed the same way)."""
    texts = trace.request_texts if texts is None else texts
    shard_key = resolve_key(shard_key, texts)
    dtype = np.int8 if shards <= 127 else np.int16 if shards <= 32767 else np.int32
    out = np.empty(len(offsets) - 1, dtype=dtype)
    if shard_key == "embedding":
        labels = _clustering(trace, texts, embedder, similarity).labels
        hash_shards(labels, np.arange(len(labels) + 1, dtype=np.int64), shards, out)
        return out
    column = trace.block if shard_key == "first-block" else trace.tenant
    known = hash_shards(np.asarray(column), offsets, shards, out)
    if shard_key != "first-block":
        _check_tenant(shard_key, len(out) and not known)
    return out


def _check_key(shard_key: str) -> None:
    if shard_key not in SHARD_KEYS:
        raise PolicyEngineError(f"shard key {shard_key!r} unknown; choose from {', '.join(SHARD_KEYS)}")


def _check_tenant(shard_key: str, none_known: bool) -> None:
    if none_known:
        raise PolicyEngineError(f"shard key {shard_key!r}: this trace names no tenant or stack "
                                "(use --shard-key first-block, or a trace with a tenant column)")


_LAST_CLUSTERING: list = []  # [(texts, embedder, similarity), Clustering]: the last trace's, for its other capacities


def _clustering(trace: Trace, texts, embedder, similarity: float):
    if texts is None:
        raise PolicyEngineError("shard key 'embedding': this trace carries no prompt texts (the request JSONL "
                                "format's 'prompt' field; `sitsprof policy generate --as requests` writes it)")
    if len(texts) != trace.n_requests:
        raise PolicyEngineError(f"shard key 'embedding': {len(texts)} texts for {trace.n_requests} requests")
    texts = texts if isinstance(texts, tuple) else tuple(texts)
    if _LAST_CLUSTERING:
        (seen, embedder_seen, similarity_seen), found = _LAST_CLUSTERING
        if (seen is texts or seen == texts) and embedder_seen == embedder and similarity_seen == similarity:
            return found
    found = cluster_texts(texts, embedder, similarity)
    _LAST_CLUSTERING[:] = [(texts, embedder, float(similarity)), found]
    return found


@njit(cache=True)
def hash_shards(column, offsets, shards, out):
    """out[r] = shard of request r: its key (its first reference's block id or tenant code, as
    int64, read as uint64) times `GOLDEN` (Fibonacci hashing), bits 40.., modulo `shards`. Returns
    whether any key is >= 0 (a known tenant)."""
    known = False
    for r in range(out.shape[0]):
        key = np.int64(column[offsets[r]])
        known |= key >= 0
        h = (np.uint64(key) * GOLDEN) >> np.uint64(40)
        out[r] = h % np.uint64(shards)
    return known


def allocate(capacity: int, demand: np.ndarray) -> np.ndarray:
    """Slots per shard in proportion to demand, at least one each, summing to <= capacity."""
    k = len(demand)
    if capacity < k:
        raise PolicyEngineError(f"capacity {capacity} is below the {k} shards (one slot each at least); "
                                "use fewer --shards")
    spare = capacity - k
    total = float(demand.sum())
    share = demand / total if total > 0 else np.full(k, 1.0 / k)
    extra = np.floor(share * spare).astype(np.int64)
    left = spare - int(extra.sum())
    if left > 0:
        order = np.argsort(-(share * spare - extra), kind="stable")[:left]
        extra[order] += 1
    return extra + 1


def run(trace: Trace, capacity: int, shard_key: str = "auto", shards: int = 16, ttl_s: float = 180.0,
        window_s: float = 60.0, memory: float = 0.5, texts=None, embedder="hashed",
        similarity: float = DEFAULT_THRESHOLD,
        hit_out=None, calibration=None, model: str = "qwen2-72b", miss: str = "recompute", gated: bool = True,
        alpha: float = 0.6, offsets=None):
    """Replay `trace` through the semantic shard cache; a SimResult with shard figures in ``extra``.

    With `gated` (default) the SITS action matrix decides, per window, whether the shard
    slots move: entropy H of the window's blocks and P99 TTFT d (cost model) give the cell
    and score (signals.py); ``keep`` leaves the slots as they are, ``migrate`` rebalances them.
    Every window logs a ``rebalance`` event with H, d, score, cell, action and the slots."""
    capacity = check_capacity(capacity)
    if shards < 1:
        raise PolicyEngineError(f"shards {shards} must be at least 1")
    if ttl_s <= 0:
        raise PolicyEngineError(f"ttl {ttl_s} s must be positive")
    shards = min(int(shards), capacity)  # every shard needs a slot
    start = time.perf_counter()
    block = np.ascontiguousarray(trace.block, dtype=np.int32)
    offsets = trace.request_offsets if offsets is None else offsets
    texts = trace.request_texts if texts is None else texts
    shard_key = resolve_key(shard_key, texts)
    req_shard = request_shards(trace, offsets, shards, shard_key, texts, embedder, similarity)
    now = np.asarray(trace.time, dtype=np.float64)  # may be a zero-stride view (no times): the loops read it as is
    cost = CostModel(calibration, model=model, miss=miss)
    table, index = cost.coefficients(trace)
    hit, evicted, expired, cross, max_resident, events = _replay(
        block, offsets, int(trace.n_blocks), capacity, req_shard, now, window_bounds(trace, window_s, 1 << 62, offsets),
        token_column(trace), trace.block_tokens, (table, index, cost.miss == "recompute"), shards, float(ttl_s),
        memory, gated, alpha, hit_out)
    summary = cost.summarize(trace, hit, offsets=offsets)  # before the per-request hits: one at a time
    tenancy = ctcci(trace, hit)
    seconds = time.perf_counter() - start
    total_evicted = int(evicted.sum())
    result = result_from_hits(trace, offsets, NAME, capacity, hit, total_evicted, max_resident, seconds, {})
    result.extra.update(
        shard_key=shard_key, shards=shards, ttl_s=ttl_s, window_s=window_s,
        shard_evictions=evicted.tolist(), shard_expirations=expired.tolist(), cross_shard_hits=int(cross[0]),
        semantic_cache_hit_ratio=result.block_hit_ratio,
        shard_eviction_rate=total_evicted / trace.span_s if trace.span_s > 0 else 0.0,
        cost=summary, tenancy=tenancy, events=events,
    )
    if shard_key == "embedding":
        result.extra["embedding"] = _clustering(trace, texts, embedder, similarity).summary()
    return result


def _replay(block, offsets, n_blocks, capacity, req_shard, now, bounds, tokens, block_tokens, costing, shards, ttl,
            memory, gated, alpha, hit_out=None):
    """The windowed replay over plain arrays (`costing`: the cost model's table, per-reference
    preset index and whether a miss recomputes); returns (hit, evictions, expirations and
    cross-shard hits per shard, max resident, events)."""
    n = len(block)
    prev, nxt, head, tail = new_lists(n_blocks, shards)
    size = np.zeros(shards, dtype=np.int64)
    cap = allocate(capacity, np.zeros(shards))
    owner = np.full(max(n_blocks, 1), -1, dtype=np.int32)
    last_t = np.zeros(max(n_blocks, 1), dtype=np.float64)
    evicted = np.zeros(shards, dtype=np.int64)
    expired = np.zeros(shards, dtype=np.int64)
    cross = np.zeros(1, dtype=np.int64)
    hit = np.zeros(n, dtype=np.uint8) if hit_out is None else hit_out
    demand = np.zeros(shards)
    counts = np.zeros(shards, dtype=np.int64)
    table, index, prefix_only = costing
    sample = np.zeros(P99_SAMPLE)
    request_of = np.searchsorted(offsets, bounds, side="right") - 1
    n_req = len(offsets) - 1
    span = float(now[-1] - now[0]) if n else 0.0
    mean_rate = n_req / span if span > 0 else float("nan")
    events = []
    max_resident = 0
    for w in range(len(bounds) - 1):
        lo, hi = int(bounds[w]), int(bounds[w + 1])
        before = evicted.sum()
        r0, r1 = int(request_of[w]), int(request_of[w + 1]) if hi < n else n_req
        counts.fill(0)
        replay_shards(block, req_shard, offsets, now, r0, r1, prev, nxt, head, tail, size, cap, owner, last_t,
                      ttl, hit, evicted, expired, cross, counts)
        max_resident = max(max_resident, int(size.sum()))
        demand = demand * memory + counts
        d_ms, h_bits = window_signals(block, lo, hi, r0, r1, offsets, hit, tokens, block_tokens, index, table,
                                      prefix_only, sample)
        dur = float(now[hi - 1] - now[lo])
        load = ((r1 - r0) / dur) / mean_rate if dur > 0 and mean_rate > 0 else 1.0
        a = adapt_alpha(alpha, load)
        score = migration_score(h_bits, d_ms, a)
        cell = action_cell(h_bits, d_ms)
        move = not gated or cell == "migrate" or (cell == "score" and score >= 0.5)
        if move:
            cap = allocate(capacity, demand)
        shrink(prev, nxt, head, tail, size, cap, owner, last_t, float(now[hi - 1]), ttl, evicted, expired)
        events.append({"event": "rebalance", "window": w, "time": float(now[hi - 1]), "H": round(h_bits, 4),
                       "d_ms": round(d_ms, 3), "alpha": round(a, 4), "score": round(score, 4), "cell": cell,
                       "action": "migrate" if move else "keep", "hit_ratio": float(hit[lo:hi].mean()),
                       "evictions": int(evicted.sum() - before), "slots": cap.tolist()})
    return hit, evicted, expired, cross, max_resident, events


def KERNEL(block, req_offsets, n_blocks, capacity, hit, shards=16):
    """Engine-contract entry point: no trace time reaches it, so TTL and windows cannot apply;
    use `run` with the Trace. Here every reference is at t=0 (nothing expires), one window,
    shards keyed by each request's first block, every block full, the default cost model."""
    capacity = check_capacity(int(capacity))
    if shards < 1:
        raise PolicyEngineError(f"shards {shards} must be at least 1")
    shards = min(int(shards), capacity)
    block = np.ascontiguousarray(block, dtype=np.int32)
    offsets = np.asarray(req_offsets, dtype=np.int64)
    n = len(block)
    dtype = np.int8 if shards <= 127 else np.int16 if shards <= 32767 else np.int32
    req_shard = np.empty(len(offsets) - 1, dtype=dtype)
    hash_shards(block, offsets, shards, req_shard)
    bounds = np.array([0, n], dtype=np.int64)
    cost = CostModel()
    table, index = cost.coefficients(None)
    _, evicted, _, _, max_resident, _ = _replay(
        block, offsets, int(n_blocks), capacity, req_shard, np.broadcast_to(0.0, (n,)), bounds,
        np.zeros(0, dtype=np.int32), DEFAULT_BLOCK_TOKENS, (table, index, cost.miss == "recompute"), shards, 180.0,
        0.5, True, 0.6, hit)
    return int(evicted.sum()), max_resident
