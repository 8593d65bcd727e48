"""Exact quantiles, histograms and downsampled CDFs against numpy on recorded-style arrays."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sitsprof.reports.distributions import (
    QUANTILES,
    cdf_points,
    downsample_series,
    histogram,
    quantile_label,
    quantiles,
    summarize,
)


def ladder_samples(seed=0, n=200_000):
    """A latency ladder as a pointer chase records it: L1, L2 and HBM modes with a tail."""
    rng = np.random.default_rng(seed)
    parts = [rng.normal(32, 1, n // 4), rng.normal(280, 6, n // 4), rng.normal(640, 20, n // 2)]
    tail = rng.exponential(300, n // 100) + 700
    return np.concatenate(parts + [tail]).astype(np.float32)


def test_labels():
    assert [quantile_label(q) for q in QUANTILES] == ["p50", "p90", "p99", "p99.9"]


def test_quantiles_match_numpy_exactly():
    x = ladder_samples()
    got = quantiles(x)
    want = np.quantile(x, QUANTILES)
    assert list(got.values()) == pytest.approx(list(want), rel=0, abs=0)


@settings(max_examples=40, deadline=None)
@given(arrays(np.int64, st.integers(1, 300), elements=st.integers(0, 10**6)))
def test_quantiles_any_integer_array(x):
    got = quantiles(x, (0.0, 0.5, 0.99, 1.0))
    assert got["p0"] == x.min() and got["p100"] == x.max()
    assert got["p50"] == pytest.approx(np.quantile(x, 0.5))


def test_nan_dropped_and_empty():
    x = np.array([1.0, np.nan, 3.0, np.inf])
    assert quantiles(x)["p50"] == 2.0
    s = summarize(np.array([], dtype=float))
    assert s.count == 0 and np.isnan(s.quantiles["p99"])


def test_summary():
    x = ladder_samples(1, 10_000)
    s = summarize(x).to_dict()
    assert s["count"] == x.size
    assert s["mean"] == pytest.approx(float(np.mean(x, dtype=np.float64)))
    assert s["max"] == float(x.max()) and s["p99.9"] <= s["max"]


def test_histogram_counts_everything():
    x = ladder_samples(2, 50_000)
    edges, counts = histogram(x, bins=64)
    assert counts.sum() == x.size and edges.size == 65
    edges, counts = histogram(x, bins=64, log=True)
    assert counts.sum() == x.size and np.all(np.diff(np.log(edges)) > 0)


def test_presorted_histogram_matches_numpy():
    x = ladder_samples(4, 100_000)
    srt = np.sort(x)
    for log in (False, True):
        edges, counts = histogram(srt, bins=97, log=log, presorted=True)
        assert np.array_equal(counts, np.histogram(x.astype(np.float64), bins=edges)[0])
    edges, counts = histogram(srt, bins=10, range_=(300, 700), presorted=True)
    assert np.array_equal(counts, np.histogram(x.astype(np.float64), bins=edges)[0])


def test_cdf_points_are_exact_order_statistics_and_keep_the_tail():
    x = ladder_samples(3, 1_000_000)
    xs, ps = cdf_points(x, points=400)
    assert xs.size <= 402 and np.all(np.diff(xs) >= 0) and np.all(np.diff(ps) > 0)
    assert ps[-1] == 1.0 and xs[-1] == x.max()
    srt = np.sort(x)
    ranks = np.rint(ps * x.size).astype(int) - 1
    assert np.array_equal(xs, srt[ranks])
    assert (ps > 0.999).sum() >= 20  # the tail beyond P99.9 is drawn, not skipped


def test_downsample_series_keeps_spikes():
    t = np.arange(1_000_000)
    y = np.zeros(t.size)
    y[123_457] = 99.0
    xs, ys = downsample_series(t, y, max_points=1000)
    assert xs.size <= 1000 and ys.max() == 99.0 and 123_457 in xs
    short = downsample_series(t[:10], y[:10])
    assert short[0].size == 10
