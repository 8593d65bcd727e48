"""Replacement delay and L2 residency per load level, from the raw `probes/loaded` table.

The method is docs/replacement-delay.md's. Per load level the run holds three same-load
sample sets from one SM: `hot` (a small ring chased continuously: re-touched every few
microseconds, so on H100/H200 it is served from the near L2 partition, ~280 cycles), `hbm` (a
chase far beyond the L2: the miss latency under that load) and `retouch` (lines touched once,
then again after a controlled interval; each row carries the interval asked for and the line's
measured age).

Each re-touch falls in one of three bands of that level (issue 20 item 3):

* `hit`: at or below the same-load hot-set p99 (`hit_cut`): an L2 hit like the hot set's;
* `miss`: at or above the same-load HBM p1 (`cut`, the eviction cut): an L2 miss, the line was
  evicted;
* `far`: strictly between the two: slower than any near hit of the hot set, faster than any
  measured miss. A line that lost its near copy but is still in the far partition lands here
  (~500 cycles; gpu-benches gpu-latency/gh200.txt: 458-490 cycles at 34-37 MB). It is reported
  on its own (count and latency) and NEVER counted as an eviction.

When the two references overlap (hot p99 >= HBM p1, e.g. L2 queueing at the top load) there is
no far band: one cut, the one that misclassifies the smallest share of both references, splits
hit from miss, and `separation` (1 - that smallest share) says how far to trust it.

The replacement delay is a missed re-touch's latency minus the median same-load hot-set hit;
the residency curve is the share of re-touches not evicted (hit or far) against the lines' age,
and the residency time the age at which it falls through one half.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "MIN_SEPARATION",
    "RESIDENT_HALF",
    "LevelReplacement",
    "balanced_threshold",
    "band_cuts",
    "has_method_columns",
    "replacement_levels",
    "residency_time",
]

#: The residency time is the age at which this share of re-touched lines is still in the L2.
RESIDENT_HALF = 0.5
#: Below this separation (1 - the smallest total misclassification) hits and misses overlap too
#: much for the classification to mean anything; the level is reported with a note.
MIN_SEPARATION = 0.5


def balanced_threshold(hit_sorted: np.ndarray, miss_sorted: np.ndarray) -> tuple[float, float]:
    """(cut, separation): the latency t minimising P(hit > t) + P(miss <= t) over the two sorted
    sample sets (the middle of the best run of candidates), and 1 - that minimum (1: the sets do
    not overlap; 0: they are the same)."""
    hit = np.asarray(hit_sorted, dtype=np.float64)
    miss = np.asarray(miss_sorted, dtype=np.float64)
    if hit.size == 0 or miss.size == 0:
        raise ValueError("the classification needs hit and miss samples")
    cand = np.unique(np.concatenate([hit, miss]))
    err = ((hit.size - np.searchsorted(hit, cand, side="right")) / hit.size
           + np.searchsorted(miss, cand, side="right") / miss.size)
    best = float(err.min())
    ks = np.flatnonzero(err <= best + 1e-12)
    k = int(ks[ks.size // 2])
    cut = (cand[k] + cand[k + 1]) / 2 if k + 1 < cand.size else float(cand[k])
    return float(cut), float(max(0.0, 1.0 - best))


def residency_time(ages_ns: np.ndarray, resident: np.ndarray, level: float = RESIDENT_HALF) -> tuple[float, str]:
    """(age, bound) where the residency curve (resident share per age, ages increasing) falls
    through `level`: interpolated in log age ("="), or the first age with bound "<" when already
    below there, or the last age with bound ">" when it never falls that far."""
    ages = np.asarray(ages_ns, dtype=np.float64)
    frac = np.asarray(resident, dtype=np.float64)
    if ages.size == 0:
        return float("nan"), "none"
    below = np.flatnonzero(frac < level)
    if below.size == 0:
        return float(ages[-1]), ">"
    i = int(below[0])
    if i == 0:
        return float(ages[0]), "<"
    a0, a1 = np.log(max(ages[i - 1], 1.0)), np.log(max(ages[i], 1.0))
    f0, f1 = frac[i - 1], frac[i]
    x = a0 + (a1 - a0) * (f0 - level) / (f0 - f1) if f0 != f1 else a1
    return float(np.exp(x)), "="


def band_cuts(hit_sorted: np.ndarray, miss_sorted: np.ndarray) -> tuple[float, float, float]:
    """(hit_cut, miss_cut, separation) of one level: the hot-set p99 and the HBM p1 when the first
    is below the second (a re-touch between them is in the far band), else the balanced cut for
    both (no far band); separation as `balanced_threshold` gives it."""
    cut, separation = balanced_threshold(hit_sorted, miss_sorted)
    hit_p99 = float(np.quantile(hit_sorted, 0.99))
    miss_p1 = float(np.quantile(miss_sorted, 0.01))
    if hit_p99 < miss_p1:
        return hit_p99, miss_p1, separation
    return cut, cut, separation


@dataclass
class LevelReplacement:
    """One load level's classification, delays and residency curve."""

    level: int
    bandwidth_fraction: float
    hit: np.ndarray             # sorted hot-set latencies (cycles)
    miss_reference: np.ndarray  # sorted HBM-chase latencies (cycles)
    hit_cut: float              # a re-touch at or below: hit (the hot-set p99, or the one cut)
    cut: float                  # the eviction cut: at or above (above, with one cut), a miss
    separation: float
    retouch: np.ndarray         # re-touch latencies, in table order
    missed: np.ndarray          # bool per re-touch: evicted (miss band)
    far: np.ndarray             # bool per re-touch: far band (between the cuts), not evicted
    delays: np.ndarray          # sorted: missed re-touch latency - median hit
    curve: list[dict]           # per interval asked for: interval_ns, age_ns (median), samples, resident
    residency_ns: float
    residency_bound: str

    @property
    def hit_p50(self) -> float:
        return float(np.median(self.hit))

    def row(self) -> dict:
        """The level's figures as one row of `RunAnalysis.replacement_levels`."""
        d = self.delays

        def q(p: float) -> float:
            return float(np.quantile(d, p)) if d.size else float("nan")

        far = self.retouch[self.far]
        return {"level": self.level, "bandwidth_fraction": self.bandwidth_fraction,
                "hit_p50": self.hit_p50, "hit_p99": float(np.quantile(self.hit, 0.99)),
                "miss_p1": float(np.quantile(self.miss_reference, 0.01)),
                "miss_p50": float(np.median(self.miss_reference)), "hit_cut": self.hit_cut, "cut": self.cut,
                "separation": self.separation, "retouches": int(self.retouch.size), "misses": int(self.missed.sum()),
                "far_band": int(far.size), "far_p50": float(np.median(far)) if far.size else float("nan"),
                "far_fraction": float(self.far.mean()) if self.far.size else float("nan"),
                "evicted_fraction": float(self.missed.mean()) if self.missed.size else float("nan"),
                "delay_p50": q(0.5), "delay_p90": q(0.9), "delay_p99": q(0.99),
                "residency_ns": self.residency_ns, "residency_bound": self.residency_bound}


def has_method_columns(frame) -> bool:
    """Whether a loaded table holds the hot set and the re-touch intervals this method needs."""
    return {"access", "interval_ns", "age_ns"} <= set(frame.columns) and (frame["access"] == "hot").any()


def replacement_levels(frame, level_col: str = "level", lat_col: str = "latency_cycles",
                       fraction_col: str = "bandwidth_fraction") -> list[LevelReplacement]:
    """Per load level with hot, hbm and retouch samples (valid rows only: the caller filters)."""
    out = []
    for level, sub in frame.groupby(level_col, sort=True):
        acc = sub["access"].to_numpy()
        hit = np.sort(sub.loc[acc == "hot", lat_col].to_numpy(dtype=np.float64))
        miss = np.sort(sub.loc[acc == "hbm", lat_col].to_numpy(dtype=np.float64))
        rt = sub[acc == "retouch"]
        if hit.size == 0 or miss.size == 0 or rt.empty:
            continue
        hit_cut, cut, sep = band_cuts(hit, miss)
        lat = rt[lat_col].to_numpy(dtype=np.float64)
        missed = lat >= cut if hit_cut < cut else lat > cut
        far = (lat > hit_cut) & ~missed
        delays = np.sort(lat[missed] - float(np.median(hit)))
        curve = []
        intervals = rt["interval_ns"].to_numpy()
        ages = rt["age_ns"].to_numpy(dtype=np.float64)
        for iv in np.unique(intervals):
            sel = intervals == iv
            curve.append({"interval_ns": int(iv), "age_ns": float(np.median(ages[sel])), "samples": int(sel.sum()),
                          "resident_fraction": float(1.0 - missed[sel].mean()),
                          "far_fraction": float(far[sel].mean())})
        curve.sort(key=lambda c: c["age_ns"])
        res_ns, bound = residency_time([c["age_ns"] for c in curve], [c["resident_fraction"] for c in curve])
        out.append(LevelReplacement(int(level), float(rt[fraction_col].mean()), hit, miss, hit_cut, cut, sep, lat,
                                    missed, far, delays, curve, res_ns, bound))
    return out
