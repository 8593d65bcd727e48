"""Latency distributions on arrays: exact quantiles, histograms and downsampled CDFs.

The distribution is the product of a latency probe, so the numbers here are exact (computed
on every sample) while what goes into a plot is downsampled to a few hundred points, chosen
so that the tail (P99, P99.9, max) stays visible however many samples there are.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "QUANTILES",
    "Summary",
    "cdf_grid",
    "cdf_points",
    "downsample_series",
    "histogram",
    "quantile_label",
    "quantiles",
    "summarize",
]

#: Quantiles reported for every probe and tier.
QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99, 0.999)


def quantile_label(q: float) -> str:
    """0.5 -> 'p50', 0.999 -> 'p99.9'."""
    text = f"{q * 100:.4f}".rstrip("0").rstrip(".")
    return f"p{text}"


def _as_array(values) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        arr = arr.ravel()
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"latency samples must be numeric, got dtype {arr.dtype}")
    if arr.dtype.kind == "f":
        arr = arr[np.isfinite(arr)]
    return arr


def quantiles(values, qs=QUANTILES) -> dict[str, float]:
    """Exact quantiles (numpy's default linear interpolation), keyed 'p50', 'p99.9', ...

    NaN and infinite samples are dropped; an empty input gives NaN for every quantile.
    """
    arr = _as_array(values)
    if arr.size == 0:
        return {quantile_label(q): float("nan") for q in qs}
    got = np.quantile(arr, list(qs))
    return {quantile_label(q): float(v) for q, v in zip(qs, got)}


@dataclass(frozen=True)
class Summary:
    """Exact summary statistics of one sample set."""

    count: int
    mean: float
    std: float
    min: float
    max: float
    quantiles: dict[str, float]

    def to_dict(self) -> dict:
        return {"count": self.count, "mean": self.mean, "std": self.std,
                "min": self.min, "max": self.max, **self.quantiles}


def summarize(values, qs=QUANTILES) -> Summary:
    """Count, mean, std, min, max and the exact quantiles `qs`."""
    arr = _as_array(values)
    if arr.size == 0:
        nan = float("nan")
        return Summary(0, nan, nan, nan, nan, quantiles(arr, qs))
    return Summary(
        count=int(arr.size),
        mean=float(arr.mean(dtype=np.float64)),
        std=float(arr.std(dtype=np.float64)),
        min=float(arr.min()),
        max=float(arr.max()),
        quantiles=quantiles(arr, qs),
    )


def histogram(values, bins: int = 100, log: bool = False, range_=None,
              presorted: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Counts over `bins` equal-width (or, with `log`, log-spaced) bins: (edges, counts).

    Counts are exact and equal numpy.histogram's (last bin closed); `edges` has one more
    entry than `counts`. With `presorted`, counts come from binary searches (fast on
    millions of samples).
    """
    arr = _as_array(values)
    if arr.size == 0:
        return np.array([0.0, 1.0]), np.zeros(1, dtype=np.int64)
    lo, hi = (float(arr.min()), float(arr.max())) if range_ is None else map(float, range_)
    if hi <= lo:
        hi = lo + 1.0
    if log and lo > 0:
        edges = np.geomspace(lo, hi, bins + 1)
    else:
        edges = np.linspace(lo, hi, bins + 1)
    if presorted:
        # The left edge of every bin, then the last edge inclusive; values outside fall away.
        pos = np.searchsorted(arr, edges[:-1], side="left")
        end = np.searchsorted(arr, edges[-1], side="right")
        counts = np.diff(np.append(pos, end))
        return edges, counts.astype(np.int64)
    counts, edges = np.histogram(arr.astype(np.float64, copy=False), bins=edges)
    return edges, counts.astype(np.int64)


def cdf_grid(n: int, points: int = 400) -> np.ndarray:
    """Probabilities at which to draw the CDF of `n` samples with `points` points.

    Half the points are spread evenly over [0, 0.9], the other half log-spaced in 1 - p
    from 0.1 down to 1/n, so P99, P99.9 and the maximum each get their own points.
    """
    if n <= 1:
        return np.array([0.0, 1.0])
    half = max(points // 2, 2)
    body = np.linspace(0.0, 0.9, half, endpoint=False)
    tail_exp = np.linspace(1.0, np.log10(n), half)
    tail = 1.0 - 10.0 ** (-tail_exp)
    grid = np.unique(np.concatenate([body, tail, [1.0]]))
    return grid


def cdf_points(values, points: int = 400, sorted_values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A downsampled empirical CDF: (latency, probability) pairs, at most ~`points` long.

    Each x is an exact order statistic of the data (the sample at rank ceil(p * n)), so the
    curve passes through the true quantiles. Pass `sorted_values` to reuse a sort.
    """
    arr = np.sort(_as_array(values)) if sorted_values is None else sorted_values
    n = arr.size
    if n == 0:
        return np.array([]), np.array([])
    grid = cdf_grid(n, points)
    ranks = np.clip(np.ceil(grid * n).astype(np.int64) - 1, 0, n - 1)
    ranks = np.unique(ranks)
    return arr[ranks].astype(np.float64), (ranks + 1) / n


def downsample_series(x, y, max_points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Reduce a long time series to about `max_points` points, keeping each bucket's min and max.

    Spikes survive (a plain stride would drop them); short series are returned unchanged.
    """
    x = np.asarray(x)
    y = np.asarray(y, dtype=np.float64)
    n = y.size
    if n <= max_points:
        return x, y
    buckets = max(max_points // 2, 1)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    idx = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        if hi <= lo:
            continue
        seg = y[lo:hi]
        if not np.isfinite(seg).any():
            idx.append(lo)
            continue
        idx.extend(sorted({lo + int(np.nanargmin(seg)), lo + int(np.nanargmax(seg))}))
    idx = np.asarray(idx, dtype=np.int64)
    return x[idx], y[idx]
