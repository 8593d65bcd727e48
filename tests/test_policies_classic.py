"""LRU, FIFO, LFU, SIEVE and prefix-LRU: differential tests against libCacheSim (run live) and
hand-checked semantics."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcachesim_ref import lcs_hit_ratio, write_oracle, zipf_ids

from sitsprof.policies.sweep import simulate
from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.ids import trace_from_ids, trace_from_requests
from sitsprof.policies.traces.trace import Trace

pytest.importorskip("libcachesim")

CLASSIC = ("lru", "fifo", "lfu", "sieve")
MOONCAKE_CAPACITIES = (1000, 10000, 50000)


def requests_trace(requests, input_tokens=None) -> Trace:
    """Multi-block requests (ids dense in order of first appearance), 512-token blocks."""
    inputs = [512 * len(r) for r in requests] if input_tokens is None else input_tokens
    return trace_from_requests(requests, np.zeros(len(requests)), inputs)


def hit_flags(trace, policy, capacity) -> list[int]:
    """Per-reference hit flags of one replay, through the kernel the engine calls."""
    from sitsprof.policies.registry import get_policy

    hit = np.zeros(len(trace), dtype=np.uint8)
    get_policy(policy).KERNEL(trace.block, trace.request_offsets, trace.n_blocks, capacity, hit)
    return hit.tolist()


@pytest.fixture(scope="module")
def mooncake(mooncake_path, tmp_path_factory):
    trace = read_trace(mooncake_path)
    oracle = write_oracle(tmp_path_factory.mktemp("lcs") / "mooncake.oracleGeneral", trace.original_id)
    return trace, oracle


@pytest.mark.parametrize("policy", CLASSIC)
def test_mooncake_matches_libcachesim(mooncake, policy):
    trace, oracle = mooncake
    for capacity in MOONCAKE_CAPACITIES:
        ours = simulate(trace, policy, capacity)
        theirs = lcs_hit_ratio(oracle, policy, capacity)
        assert abs(ours.block_hit_ratio - theirs) <= 0.001, (policy, capacity)
        # In fact the replay is identical: the same number of hits.
        assert ours.hits == round(theirs * len(trace)), (policy, capacity, ours.hits, theirs)


def test_mooncake_reference_numbers(mooncake):
    """The harness reproduces the libCacheSim 0.3.5 figures (0.3.5, Mooncake trace)."""
    trace, _ = mooncake
    expected = {"lru": (0.0445, 0.2112, 0.3546), "lfu": (0.0481, 0.1318, 0.3438),
                "sieve": (0.0481, 0.1318, 0.3438)}
    for policy, ratios in expected.items():
        for capacity, ratio in zip(MOONCAKE_CAPACITIES, ratios):
            assert round(simulate(trace, policy, capacity).block_hit_ratio, 4) == ratio


@pytest.mark.parametrize("alpha,seed", [(0.8, 1), (1.0, 2), (1.2, 3)])
def test_zipf_matches_libcachesim(tmp_path, alpha, seed):
    ids = zipf_ids(30_000, 5_000, alpha, seed)
    oracle = write_oracle(tmp_path / "zipf.oracleGeneral", ids)
    trace = trace_from_ids(ids)
    for policy in CLASSIC:
        for capacity in (10, 250, 2_000):
            ours = simulate(trace, policy, capacity)
            theirs = lcs_hit_ratio(oracle, policy, capacity)
            assert ours.hits == round(theirs * len(ids)), (policy, capacity, alpha)


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.integers(0, 12), min_size=1, max_size=120),
    capacity=st.integers(1, 8),
)
def test_small_random_traces_match_libcachesim(ids, capacity):
    trace = trace_from_ids(np.array(ids, dtype=np.int64))
    with tempfile.TemporaryDirectory() as tmp:
        oracle = write_oracle(Path(tmp) / "t.oracleGeneral", ids)
        for policy in CLASSIC:
            theirs = lcs_hit_ratio(oracle, policy, capacity, hashpower=10)
            assert simulate(trace, policy, capacity).hits == round(theirs * len(ids)), policy


def test_lfu_evicts_the_least_frequent():
    # capacity 3: 0 and 1 reach frequency 2, so 3 and then 2 and 4 evict whichever block
    # is at frequency 1; 0 and 1 survive to the end.
    trace = trace_from_ids(np.array([0, 1, 0, 1, 2, 3, 2, 4, 0, 1]))
    assert hit_flags(trace, "lfu", 3) == [0, 0, 1, 1, 0, 0, 0, 0, 1, 1]


def test_lfu_ties_evict_the_oldest():
    # capacity 2, all at frequency 1: 2 evicts 0 (oldest), 0 evicts 1 (now oldest), 2 hits.
    trace = trace_from_ids(np.array([0, 1, 2, 0, 2]))
    assert hit_flags(trace, "lfu", 2) == [0, 0, 0, 0, 1]


def test_sieve_hand_keeps_its_place():
    # capacity 3: 0,1,2 resident; the hit marks 0. 3 arrives: the hand clears 0 and evicts 1,
    # then rests on 2; 4 and 5 evict 2 and 3 from there, so 0 survives and hits again.
    trace = trace_from_ids(np.array([0, 1, 2, 0, 3, 4, 5, 0]))
    assert hit_flags(trace, "sieve", 3) == [0, 0, 0, 1, 0, 0, 0, 1]
    # LRU and FIFO both lose 0 by then.
    assert hit_flags(trace, "lru", 3) == [0, 0, 0, 1, 0, 0, 0, 0]
    assert hit_flags(trace, "fifo", 3) == [0, 0, 0, 1, 0, 0, 0, 0]


def test_fifo_ignores_hits():
    trace = trace_from_ids(np.array([0, 1, 0, 2, 0]))
    assert hit_flags(trace, "fifo", 2) == [0, 0, 1, 0, 0]  # 2 evicts 0 despite its hit
    assert hit_flags(trace, "lru", 2) == [0, 0, 1, 0, 1]  # LRU keeps 0


def test_prefix_lru_evicts_a_finished_requests_tail_first():
    # capacity 4: request A = [0,1,2] finishes; free queue (front first): 2, 1, 0.
    # request B = [3,4]: 3 takes a free slot, 4 evicts 2 (A's tail), not 0 (A's head),
    # so A's prefix [0,1] hits when A comes back.
    trace = requests_trace([[0, 1, 2], [3, 4], [0, 1, 2]])
    assert hit_flags(trace, "prefix_lru", 4) == [0, 0, 0, 0, 0, 1, 1, 0]
    # plain LRU on the same references evicts 0 (least recent) instead.
    assert hit_flags(trace, "lru", 4) == [0, 0, 0, 0, 0, 0, 0, 0]


def test_prefix_lru_pins_the_request_in_flight():
    # capacity 2, one request of 3 distinct blocks: the third cannot evict the first two,
    # which are in use, so it is not cached; the next request finds 0 and 1.
    trace = requests_trace([[0, 1, 2], [0, 1, 2]])
    assert hit_flags(trace, "prefix_lru", 2) == [0, 0, 0, 1, 1, 0]
    result = simulate(trace, "prefix_lru", 2)
    assert result.max_resident == 2 and result.evictions == 0


def test_prefix_lru_takes_a_rereferenced_block_off_the_free_queue():
    # capacity 3. A=[0,1] frees 1 then 0 (front: 1). B=[1] re-uses 1: off the queue, then
    # back at the end. C=[2,3]: 2 takes the free slot, 3 evicts the front, now 0, not 1.
    trace = requests_trace([[0, 1], [1], [2, 3], [1], [0]])
    assert hit_flags(trace, "prefix_lru", 3) == [0, 0, 1, 0, 0, 1, 0]


def test_lfu_and_sieve_differ():
    # libCacheSim's figures for LFU and SIEVE coincide on the Mooncake trace; they
    # are still different policies. Capacity 2: 0 and 1 are each hit once; 2 evicts 0 in both.
    # Then 3 arrives: LFU evicts 2 (frequency 1), SIEVE's hand has cleared 1's bit and evicts 1.
    trace = trace_from_ids(np.array([0, 0, 1, 1, 2, 3, 1]))
    assert hit_flags(trace, "lfu", 2) == [0, 1, 0, 1, 0, 0, 1]
    assert hit_flags(trace, "sieve", 2) == [0, 1, 0, 1, 0, 0, 0]


def prefix_lru_model(requests, capacity):
    """A plain-Python vLLM-style block pool: dict of free blocks in queue order."""
    free: dict[int, None] = {}  # insertion order = queue order, front first
    in_use: set[int] = set()
    flags = []
    for req in requests:
        for b in req:
            if b in in_use or b in free:
                flags.append(1)
                free.pop(b, None)
                in_use.add(b)
                continue
            flags.append(0)
            if len(in_use) + len(free) >= capacity:
                if not free:
                    continue  # everything is pinned by this request: not cached
                del free[next(iter(free))]
            in_use.add(b)
        for b in reversed(req):
            if b in in_use:
                in_use.discard(b)
                free[b] = None
    return flags


@settings(max_examples=60, deadline=None)
@given(
    requests=st.lists(st.lists(st.integers(0, 20), min_size=1, max_size=10), min_size=1, max_size=30),
    capacity=st.integers(1, 25),
)
def test_prefix_lru_matches_a_python_model(requests, capacity):
    trace = requests_trace(requests)
    dense = trace.block.tolist()
    offsets = trace.request_offsets
    dense_requests = [dense[offsets[r]:offsets[r + 1]] for r in range(len(requests))]
    assert hit_flags(trace, "prefix_lru", capacity) == prefix_lru_model(dense_requests, capacity)
