"""SITS adaptive policy: its two behaviours are exactly LRU and ARC, the controller's score
and action matrix at their boundaries, and the Mooncake targets of issue 3."""
from __future__ import annotations

import numpy as np
import pytest

from sitsprof.policies.adaptive import shadows, signals, sits
from sitsprof.policies.adaptive.signals import action_cell, adapt_alpha, migration_score, window_bounds
from sitsprof.policies.adaptive.sits import Controller, SitsConfig
from sitsprof.policies.classic import arc, fifo, lfu, lirs, lru, s3fifo, sieve, twoq
from sitsprof.policies.classic.arc import RECENCY, SCAN
from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.hashing import GOLDEN
from sitsprof.policies.traces.ids import trace_from_ids

CLASSIC = (lru, fifo, lfu, lirs, arc, s3fifo, sieve, twoq)


def hash_buckets(block: np.ndarray, bits: int = 8) -> np.ndarray:
    """Reference: the multiplicative (Fibonacci) hash of dense ids into 2**bits buckets, in numpy."""
    return ((block.astype(np.uint64) * GOLDEN) >> np.uint64(64 - bits)).astype(np.int64)


def access_entropy(block: np.ndarray) -> float:
    """Reference: Shannon entropy (bits) of the ids hashed into 256 buckets, in numpy."""
    buckets = hash_buckets(np.asarray(block))
    if len(buckets) == 0:
        return 0.0
    counts = np.bincount(buckets, minlength=256)
    p = counts[counts > 0] / len(buckets)
    return float(-(p * np.log2(p)).sum())


@pytest.fixture(scope="module")
def mooncake(mooncake_path):
    return read_trace(mooncake_path)


def _kernel_hits(module, trace, capacity):
    hit = np.zeros(len(trace), dtype=np.uint8)
    module.KERNEL(np.ascontiguousarray(trace.block), trace.request_offsets, np.int64(trace.n_blocks),
                  np.int64(capacity), hit)
    return hit


def _zipf_trace(n=40_000, objects=5_000, seed=1):
    rng = np.random.default_rng(seed)
    ids = rng.zipf(1.1, n) % objects
    scan = np.arange(objects, objects + 3_000)  # a one-off scan in the middle
    ids = np.concatenate((ids[: n // 2], scan, ids[n // 2:]))
    return trace_from_ids(ids, times=np.arange(len(ids), dtype=float))


@pytest.mark.parametrize("initial,module", [("recency", lru), ("scan", arc)])
@pytest.mark.parametrize("capacity", [50, 700])
def test_pinned_behaviour_is_exactly_lru_or_arc(initial, module, capacity):
    trace = _zipf_trace()
    hit = np.zeros(len(trace), dtype=np.uint8)
    sits.run(trace, capacity, initial=initial, switching=False, window_refs=997, hit_out=hit)
    assert np.array_equal(hit, _kernel_hits(module, trace, capacity))


def test_switching_keeps_the_cache_warm_and_resident_bounded():
    trace = _zipf_trace()
    cap = 400
    r = sits.run(trace, cap, window_refs=500, margin=0.0)
    assert r.max_resident <= cap
    switches = [e for e in r.extra["events"] if e["from"] != e["to"]]
    # a switch flips behaviour over the same lists: the window after it still hits
    hit = np.zeros(len(trace), dtype=np.uint8)
    sits.run(trace, cap, window_refs=500, margin=0.0, hit_out=hit)
    for e in switches:
        lo = (e["window"] + 1) * 500
        if lo + 500 <= len(trace):
            assert hit[lo:lo + 100].sum() > 0, e


def test_every_window_logs_a_decision():
    trace = _zipf_trace()
    r = sits.run(trace, 300, window_refs=1000)
    events = r.extra["events"]
    assert len(events) == r.extra["windows"] == len(window_bounds(trace, 60.0, 1000)) - 1
    for key in ("time", "window", "H", "d_ms", "score", "action", "alpha", "cell", "from", "to"):
        assert key in events[0]
    assert [e["window"] for e in events] == list(range(len(events)))
    assert all(0.0 <= e["H"] <= 8.0 for e in events)


def test_score_formula_and_caps():
    assert migration_score(8, 200) == pytest.approx(1.0)
    assert migration_score(4, 100) == pytest.approx(0.5)
    assert migration_score(16, 400) == pytest.approx(1.0)  # both capped at 1
    assert migration_score(0, 200) == pytest.approx(0.4)
    assert migration_score(8, 0) == pytest.approx(0.6)
    assert migration_score(8, 0, alpha=0.3) == pytest.approx(0.3)


@pytest.mark.parametrize("h,d,cell", [
    (2.499, 49.99, "keep"),
    (2.5, 49.99, "score"),      # H < 2.5 is strict
    (2.499, 50.0, "score"),     # d < 50 is strict
    (6.0, 150.01, "score"),     # H > 6 is strict
    (6.01, 150.0, "score"),     # d > 150 is strict
    (6.01, 150.01, "migrate"),
    (8.0, 1e6, "migrate"),
    (0.0, 0.0, "keep"),
])
def test_action_matrix_boundaries(h, d, cell):
    assert action_cell(h, d) == cell


def test_alpha_adapts_to_load_within_bounds():
    assert adapt_alpha(0.6, 1.0) == pytest.approx(0.6)
    assert adapt_alpha(0.6, 3.0) == pytest.approx(0.4)  # busier: latency weighs more
    assert adapt_alpha(0.6, 0.0) == pytest.approx(0.7)
    assert adapt_alpha(0.6, 50.0) == 0.2 and adapt_alpha(0.6, -50.0) == 0.8


def test_controller_obeys_the_matrix():
    lead = {RECENCY: 100, SCAN: 10}
    ctl = Controller(SitsConfig(), behaviour=SCAN)
    assert ctl.decide(0, 0.0, 1.0, 10.0, 1.0, lead, 1000) == SCAN  # keep cell: no change
    assert ctl.events[-1]["action"] == "keep"
    ctl = Controller(SitsConfig(alpha=0.6, adapt=False), behaviour=SCAN)
    # score cell, score 0.6*3/8 + 0.4*60/200 = 0.345 < 0.5: keep despite the lead
    assert ctl.decide(0, 0.0, 3.0, 60.0, 1.0, lead, 1000) == SCAN
    ctl = Controller(SitsConfig(adapt=False), behaviour=SCAN)
    # score cell, score 0.6*7/8 + 0.4*100/200 = 0.725 >= 0.5 and lead .09 > margin: migrate
    assert ctl.decide(0, 0.0, 7.0, 100.0, 1.0, lead, 1000) == RECENCY
    assert ctl.events[-1]["action"] == "migrate" and ctl.events[-1]["to"] == "recency"
    # migrate cell: a lead above migrate_margin (0.001 of the sampled references) is enough
    ctl = Controller(SitsConfig(), behaviour=SCAN)
    assert ctl.decide(0, 0.0, 7.0, 180.0, 1.0, {RECENCY: 12, SCAN: 10}, 1000) == RECENCY
    ctl = Controller(SitsConfig(), behaviour=SCAN)
    assert ctl.decide(0, 0.0, 7.0, 180.0, 1.0, {RECENCY: 11, SCAN: 10}, 1000) == SCAN  # 0.001 is not above
    ctl = Controller(SitsConfig(migrate_margin=0.0), behaviour=SCAN)
    assert ctl.decide(0, 0.0, 7.0, 180.0, 1.0, {RECENCY: 10, SCAN: 10}, 1000) == SCAN  # a tie keeps


def _entropy(block):
    return signals.window_entropy(block, 0, len(block))


def test_entropy_is_bounded_by_eight_bits():
    assert _entropy(np.zeros(1000, dtype=np.int32)) == 0.0
    assert _entropy(np.arange(100_000, dtype=np.int32)) == pytest.approx(8.0, abs=0.01)
    assert 0.9 < _entropy(np.array([1, 2] * 50, dtype=np.int32)) <= 1.0


def test_windows_follow_trace_time_and_reference_cap():
    trace = trace_from_ids(np.arange(10), times=np.array([0, 1, 2, 60, 61, 62, 63, 64, 130, 131], dtype=float))
    assert window_bounds(trace, 60.0, 100).tolist() == [0, 3, 8, 10]
    assert window_bounds(trace, 60.0, 2).tolist() == [0, 2, 3, 5, 7, 8, 10]


def test_mooncake_targets(mooncake):
    """Issue 3: >= best classic - 0.005 at every capacity, above LRU at two of them."""
    above_lru = 0
    for capacity in (1_000, 10_000, 50_000):
        ratios = {m.NAME: _kernel_hits(m, mooncake, capacity).mean() for m in CLASSIC}
        r = sits.run(mooncake, capacity)
        assert r.block_hit_ratio >= max(ratios.values()) - 0.005, (capacity, r.block_hit_ratio, ratios)
        above_lru += r.block_hit_ratio > ratios["lru"]
        assert r.extra["cost"]["ttft_p99_ms"] > 0
        # the engine-contract path (no trace time: ~64 equal windows) holds the bound too
        engine = _kernel_hits(sits, mooncake, capacity).mean()
        assert engine >= max(ratios.values()) - 0.005, (capacity, engine)
    assert above_lru >= 2


def test_compiled_helpers_match_their_numpy_definitions():
    rng = np.random.default_rng(5)
    block = rng.integers(0, 50_000, 20_000).astype(np.int32)
    for k in (1, 3):
        expected = np.flatnonzero(hash_buckets(block, 16) & ((1 << k) - 1) == 0)
        bounds = np.array([0, 7_000, 7_001, 20_000], dtype=np.int64)
        dense, m, cuts = shadows.sample_refs(block, 50_000, k, bounds)
        assert cuts.tolist() == np.searchsorted(expected, bounds).tolist()
        # dense renumbering keeps identity: equal blocks <-> equal codes, 0..m-1 all used
        assert len(np.unique(dense)) == len(np.unique(block[expected])) == m
        assert len(set(zip(block[expected].tolist(), dense.tolist()))) == m  # a bijection
        counts = shadows.shadow_counts(block, 50_000, 8 << k, k, bounds)
        for behaviour, module in ((RECENCY, lru), (SCAN, arc)):
            hits = _kernel_hits(module, trace_from_ids(block[expected]), 8)
            assert counts[1 + behaviour].tolist() == [int(hits[a:b].sum()) for a, b in zip(cuts[:-1], cuts[1:])]
    assert signals.window_entropy(block, 100, 5_000) == pytest.approx(access_entropy(block[100:5_000]))
    values = rng.random(3_000)
    for m in (1, 2, 101, 2_048):
        assert signals.p99(values, m) == pytest.approx(np.percentile(values[:m], 99))


def test_reference_count_windows_start_at_request_boundaries():
    trace = trace_from_ids(np.arange(10))
    assert window_bounds(trace, 0.0, 3).tolist() == [0, 3, 6, 9, 10]
    from sitsprof.policies.traces.ids import trace_from_requests
    multi = trace_from_requests([[1, 2, 3], [4], [5, 6], [7, 8, 9, 10]], arrival_ms=[0, 0, 0, 0],
                                input_tokens=[1536, 512, 1024, 2048])
    assert window_bounds(multi, 0.0, 4).tolist() == [0, 4, 10]  # request 3 starts at 6 < 8
    assert window_bounds(multi, 0.0, 100).tolist() == [0, 10]


def test_strided_entropy_matches_the_slice():
    block = np.random.default_rng(2).integers(0, 10_000, 50_000).astype(np.int32)
    assert signals.window_entropy(block, 7, 40_000, 5) == pytest.approx(access_entropy(block[7:40_000:5]))


def test_large_windows_sample_their_p99_within_bounds():
    # 20,000 one-block requests in one window: P99 from a strided sample of <= P99_SAMPLE (1024) of them
    trace = trace_from_ids(np.arange(20_000) % 7_000, times=np.zeros(20_000))
    r = sits.run(trace, 500, window_refs=1 << 20)
    assert r.extra["windows"] == 1 and r.extra["events"][0]["d_ms"] > 0
