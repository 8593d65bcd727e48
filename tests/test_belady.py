"""Belady's MIN (`belady`): equal to libCacheSim's Belady (run live) on the Mooncake trace and on
seeded Zipf traces, checked by hand, and never beaten by a policy that caches every miss."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcachesim_ref import write_oracle, zipf_ids

from sitsprof.policies.classic import belady
from sitsprof.policies.registry import policy_names, select_policies
from sitsprof.policies.sweep import simulate
from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.ids import trace_from_ids

lcs = pytest.importorskip("libcachesim")

MOONCAKE_CAPACITIES = (1000, 10000, 50000)


def lcs_belady_hits(oracle_path, capacity: int, n: int) -> int:
    """libCacheSim's Belady hits at `capacity` objects (size-1 objects, oracleGeneral next access)."""
    reader = lcs.TraceReader(str(oracle_path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    miss_ratio, _ = lcs.Belady(capacity, hashpower=16).process_trace(reader)
    return round((1.0 - miss_ratio) * n)


def flags(ids, capacity) -> list[int]:
    trace = trace_from_ids(np.asarray(ids, dtype=np.int64))
    hit = np.zeros(len(trace), dtype=np.uint8)
    belady.KERNEL(trace.block, trace.request_offsets, trace.n_blocks, capacity, hit)
    return hit.tolist()


def test_registered_last_and_in_all():
    assert policy_names()[-1] == "belady"
    assert "belady" in select_policies("all")
    assert select_policies("lru,belady") == ["lru", "belady"]


def test_by_hand():
    # capacity 2: a b c a b -> at c evict b (next use 4) over a (next use 3); a hits, b misses
    assert flags([1, 2, 3, 1, 2], 2) == [0, 0, 0, 1, 0]
    # blocks never used again leave first: at d the resident c (never again) goes, a and b stay
    assert flags([1, 2, 3, 1, 4, 2, 1], 3) == [0, 0, 0, 1, 0, 1, 1]
    # LRU gets no hit on a loop one larger than the cache; MIN misses once per 3 references
    # after the first lap (worked through by hand), and the last miss evicts a block never used again
    loop = [0, 1, 2, 3] * 5
    assert simulate(np.array(loop), "lru", 3).hits == 0
    assert flags(loop, 3) == [0, 0, 0, 0] + [1, 1, 0] * 5 + [1]
    r = simulate(np.array(loop), "belady", 3)
    assert r.hits == 11 and r.max_resident == 3 and r.evictions == len(loop) - 11 - 3


def test_mooncake_matches_libcachesim(mooncake_path, tmp_path):
    trace = read_trace(mooncake_path)
    oracle = write_oracle(tmp_path / "mooncake.oracleGeneral", trace.original_id)
    for capacity in MOONCAKE_CAPACITIES:
        ours = simulate(trace, "belady", capacity)
        assert ours.hits == lcs_belady_hits(oracle, capacity, len(trace)), capacity
        assert ours.hits >= simulate(trace, "lru", capacity).hits


@pytest.mark.parametrize("alpha,seed", [(0.7, 11), (1.0, 12), (1.3, 13)])
def test_zipf_matches_libcachesim(tmp_path, alpha, seed):
    ids = zipf_ids(30_000, 5_000, alpha, seed)
    oracle = write_oracle(tmp_path / "zipf.oracleGeneral", ids)
    for capacity in (1, 10, 100, 1000, 4000, 5000):
        assert simulate(ids, "belady", capacity).hits == lcs_belady_hits(oracle, capacity, len(ids)), capacity


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 20), min_size=1, max_size=120), capacity=st.integers(1, 22))
def test_per_reference_flags_match_libcachesim(tmp_path_factory, ids, capacity):
    """Request by request: libCacheSim's `get` says hit or miss exactly where the kernel does."""
    oracle = write_oracle(tmp_path_factory.mktemp("b") / "t.oracleGeneral", ids)
    reader = lcs.TraceReader(str(oracle), lcs.TraceType.ORACLE_GENERAL_TRACE)
    cache = lcs.Belady(capacity, hashpower=8)
    theirs = [int(cache.get(req)) for req in reader]
    assert flags(ids, capacity) == theirs


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(st.integers(0, 30), min_size=1, max_size=150), capacity=st.integers(1, 30))
def test_no_policy_that_caches_every_miss_beats_it(ids, capacity):
    trace = trace_from_ids(np.array(ids, dtype=np.int64))
    best = simulate(trace, "belady", capacity).hits
    for name in ("lru", "fifo", "lfu", "sieve", "arc", "s3fifo", "2q", "lirs"):
        assert simulate(trace, name, capacity).hits <= best, name


def test_simulate_shows_the_headroom(cli, tmp_path):
    """`policy simulate` puts Belady beside every table: the last row of `-p all`, else one line
    under the hit-ratio table."""
    import json

    from sitsprof.policies.traces import generator

    path = tmp_path / "w.jsonl"
    generator.write_mooncake_jsonl(generator.generate_requests(seed=5, duration_s=120), path)
    trace = read_trace(path)
    best = [simulate(trace, "belady", c) for c in (10, 100)]
    code, out, err = cli("policy", "simulate", str(path), "-p", "lru,arc", "-c", "10,100")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("headroom (belady, offline optimal)"))
    assert line.endswith(f"{best[0].block_hit_ratio:.4f} at 10, {best[1].block_hit_ratio:.4f} at 100")
    code, out, err = cli("policy", "simulate", str(path), "-c", "10,100", "--json")
    assert code == 0, err
    rows = json.loads(out)["results"]
    assert [r["policy"] for r in rows[-2:]] == ["belady", "belady"]
    assert [r["hits"] for r in rows[-2:]] == [r.hits for r in best]
    classic = [(i, r) for i, r in enumerate(rows) if r["policy"] not in ("belady", "sits", "semantic-shard")]
    assert len(classic) == 18 and all(r["hits"] <= best[i % 2].hits for i, r in classic)
