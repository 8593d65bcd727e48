"""Curves: one-pass LRU equal to per-capacity LRU simulation, log-spaced capacities, exact curves of
other policies equal to simulation, SHARDS-sampled curves within the stated error, and `policy mrc`."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcachesim_ref import zipf_ids

from sitsprof.policies.engine.mrc import (
    EXACT_BUDGET,
    MIN_RATE,
    auto_rate,
    block_hash,
    curve_capacities,
    lru_hit_counts,
    lru_hit_ratio_curve,
    lru_stack_distances,
    mean_absolute_error,
    policy_curve,
    shards_sample,
)
from sitsprof.policies.errors import CapacityError, PolicyEngineError
from sitsprof.policies.registry import get_policy
from sitsprof.policies.sweep import simulate
from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.ids import trace_from_ids


def test_stack_distances_by_hand():
    # a b c a b b d a
    ids = np.array([10, 11, 12, 10, 11, 11, 13, 10])
    assert lru_stack_distances(ids).tolist() == [-1, -1, -1, 3, 3, 1, -1, 3]


def per_capacity_hits(trace, capacities):
    return np.array([simulate(trace, "lru", c).hits for c in capacities])


def test_mooncake_curve_equals_simulation(mooncake_path):
    trace = read_trace(mooncake_path)
    caps = np.concatenate([[1, 2, 1000, 10000, 50000], curve_capacities(trace.n_blocks, 12)])
    hits = lru_hit_counts(trace, caps)
    assert hits.tolist() == per_capacity_hits(trace, caps).tolist()
    ratios = lru_hit_ratio_curve(trace, [1000, 10000, 50000, 10**9])
    assert np.round(ratios, 4).tolist() == [0.0445, 0.2112, 0.3546, 0.3664]  # libCacheSim 0.3.5's LRU


@pytest.mark.parametrize("alpha,seed", [(0.7, 5), (1.0, 6)])
def test_zipf_curve_equals_simulation(alpha, seed):
    trace = trace_from_ids(zipf_ids(40_000, 8_000, alpha, seed))
    caps = [1, 7, 100, 1000, 4000, 8000, 20000]
    assert lru_hit_counts(trace, caps).tolist() == per_capacity_hits(trace, caps).tolist()


@settings(max_examples=80, deadline=None)
@given(ids=st.lists(st.integers(0, 25), min_size=1, max_size=200))
def test_curve_is_monotone_and_equals_simulation(ids):
    trace = trace_from_ids(np.array(ids, dtype=np.int64))
    caps = list(range(1, 30))
    curve = lru_hit_ratio_curve(trace, caps)
    assert np.all(np.diff(curve) >= 0)
    assert curve[-1] == pytest.approx((len(ids) - len(set(ids))) / len(ids))
    assert (curve * len(ids)).round().astype(int).tolist() == per_capacity_hits(trace, caps).tolist()


def test_capacity_errors_and_capacity_grid():
    with pytest.raises(CapacityError, match="capacity 0 is not positive"):
        lru_hit_ratio_curve(np.array([1, 2, 1]), [10, 0])
    assert curve_capacities(1000, 4, "linear").tolist() == [250, 500, 750, 1000]
    assert curve_capacities(3, 100).tolist() == [1, 2, 3]
    with pytest.raises(ValueError):
        curve_capacities(10, 0)
    with pytest.raises(ValueError, match="spacing"):
        curve_capacities(10, 3, "cubic")


def test_out_of_range_block_ids_are_refused():
    import dataclasses

    from sitsprof.policies.errors import PolicyEngineError

    trace = dataclasses.replace(trace_from_ids(np.array([5, 6, 5, 7])), n_blocks=2)
    with pytest.raises(PolicyEngineError, match="dense in 0..1"):
        lru_hit_ratio_curve(trace, [1, 2])


def test_capacities_are_log_spaced_by_default():
    """The knee below 10% of the blocks gets most of the points: geometric from 0.01% of the
    blocks to all of them (linear spacing put 1 point of 20 below 10%)."""
    assert curve_capacities(1_000_000, 5).tolist() == [100, 1000, 10_000, 100_000, 1_000_000]
    caps = curve_capacities(182_790, 20)
    assert len(caps) == 20 and caps[0] == 19 and caps[-1] == 182_790
    assert (caps < 18_279).sum() >= 14
    ratios = caps[1:] / caps[:-1]
    assert ratios.max() / ratios.min() < 1.1  # evenly spaced on a log axis
    assert curve_capacities(50, 20).tolist()[0] == 1 and curve_capacities(50, 20).tolist()[-1] == 50


def documented_hash(ids) -> np.ndarray:
    """The sampling hash as the docstring states it, in numpy: x = id * GOLDEN; x ^= x >> 29;
    x *= GOLDEN; the top 24 bits (uint64 arithmetic wraps)."""
    from sitsprof.policies.traces.hashing import GOLDEN

    x = np.asarray(ids, dtype=np.int64).view(np.uint64) * GOLDEN
    x ^= x >> np.uint64(29)
    x *= GOLDEN
    return x >> np.uint64(40)


def test_sample_keeps_every_reference_of_a_kept_block():
    ids = zipf_ids(50_000, 20_000, 0.8, 21)
    trace = trace_from_ids(ids)
    half = shards_sample(trace, 0.5)
    tenth = shards_sample(trace, 0.1)
    hashes = documented_hash(np.arange(20_000))
    assert [int(block_hash(np.int64(i))) for i in (0, 1, 7, 19_999)] == hashes[[0, 1, 7, 19_999]].tolist()
    for sample, rate in ((half, 0.5), (tenth, 0.1)):
        kept = np.flatnonzero(hashes < round(rate * 2**24))
        mask = np.isin(ids, kept)
        assert sample.references == mask.sum() and sample.trace_references == len(ids)
        # the kept references, renumbered densely in order of first appearance
        assert sample.block.tolist() == trace_from_ids(ids[mask]).block.tolist()
        assert sample.n_blocks == len(np.unique(ids[mask]))
        assert sample.rate == sample.n_blocks / trace.n_blocks
        assert abs(sample.rate - rate) < 0.02
    # thresholds nest: a block kept at 10% is kept at 50%
    assert set(ids[np.isin(ids, np.flatnonzero(hashes < round(0.1 * 2**24)))]) <= set(
        ids[np.isin(ids, np.flatnonzero(hashes < round(0.5 * 2**24)))])
    # consecutive ids (Mooncake's hash ids are 0, 1, 2, ...) sample at the asked rate in every run of them
    runs = np.array([(hashes[lo:lo + 2000] < round(0.1 * 2**24)).mean() for lo in range(0, 20_000, 2000)])
    assert np.all(np.abs(runs - 0.1) < 0.03)
    with pytest.raises(PolicyEngineError, match=r"sample rate 0 is not in \(0, 1\]"):
        shards_sample(trace, 0)


@pytest.mark.parametrize("policy", ["lru", "arc", "s3fifo", "belady"])
def test_exact_curve_equals_simulation(policy):
    trace = trace_from_ids(zipf_ids(20_000, 4_000, 0.9, 31))
    caps = curve_capacities(trace.n_blocks, 8)
    curve = policy_curve(trace, get_policy(policy), caps, sample="exact")
    assert curve.method == ("stack-distance" if policy == "lru" else "replay")
    assert curve.hit_ratios.tolist() == [simulate(trace, policy, int(c)).block_hit_ratio for c in caps]
    # auto: this trace is small enough to be exact
    assert policy_curve(trace, get_policy(policy), caps).hit_ratios.tolist() == curve.hit_ratios.tolist()


def test_auto_samples_only_past_the_budget():
    trace = trace_from_ids(zipf_ids(30_000, 6_000, 0.9, 32))
    caps = [2_000, 4_000, 6_000]
    assert policy_curve(trace, get_policy("arc"), caps).method == "replay"
    sampled = policy_curve(trace, get_policy("arc"), caps, budget=1_000)
    assert sampled.method == "shards" and np.all(sampled.rates < 1)
    assert auto_rate(30_000, 3, budget=10) == MIN_RATE
    assert auto_rate(10**8, 20) == pytest.approx(EXACT_BUDGET / (10**8 * 20))
    # LRU stays exact whatever the budget: its curve is one pass
    assert policy_curve(trace, get_policy("lru"), caps, budget=1).method == "stack-distance"
    for bad in ("fast", 1.5, -0.1):
        with pytest.raises(PolicyEngineError):
            policy_curve(trace, get_policy("arc"), caps, sample=bad)


def test_small_capacities_sample_at_a_higher_rate():
    """A point's sampled cache holds at least MIN_SAMPLED_BLOCKS blocks; below that the whole
    trace is replayed, so those points are exact."""
    trace = trace_from_ids(zipf_ids(30_000, 8_000, 0.9, 33))
    caps = [100, 500, 2_000, 8_000]
    curve = policy_curve(trace, get_policy("s3fifo"), caps, sample=0.05)
    assert curve.rates[0] == curve.rates[1] == 1.0
    assert curve.hit_ratios[0] == simulate(trace, "s3fifo", 100).block_hit_ratio
    assert 0.4 < curve.rates[2] < 0.6 and 0.1 < curve.rates[3] < 0.15  # 1000 blocks / capacity
    lower = policy_curve(trace, get_policy("s3fifo"), caps, sample=0.05, min_blocks=100)
    assert lower.rates[0] == 1.0 and 0.15 < lower.rates[1] < 0.25 and np.all(lower.rates[2:] < 0.07)
    with pytest.raises(PolicyEngineError, match="min_blocks 0 is not a whole number of blocks"):
        policy_curve(trace, get_policy("s3fifo"), caps, sample=0.05, min_blocks=0)


def sampled_errors(trace, rate, policies=("lru", "arc", "s3fifo", "belady")):
    caps = curve_capacities(trace.n_blocks, 20)
    out = {}
    for name in policies:
        exact = policy_curve(trace, get_policy(name), caps, sample="exact")
        sampled = policy_curve(trace, get_policy(name), caps, sample=rate)
        assert sampled.method == "shards"
        out[name] = mean_absolute_error(sampled, exact)
    return out


def test_sampled_curves_are_close_on_mooncake(mooncake_path):
    """The error `policy mrc --help` and docs/RESEARCH.md state (measured 0.0003-0.0008)."""
    errors = sampled_errors(read_trace(mooncake_path), 0.01)
    assert all(e < 0.002 for e in errors.values()), errors


def test_sampled_curves_are_close_on_the_generated_workload():
    from sitsprof.policies.traces import generator

    trace = generator.requests_to_trace(generator.generate_requests(seed=0))
    errors = sampled_errors(trace, 0.01)
    assert all(e < 0.002 for e in errors.values()), errors


def test_mrc_json_is_a_results_document_the_report_draws(cli, tmp_path):
    from sitsprof.policies.engine.results import read_results
    from sitsprof.policies.traces import generator
    from sitsprof.reports.policy_report import policy_section

    path = tmp_path / "w.jsonl"
    generator.write_mooncake_jsonl(generator.generate_requests(seed=3, duration_s=200), path)
    code, out, err = cli("policy", "mrc", str(path), "-p", "lru,arc", "--points", "6", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["format"] == "sitsprof.policy-results" and doc["results"] == []
    assert [c["policy"] for c in doc["curves"]] == ["lru", "arc", "belady"]
    trace = read_trace(path)
    lru_points = doc["curves"][0]["points"]
    caps = [p["capacity"] for p in lru_points]
    assert caps == curve_capacities(trace.n_blocks, 6).tolist()
    assert [p["hit_ratio"] for p in lru_points] == lru_hit_ratio_curve(trace, caps).tolist()
    assert doc["curves"][2]["points"][0]["hit_ratio"] == simulate(trace, "belady", caps[0]).block_hit_ratio
    saved = tmp_path / "mrc.json"
    saved.write_text(out)
    section = policy_section(read_results(saved), source=str(saved))
    (figure,) = [f for f in section.figures if f.title == "Hit-ratio curves"]
    assert [d["name"] for d in figure.data] == ["lru", "arc", "belady (offline optimal)"]
    assert figure.data[2]["line"]["dash"] == "dash" and figure.layout["xaxis"]["type"] == "log"
    assert figure.data[0]["x"] == caps
    code, out, err = cli("policy", "mrc", str(path), "--sample", "2")
    assert code == 2 and "sample rate 2.0 is not in (0, 1]" in err


def test_mrc_table_shows_the_headroom_column(cli, tmp_path):
    from sitsprof.policies.traces import generator

    path = tmp_path / "w.jsonl"
    generator.write_mooncake_jsonl(generator.generate_requests(seed=3, duration_s=200), path)
    code, out, err = cli("policy", "mrc", str(path), "--points", "4")
    assert code == 0, err
    assert "Block hit ratio per capacity" in out and "belady (headroom)" in out
    assert "lru: exact (one stack-distance pass)" in out and "belady: exact (a full replay per point)" in out
    code, out, err = cli("policy", "mrc", str(path), "--points", "4", "--no-headroom", "-p", "s3fifo",
                         "--sample", "0.2")
    assert code == 0, err
    assert "belady" not in out and "s3fifo: sampled (SHARDS)" in out
    code, out, err = cli("policy", "mrc", str(path), "--points", "3", "-p", "arc,s3fifo", "--sample", "0.2")
    assert code == 0, err
    assert "arc, s3fifo, belady: sampled (SHARDS)" in out


def test_results_reader_checks_curves(tmp_path):
    from sitsprof.policies.engine.results import PolicyResultsError, document, read_results

    path = tmp_path / "c.json"
    good = {"policy": "lru", "method": "stack-distance", "points": [{"capacity": 10, "hit_ratio": 0.5}]}
    path.write_text(json.dumps(document([], curves=[good])))
    assert read_results(path)["curves"][0]["policy"] == "lru"
    for bad, message in (
        ({"policy": "lru", "points": [{"capacity": 0, "hit_ratio": 0.5}]}, r"curves\[0\]\.points\[0\]\.capacity"),
        ({"policy": "lru", "points": [{"capacity": 10, "hit_ratio": 1.5}]}, r"points\[0\]\.hit_ratio must be a ratio"),
        ({"points": []}, r"curves\[0\] must be an object with a policy name"),
    ):
        path.write_text(json.dumps(document([], curves=[bad])))
        with pytest.raises(PolicyResultsError, match=message) as info:
            read_results(path)
        assert info.value.exit_code == 2
