"""The cost model's percentiles against numpy's: the same floats, bit for bit.

`costmodel.percentiles` selects the order statistics by a radix select on the float bits
(`_order_statistics`) instead of partitioning all the TTFTs, then applies numpy's own index,
weight and interpolation steps. These tests compare it with `np.percentile` (the reference the
CLI's figures were made with) on many arrays: continuous, a few distinct values (including two
that share their top 16 bits, as a one-block-per-request trace's hit and miss TTFTs do), ties,
infinities, sizes from 1 up, and the values where it must fall back (NaN, negative, -0.0).
"""
from __future__ import annotations

import numpy as np
import pytest

from sitsprof.policies.cost.costmodel import _order_statistics, latency_summary, percentiles


def _arrays(rng):
    for n in list(range(1, 12)) + [50, 101, 1000, 4097]:
        yield rng.random(n)
        yield rng.exponential(1e-3, n)
        yield rng.choice([0.25, 1.5e-3, 7.0], n)
        yield np.round(rng.random(n) * 10) / 7
        yield np.where(rng.random(n) < 0.1, np.inf, rng.random(n))
        yield np.zeros(n)
    # two values with the same top 16 bits: the hit and miss TTFTs of the bench trace
    two = np.array([0.01005681, 0.01012999])
    yield two[(rng.random(300_000) < 0.4).astype(int)]
    yield rng.exponential(1.0, 600_000)  # buckets over the gather limit: counted a second time
    yield np.concatenate([np.full(400_000, 3.0), rng.random(1000)])


@pytest.mark.parametrize("qs", [(50, 95, 99), (0, 100), (33.3, 66.6, 99.99)])
def test_percentiles_are_numpys(qs):
    rng = np.random.default_rng(sum(int(q * 100) for q in qs))
    for values in _arrays(rng):
        with np.errstate(invalid="ignore"):  # inf - inf in the interpolation, on both sides
            want = np.percentile(values, qs)
            got = percentiles(values.copy(), qs)
        assert np.array_equal(got, want, equal_nan=True), (len(values), got, want)


def test_order_statistics_are_the_sorted_values():
    rng = np.random.default_rng(3)
    for values in _arrays(rng):
        ordered = np.sort(values)
        ranks = np.unique(rng.integers(0, len(values), 6))
        out = np.empty(len(ranks))
        assert _order_statistics(values, ranks, out)
        assert np.array_equal(out, ordered[ranks])


@pytest.mark.parametrize("bad", [np.nan, -1.0, -0.0])
def test_values_it_cannot_order_by_bits_fall_back_to_numpy(bad):
    values = np.array([0.5, 0.25, bad, 1.0, 2.0])
    out = np.empty(1)
    assert not _order_statistics(values, np.array([2]), out)
    assert np.array_equal(percentiles(values), np.percentile(values, [50, 95, 99]), equal_nan=True)


def test_latency_summary_leaves_its_input_alone():
    values = np.random.default_rng(5).random(1001)
    before = values.copy()
    summary = latency_summary(values, overwrite=True)
    assert np.array_equal(values, before)
    assert summary["ttft_p50_ms"] == float(np.percentile(before, 50) * 1e3)
    assert summary["ttft_mean_ms"] == float(np.mean(before) * 1e3)
