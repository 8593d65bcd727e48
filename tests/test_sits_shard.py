"""Semantic shard cache: TTL expiry at the right trace time, per-shard slots and rebalancing,
shard eviction counts, shard keys from prompt embeddings; CTCCI on a crafted two-tenant trace."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sitsprof.policies.adaptive import semantic_shard as ss
from sitsprof.policies.classic import lru
from sitsprof.policies.engine.tenancy import _known_tenants, alert_threshold, ctcci, isolate, level
from sitsprof.policies.errors import PolicyEngineError
from sitsprof.policies.traces.ids import trace_from_ids, trace_from_requests


def _refs(ids, times, **kw):
    hit = np.zeros(len(ids), dtype=np.uint8)
    r = ss.run(trace_from_ids(np.array(ids), times=np.array(times, dtype=float)), kw.pop("capacity", 10),
               shards=1, hit_out=hit, **kw)
    return hit.tolist(), r


def test_ttl_expires_exactly_at_180_seconds():
    assert _refs([7, 7], [0.0, 179.999])[0] == [0, 1]
    hits, r = _refs([7, 7], [0.0, 180.0])
    assert hits == [0, 0]
    assert r.extra["shard_expirations"] == [1] and r.evictions == 0


def test_ttl_counts_from_the_last_access():
    assert _refs([7, 7, 7], [0.0, 9.0, 18.0], ttl_s=10.0)[0] == [0, 1, 1]
    assert _refs([7, 7], [0.0, 10.0], ttl_s=10.0)[0] == [0, 0]


def test_expired_entries_free_slots_without_evictions():
    hits, r = _refs([1, 2, 3, 4], [0.0, 0.0, 200.0, 200.0], capacity=2)
    assert hits == [0, 0, 0, 0]
    assert r.evictions == 0 and r.extra["shard_expirations"] == [2]
    hits, r = _refs([1, 2, 3], [0.0, 0.0, 1.0], capacity=2)
    assert r.evictions == 1 and r.extra["shard_evictions"] == [1]


def test_one_shard_without_ttl_is_lru():
    rng = np.random.default_rng(3)
    ids = rng.zipf(1.2, 20_000) % 3_000
    trace = trace_from_ids(ids, times=np.zeros(len(ids)))
    hit = np.zeros(len(ids), dtype=np.uint8)
    ss.run(trace, 300, shards=1, hit_out=hit)
    ref = np.zeros(len(ids), dtype=np.uint8)
    lru.KERNEL(np.ascontiguousarray(trace.block), trace.request_offsets, np.int64(trace.n_blocks), np.int64(300), ref)
    assert np.array_equal(hit, ref)


def test_allocation_is_proportional_with_one_slot_minimum():
    slots = ss.allocate(100, np.array([90.0, 10.0, 0.0]))
    assert slots.sum() == 100 and slots.min() >= 1
    # one slot each, then the 97 spare by largest remainder: 87.3 -> 87, 9.7 -> 10, 0
    assert slots.tolist() == [88, 11, 1]
    assert ss.allocate(10, np.zeros(4)).sum() == 10
    with pytest.raises(PolicyEngineError, match="below the 4 shards"):
        ss.allocate(3, np.zeros(4))


def _two_stacks(n=600):
    """Stack 0 references many blocks, stack 1 few; one request per second."""
    rng = np.random.default_rng(0)
    hash_ids, tenant = [], []
    for i in range(n):
        heavy = i % 4 != 0
        hash_ids.append([int(rng.integers(0, 400)) if heavy else 10_000 + int(rng.integers(0, 5))])
        tenant.append(0 if heavy else 1)
    return trace_from_requests(hash_ids, arrival_ms=np.arange(n) * 1000.0, input_tokens=[512] * n,
                               tenant=tenant, tenant_names=("big", "small"))


def test_slots_follow_demand_and_shard_evictions_are_counted():
    trace = _two_stacks()
    r = ss.run(trace, 100, shard_key="stack", shards=2, window_s=60.0)
    last = r.extra["events"][-1]["slots"]
    assert sum(last) == 100
    big = int(np.argmax(last))
    assert last[big] >= 70  # three quarters of the references
    assert sum(r.extra["shard_evictions"]) == r.evictions > 0
    assert r.extra["shard_evictions"][big] > r.extra["shard_evictions"][1 - big]
    assert r.extra["shard_eviction_rate"] == pytest.approx(r.evictions / 599.0)
    assert r.extra["semantic_cache_hit_ratio"] == r.block_hit_ratio


def test_embedding_shards_group_similar_texts():
    vectors = {"math a": [1, 0, 0], "math b": [0.95, 0.05, 0], "poem": [0, 1, 0], "code": [0, 0, 1]}
    labels = ss.embedding_shards(list(vectors), lambda texts: [vectors[t] for t in texts])
    assert labels[0] == labels[1] and len(set(labels.tolist())) == 3
    trace = trace_from_ids(np.arange(4))
    keys = ss.request_keys(trace, "embedding", texts=list(vectors), embedder=lambda t: [vectors[x] for x in t])
    assert keys.tolist() == labels.tolist()


def _prompt_trace(texts, blocks_per_request=2):
    n = len(texts)
    hash_ids = [[int(b) for b in range(i * blocks_per_request, (i + 1) * blocks_per_request)] for i in range(n)]
    trace = trace_from_requests(hash_ids, arrival_ms=np.arange(n) * 1000.0, input_tokens=[1024] * n)
    return dataclasses.replace(trace, request_texts=tuple(texts))


PROMPTS = ["You are a contract reviewer. Explain the termination clause and the indemnity.",
           "You are a contract reviewer. Explain the termination clause and the indemnities.",
           "Write a Rust function that parses a TOML file with serde and reports errors.",
           "You are a contract reviewer. Explain the termination clause and the indemnity!",
           "Suggest a vegetarian pasta sauce with tomatoes, basil and roasted garlic."]


def test_shard_key_embedding_clusters_the_traces_prompts():
    """Issue 13: the trace's own prompt texts (no caller-supplied callable) give the shard keys;
    auto picks embedding when the trace has texts, first-block when it has none."""
    trace = _prompt_trace(PROMPTS)
    keys = ss.request_keys(trace, "embedding")
    assert keys.tolist() == [0, 0, 1, 0, 2]
    assert ss.request_keys(trace).tolist() == keys.tolist()  # auto
    plain = dataclasses.replace(trace, request_texts=None)
    assert ss.request_keys(plain).tolist() == ss.request_keys(plain, "first-block").tolist() == [0, 2, 4, 6, 8]
    shards = ss.request_shards(trace, trace.request_offsets, 16, "embedding")
    expect = np.empty(3, dtype=np.int8)
    ss.hash_shards(np.arange(3, dtype=np.int64), np.arange(4, dtype=np.int64), 16, expect)
    assert shards.tolist() == expect[[0, 0, 1, 0, 2]].tolist()  # cluster ids hashed as every key is
    r = ss.run(trace, 100)
    assert r.extra["shard_key"] == "embedding"
    assert r.extra["embedding"] == {"embedder": "hashed", "similarity": 0.65, "search": r.extra["embedding"]["search"],
                                    "clusters": 3, "texts": 5, "seconds": r.extra["embedding"]["seconds"]}
    assert ss.run(plain, 100).extra["shard_key"] == "first-block" and "embedding" not in ss.run(plain, 100).extra


def test_embedding_shards_keep_one_clusters_blocks_from_another():
    """Two prompt clusters in two shards of two slots: the second cluster's stream of new
    blocks never evicts the first's two shared blocks (an LRU of three slots, which they
    push out, never hits)."""
    texts = [PROMPTS[0] if i % 2 == 0 else PROMPTS[2] for i in range(40)]
    hash_ids = [[1, 2] if i % 2 == 0 else [100 + i, 200 + i] for i in range(40)]
    trace = trace_from_requests(hash_ids, arrival_ms=np.zeros(40), input_tokens=[1024] * 40)
    trace = dataclasses.replace(trace, request_texts=tuple(texts))
    shards = ss.request_shards(trace, trace.request_offsets, 2, "embedding")
    assert shards.tolist() == [0, 1] * 20  # clusters 0 and 1; hashed, they land in shards 0 and 1
    hit = np.zeros(len(trace), dtype=np.uint8)
    ss.run(trace, 4, shards=2, hit_out=hit)
    even = np.isin(trace.request, np.arange(2, 40, 2))
    assert hit[even].all() and not hit[trace.request % 2 == 1].any()
    lru_hit = np.zeros(len(trace), dtype=np.uint8)
    lru.KERNEL(np.ascontiguousarray(trace.block), trace.request_offsets, np.int64(trace.n_blocks), np.int64(3),
               lru_hit)
    assert not lru_hit.any()


def test_clustering_is_done_once_per_trace_and_reused(monkeypatch):
    calls = []
    real = ss.cluster_texts
    monkeypatch.setattr(ss, "cluster_texts", lambda *a, **k: calls.append(1) or real(*a, **k))
    ss._LAST_CLUSTERING.clear()
    trace = _prompt_trace(PROMPTS)
    for capacity in (10, 20, 40):
        ss.run(trace, capacity, shard_key="embedding")
    assert len(calls) == 1
    ss.run(trace, 10, shard_key="embedding", similarity=0.99)
    assert len(calls) == 2


@pytest.mark.parametrize("kwargs,message", [
    ({"shard_key": "embedding"}, "no prompt texts"),
    ({"shard_key": "embedding", "texts": ["a"], "embedder": "word2vec"}, "embedder 'word2vec' unknown"),
    ({"shard_key": "embedding", "texts": ["a"], "similarity": 1.5}, "similarity threshold 1.5"),
    ({"shard_key": "embedding", "texts": ["a", "b"]}, "2 texts for 1 requests"),
    ({"shard_key": "tenant"}, "names no tenant"),
    ({"shard_key": "colour"}, "unknown"),
    ({"ttl_s": 0}, "ttl"),
])
def test_bad_shard_settings_are_one_line_errors(kwargs, message):
    with pytest.raises(PolicyEngineError, match=message) as info:
        ss.run(trace_from_ids(np.array([5])), 10, **kwargs)
    assert info.value.exit_code == 2


# ---------------------------------------------------------------------------- CTCCI


def _lru_hits(trace, capacity=100):
    hit = np.zeros(len(trace), dtype=np.uint8)
    lru.KERNEL(np.ascontiguousarray(trace.block), trace.request_offsets, np.int64(trace.n_blocks),
               np.int64(capacity), hit)
    return hit


def _tenants(hash_ids, tenant):
    return trace_from_requests(hash_ids, arrival_ms=[0] * len(hash_ids), input_tokens=[512 * len(h) for h in hash_ids],
                               tenant=tenant, tenant_names=("alice", "bob"))


def test_known_tenants_are_np_uniques():
    """The count-based distinct codes ctcci uses (np.unique would import numpy.ma) against np.unique."""
    rng = np.random.default_rng(1)
    for codes in (rng.integers(-1, 5, 100), rng.integers(-1, 3, 1), np.array([-1, -1]), rng.integers(0, 10**9, 50),
                  np.zeros(0), np.array([7, 7, 0])):
        codes = codes.astype(np.int32)
        got = _known_tenants(codes)
        assert got.dtype == np.int32 and got.tolist() == np.unique(codes[codes >= 0]).tolist()


def test_ctcci_on_a_crafted_two_tenant_trace():
    # alice [1,2,3]; bob [1,2,4] hits alice's 1 and 2; alice [1,4] hits her own 1 and bob's 4
    trace = _tenants([[1, 2, 3], [1, 2, 4], [1, 4]], [0, 1, 0])
    hit = _lru_hits(trace)
    assert hit.tolist() == [0, 0, 0, 1, 1, 0, 1, 1]
    out = ctcci(trace, hit)
    assert out["cross_tenant_hits"] == 3 and out["accesses"] == 8
    assert out["ctcci"] == pytest.approx(3 / 8)
    assert out["level"] == "heavy" and out["alert"] and out["alert_threshold"] == 0.08
    assert out["per_tenant"] == {"alice": {"accesses": 5, "cross_tenant_hits": 1},
                                 "bob": {"accesses": 3, "cross_tenant_hits": 2}}


def test_owner_is_the_tenant_that_last_inserted():
    # capacity 1: bob's 2 evicts alice's 1; bob then re-inserts 1, so alice's later hit is cross-tenant
    trace = _tenants([[1], [2], [1], [1]], [0, 1, 1, 0])
    hit = _lru_hits(trace, capacity=1)
    assert hit.tolist() == [0, 0, 0, 1]
    assert ctcci(trace, hit)["cross_tenant_hits"] == 1


def test_isolation_turns_cross_tenant_hits_into_misses():
    trace = _tenants([[1, 2, 3], [1, 2, 4], [1, 4]], [0, 1, 0])
    isolated = isolate(trace)
    hit = _lru_hits(isolated)
    assert hit.tolist() == [0, 0, 0, 0, 0, 0, 1, 0]
    assert ctcci(isolated, hit)["ctcci"] == 0.0


@pytest.mark.parametrize("index,name", [(0.0, "light"), (0.0499, "light"), (0.05, "medium"), (0.1999, "medium"),
                                        (0.2, "heavy"), (1.0, "heavy")])
def test_ctcci_levels(index, name):
    assert level(index) == name


def test_alert_thresholds_by_tenant_count():
    assert alert_threshold(2) == alert_threshold(99) == 0.08
    assert alert_threshold(100) == alert_threshold(1000) == 0.03


def test_the_action_matrix_gates_rebalancing():
    # one hot block per stack, requests 1 s apart: H is low and P99 small -> "keep": slots stay
    trace = trace_from_requests([[1] if i % 2 else [2] for i in range(400)], arrival_ms=np.arange(400) * 1000.0,
                                input_tokens=[100] * 400, tenant=[i % 2 for i in range(400)],
                                tenant_names=("a", "b"))
    r = ss.run(trace, 10, shard_key="tenant", shards=2, model="phi-3-mini")
    events = r.extra["events"]
    assert all(e["cell"] == "keep" and e["action"] == "keep" for e in events), events[0]
    assert all(e["slots"] == [5, 5] for e in events)
    ungated = ss.run(trace, 10, shard_key="tenant", shards=2, model="phi-3-mini", gated=False)
    assert ungated.extra["events"][0]["action"] == "migrate"
    for key in ("H", "d_ms", "score", "alpha"):
        assert key in events[0]
