"""One-pass LRU curves equal per-capacity LRU simulation."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcachesim_ref import zipf_ids

from sitsprof.policies.engine.mrc import (
    curve_capacities,
    lru_hit_counts,
    lru_hit_ratio_curve,
    lru_stack_distances,
)
from sitsprof.policies.errors import CapacityError
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
    assert np.round(ratios, 4).tolist() == [0.0445, 0.2112, 0.3546, 0.3664]  # DESIGN.md


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
    assert curve_capacities(1000, 4).tolist() == [250, 500, 750, 1000]
    assert curve_capacities(3, 100).tolist() == [1, 2, 3]
    with pytest.raises(ValueError):
        curve_capacities(10, 0)


def test_out_of_range_block_ids_are_refused():
    import dataclasses

    from sitsprof.policies.errors import PolicyEngineError

    trace = dataclasses.replace(trace_from_ids(np.array([5, 6, 5, 7])), n_blocks=2)
    with pytest.raises(PolicyEngineError, match="dense in 0..1"):
        lru_hit_ratio_curve(trace, [1, 2])
