"""LIRS, ARC, S3-FIFO and 2Q: differential tests against libCacheSim (computed live), exact
per-reference agreement on random small traces, and the behaviour that sets them apart
from LRU (a one-time scan does not flush a re-used working set)."""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcachesim_ref import LCS_CLASSES, lcs_hit_ratio, write_oracle, zipf_ids

from sitsprof.policies.registry import get_policy
from sitsprof.policies.sweep import simulate
from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.ids import trace_from_ids

lcs = pytest.importorskip("libcachesim")

POLICIES = ("lirs", "arc", "s3fifo", "2q")
# Our CLI name -> the key libcachesim_ref uses for libCacheSim's class.
LCS_KEY = {"lirs": "lirs", "arc": "arc", "s3fifo": "s3fifo", "2q": "twoq"}
TOLERANCE = {"lirs": 0.005, "arc": 0.001, "s3fifo": 0.001, "2q": 0.001}
MOONCAKE_CAPACITIES = (1000, 10000, 50000)
ZIPF_CAPACITIES = (500, 5000, 20000)


def kernel_flags(policy: str, block: np.ndarray, n_blocks: int, capacity: int, *params):
    """(hit flags, evictions, max_resident) straight from the policy kernel."""
    hit = np.full(len(block), 7, dtype=np.uint8)  # not 0/1, so an unwritten flag shows
    offsets = np.array([0, len(block)], dtype=np.int64)
    ev, mr = get_policy(policy).KERNEL(block, offsets, n_blocks, capacity, hit, *params)
    return hit, int(ev), int(mr)


def lcs_flags(policy: str, ids, capacity: int, **params) -> np.ndarray:
    """libCacheSim's hit/miss for every reference, one `get` at a time."""
    # A small initial hash table (it grows on demand): the default 2^24 slots per queue cost
    # more to allocate than these short traces take to replay.
    cache = getattr(lcs, LCS_CLASSES[LCS_KEY[policy]])(cache_size=capacity, hashpower=12, **params)
    req = lcs.Request()
    req.obj_size = 1
    out = np.zeros(len(ids), dtype=np.uint8)
    for i, x in enumerate(ids):
        req.obj_id = int(x)
        out[i] = cache.get(req)
    return out


@pytest.fixture(scope="module")
def mooncake(mooncake_path, tmp_path_factory):
    trace = read_trace(mooncake_path)
    oracle = write_oracle(tmp_path_factory.mktemp("lcs") / "mooncake.oracleGeneral", trace.original_id)
    return trace, oracle


@pytest.fixture(scope="module")
def zipf(tmp_path_factory):
    ids = zipf_ids(200_000, 50_000, alpha=0.9, seed=20240)
    oracle = write_oracle(tmp_path_factory.mktemp("lcs") / "zipf.oracleGeneral", ids)
    return trace_from_ids(ids), oracle


@pytest.mark.parametrize(
    "workload, capacities", [("mooncake", MOONCAKE_CAPACITIES), ("zipf", ZIPF_CAPACITIES)]
)
@pytest.mark.parametrize("policy", POLICIES)
def test_hit_ratio_matches_libcachesim(request, workload, capacities, policy):
    trace, oracle = request.getfixturevalue(workload)
    for capacity in capacities:
        ours = simulate(trace, policy, capacity)
        theirs = lcs_hit_ratio(oracle, LCS_KEY[policy], capacity)
        assert abs(ours.block_hit_ratio - theirs) <= TOLERANCE[policy], (policy, capacity, ours.block_hit_ratio, theirs)
        assert ours.max_resident <= capacity
        # Every miss inserts and every eviction removes one block: what is left fits.
        assert 0 <= ours.references - ours.hits - ours.evictions <= ours.max_resident


def assert_same_flags(policy: str, ids: np.ndarray, capacity: int) -> None:
    """Our kernel and libCacheSim agree on every reference; the resident count stays bounded."""
    block = np.unique(ids, return_inverse=True)[1].astype(np.int32)
    ours, evictions, max_resident = kernel_flags(policy, block, int(block.max()) + 1, capacity)
    theirs = lcs_flags(policy, ids, capacity)
    mismatch = np.flatnonzero(ours != theirs)
    assert mismatch.size == 0, f"{policy} @ {capacity}: first disagreement at reference {mismatch[0]}"
    assert max_resident <= capacity
    assert 0 <= len(ids) - int(ours.sum()) - evictions <= max_resident


# Small random traces with heavy reuse reach every branch (ghost hits, LIRS's non-resident
# HIR ids and its HIR queue of one or a few blocks, S3-FIFO's moves to main, 2Q's A1out
# hits) within a few hundred references.
@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_reference_agrees_with_libcachesim(policy, data):
    capacity = data.draw(st.integers(20, 400), label="capacity")
    n_ids = data.draw(st.integers(8, 3 * capacity), label="n_ids")
    ids = data.draw(st.lists(st.integers(0, n_ids - 1), min_size=1, max_size=1500), label="ids")
    assert_same_flags(policy, np.asarray(ids), capacity)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_reference_agrees_on_seeded_random_traces(policy):
    # Hypothesis favours short lists; these are full length, so rarer paths get exercised.
    rng = np.random.default_rng(7)
    for _ in range(30):
        capacity = int(rng.integers(20, 400))
        ids = rng.integers(0, rng.integers(8, 3 * capacity), int(rng.integers(200, 1500)))
        assert_same_flags(policy, ids, capacity)


@pytest.mark.parametrize(
    "policy, ours_params, lcs_params",
    [
        ("s3fifo", (0.2, 0.5, 1), dict(small_size_ratio=0.2, ghost_size_ratio=0.5, move_to_main_threshold=1)),
        ("s3fifo", (0.05, 1.5, 3), dict(small_size_ratio=0.05, ghost_size_ratio=1.5, move_to_main_threshold=3)),
        ("2q", (0.4, 0.25), dict(a_in_size_ratio=0.4, a_out_size_ratio=0.25)),
    ],
)
def test_parameters_mean_what_libcachesim_means(policy, ours_params, lcs_params):
    rng = np.random.default_rng(17)
    for _ in range(10):
        capacity = int(rng.integers(40, 300))
        ids = rng.integers(0, rng.integers(20, 3 * capacity), 1500)
        block = np.unique(ids, return_inverse=True)[1].astype(np.int32)
        ours = kernel_flags(policy, block, int(block.max()) + 1, capacity, *ours_params)[0]
        theirs = lcs_flags(policy, ids, capacity, **lcs_params)
        assert np.array_equal(ours, theirs), (policy, capacity, ours_params)


@pytest.mark.parametrize("policy", POLICIES)
def test_cache_larger_than_the_trace_misses_only_first_references(policy):
    ids = zipf_ids(20_000, 3_000, alpha=0.8, seed=3)
    block = np.unique(ids, return_inverse=True)[1].astype(np.int32)
    n_blocks = int(block.max()) + 1
    hit, evictions, max_resident = kernel_flags(policy, block, n_blocks, 2 * n_blocks + 200)
    first = np.zeros(len(block), dtype=bool)
    first[np.unique(block, return_index=True)[1]] = True
    assert np.array_equal(hit.astype(bool), ~first)
    assert evictions == 0 and max_resident == n_blocks


def scan_trace(rounds: int, hot: int, scan: int) -> tuple[np.ndarray, np.ndarray]:
    """The hot set twice (it becomes frequently used), then rounds of [`scan` never-seen
    blocks] + [the hot set, always in the same order]; and the mask of hot references."""
    parts = [np.arange(hot), np.arange(hot)]
    is_hot = [np.ones(2 * hot, dtype=bool)]
    fresh = hot
    for _ in range(rounds):
        parts += [np.arange(fresh, fresh + scan), np.arange(hot)]
        is_hot += [np.zeros(scan, dtype=bool), np.ones(hot, dtype=bool)]
        fresh += scan
    return np.concatenate(parts).astype(np.int32), np.concatenate(is_hot)


@pytest.mark.parametrize("policy", POLICIES)
def test_one_time_scans_do_not_flush_the_working_set(policy):
    # 50 hot blocks, then rounds of 60 one-time blocks and the hot set again: each hot block's
    # reuse distance is 110 > capacity 100, so LRU never hits again, while these policies keep
    # the hot set resident and let the scans pass through.
    block, is_hot = scan_trace(rounds=30, hot=50, scan=60)
    steady = is_hot.copy()
    steady[: 100 + 5 * 110] = False  # judge after five rounds
    lru_hit, _, _ = kernel_flags("lru", block, int(block.max()) + 1, 100)
    hit, _, _ = kernel_flags(policy, block, int(block.max()) + 1, 100)
    assert lru_hit[steady].mean() == 0.0
    assert hit[steady].mean() >= 0.9, hit[steady].mean()
    assert hit[~is_hot].sum() == 0  # one-time blocks can never hit


def test_arc_ghost_hit_in_b1_goes_to_t2_and_outlives_a_scan():
    # Capacity 4. Block 1 is hit once, so it sits in T2 and T1 stays below c: the next miss
    # demotes T1's tail (block 0) into the ghost list B1 instead of dropping it. Re-referencing
    # 0 is a ghost hit: a miss that raises p to 1 and puts 0 in T2. The scan 5..8 then cycles
    # through T1/B1 (|T1| > p), so 0 and 1 are still resident afterwards; LRU would have lost both.
    seq = [1, 1, 0, 2, 3, 4, 0, 5, 6, 7, 8, 0, 1]
    block = np.array(seq, dtype=np.int32)
    hit, evictions, _ = kernel_flags("arc", block, 9, 4)
    assert np.flatnonzero(hit).tolist() == [1, 11, 12]
    assert evictions == 6  # 0, 2, 3, 4, 5, 6 demoted to B1: 10 misses, 4 left resident
    assert lcs_flags("arc", seq, 4).tolist() == hit.tolist()
    assert kernel_flags("lru", block, 9, 4)[0][11:].tolist() == [0, 0]


def test_s3fifo_one_hit_blocks_leave_through_the_small_queue():
    # Capacity 20: small queue 2, main 18. Fill, then stream fresh blocks: once evictions have
    # started, fresh blocks enter the small queue and leave it (into the ghost) unless
    # re-referenced, so the 18 blocks in main stay resident.
    fill = list(range(20))
    stream = list(range(100, 160))
    again = list(range(2, 20))  # the blocks that went to main before the first eviction
    seq = fill + stream + again
    hit, _, _ = kernel_flags("s3fifo", np.unique(seq, return_inverse=True)[1].astype(np.int32), 98, 20)
    assert hit[-len(again):].all()
    assert lcs_flags("s3fifo", seq, 20).tolist() == hit.tolist()


def test_s3fifo_without_a_small_queue_caches_nothing():
    # Capacity 9: the small queue would get int(0.9) = 0 blocks; libCacheSim rejects this
    # configuration, we admit nothing rather than invent a queue size.
    block = np.array([0, 1, 0, 1, 0, 1], dtype=np.int32)
    hit, evictions, max_resident = kernel_flags("s3fifo", block, 2, 9)
    assert hit.tolist() == [0] * 6 and evictions == 0 and max_resident == 0
    assert kernel_flags("s3fifo", block, 2, 10)[0].tolist() == [0, 0, 0, 0, 0, 0]  # small = 1
    assert kernel_flags("s3fifo", block, 2, 20)[0].tolist() == [0, 0, 1, 1, 1, 1]


def test_lirs_pruning_stays_linear():
    # A long trace with many HIR entries piling up above the LIR blocks: pruning each entry
    # once keeps this to well under a second; re-scanning the stack would take minutes.
    ids = zipf_ids(600_000, 200_000, alpha=0.7, seed=5)
    block = np.unique(ids, return_inverse=True)[1].astype(np.int32)
    n_blocks = int(block.max()) + 1
    kernel_flags("lirs", block[:1000], n_blocks, 2000)  # compile (or load the cache) first
    start = time.perf_counter()
    kernel_flags("lirs", block, n_blocks, 2000)
    assert time.perf_counter() - start < 8.0


def _squeeze_by_copy(ring, gpos, state, tail, used, ghost_bit):
    """The plain reading of the squeeze: collect the live entries oldest first, then rewrite."""
    size = len(ring)
    live = [int(ring[(tail + i) % size]) for i in range(used)]
    live = [x for i, x in enumerate(live) if state[x] & ghost_bit and gpos[x] == (tail + i) % size]
    for j, x in enumerate(live):
        ring[j] = x
        gpos[x] = j
    return len(live), 0, len(live)


def test_ghost_squeeze_in_place_equals_collect_and_rewrite():
    """2Q's ghost ring is squeezed in place (the serving kernel runs without numba's runtime, so
    it may not allocate): same live ids in the same order, same positions, stale duplicates left
    out, on full rings with every tail."""
    from sitsprof.policies.classic.twoq import GHOST, _ghost_squeeze

    rng = np.random.default_rng(7)
    for _ in range(400):
        size, n_ids = int(rng.integers(2, 40)), int(rng.integers(1, 30))
        ring = rng.integers(0, n_ids, size).astype(np.int32)
        gpos = rng.integers(0, size, n_ids).astype(np.int64)
        state = (rng.integers(0, 2, n_ids) * GHOST).astype(np.int8)
        for k in np.flatnonzero(rng.random(size) < 0.4):
            gpos[ring[k]], state[ring[k]] = k, state[ring[k]] | GHOST
        tail = int(rng.integers(0, size))
        want_ring, want_gpos = ring.copy(), gpos.copy()
        want = _squeeze_by_copy(want_ring, want_gpos, state, tail, size, GHOST)
        got = _ghost_squeeze(ring, gpos, state, tail, size)
        assert tuple(got) == want
        assert (ring[:want[0]] == want_ring[:want[0]]).all() and (gpos == want_gpos).all()
