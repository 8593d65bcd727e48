"""Memory tiers and latency steps found in a footprint sweep by change-point detection.

Input: footprints in ascending order and, per footprint, either latency samples or one
typical latency (the median). The per-footprint medians are taken in log space, where a
tier is a plateau and noise is roughly proportional to the level, and cut into constant
segments by exact least-squares segmentation (optimal partitioning by dynamic programming;
n is a few dozen footprints, so O(k n^2) is nothing). The number of segments is chosen by a
penalty on each added segment scaled by the noise of the data itself (a robust estimate from
successive differences), then neighbours whose levels differ by less than `min_ratio` are
merged. Segments of a single footprint between two plateaus are transitions (a footprint
that straddles a capacity), reported apart, not as tiers. No latency threshold is fixed in
advance; names come from the order of the plateaus (and from the L2 size when it is given).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = [
    "BEYOND_HBM_LABEL",
    "TIER_LABELS",
    "TIER_NAMES",
    "Segment",
    "Segmentation",
    "Step",
    "detect_steps",
    "detect_tiers",
    "name_tiers",
    "optimal_partition",
    "per_footprint_medians",
    "robust_noise",
    "segment",
]

#: Tier names in footprint order (the calibration file's tier keys).
TIER_NAMES = ("l1", "l2_near", "l2_far", "hbm", "tlb_miss")
TIER_LABELS = {"l1": "L1", "l2_near": "L2 near", "l2_far": "L2 far", "hbm": "HBM", "tlb_miss": "HBM + TLB miss"}
#: A ladder plateau beyond the first HBM one is named `hbm_<n>` ("HBM, plateau n: cause not
#: shown") by the ladder alone; `tlb_miss` only when the TLB sweep shows a step at that footprint
#: (reports.analysis.name_tiers_by_tlb): a second plateau is not evidence of a TLB miss by itself.
BEYOND_HBM_LABEL = "HBM, plateau {n} (cause not shown by the TLB sweep)"


@dataclass
class Segment:
    """Rows start..stop-1 of the sweep (stop exclusive) sharing one level."""

    start: int
    stop: int
    level: float  # median of the per-footprint medians, in the input's units
    footprint_lo: int
    footprint_hi: int
    name: str = ""
    label: str = ""

    @property
    def n_points(self) -> int:
        return self.stop - self.start

    def get(self, key, default=None):
        """Dict-style access, so callers can treat a segment as a mapping."""
        return getattr(self, key, default)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Segmentation:
    """Plateaus (tiers or levels) and the transition points between them."""

    segments: list[Segment] = field(default_factory=list)
    transitions: list[Segment] = field(default_factory=list)
    noise: float = 0.0  # robust s.d. of log latency between neighbouring footprints


@dataclass
class Step:
    """A rise in latency between two plateaus of a sweep."""

    index: int               # first row of the higher plateau
    reach_bytes: int         # last footprint of the lower plateau
    step_at_bytes: int       # first footprint of the higher plateau
    before: float            # level of the lower plateau
    after: float             # level of the higher plateau

    @property
    def size(self) -> float:
        return self.after - self.before

    def to_dict(self) -> dict:
        return {**asdict(self), "size": self.size}


def per_footprint_medians(latencies) -> np.ndarray:
    """One median per footprint from either medians (1-D numbers) or per-footprint samples."""
    if isinstance(latencies, np.ndarray) and latencies.ndim == 1 and latencies.dtype != object:
        return latencies.astype(np.float64)
    values = list(latencies)
    if all(np.ndim(v) == 0 for v in values):
        return np.asarray(values, dtype=np.float64)
    return np.array([np.median(np.asarray(v, dtype=np.float64)) if np.size(v) else np.nan for v in values])


def robust_noise(y: np.ndarray) -> float:
    """Noise s.d. of a piecewise-constant series from its successive differences (MAD)."""
    if y.size < 3:
        return 0.0
    d = np.abs(np.diff(y))
    return float(1.4826 * np.median(d) / np.sqrt(2.0))


def _segment_costs(y: np.ndarray):
    s1 = np.concatenate([[0.0], np.cumsum(y)])
    s2 = np.concatenate([[0.0], np.cumsum(y * y)])

    def cost(i: int, j: int) -> float:  # squared deviation of y[i:j] from its mean
        n = j - i
        m = (s1[j] - s1[i]) / n
        return max(s2[j] - s2[i] - n * m * m, 0.0)

    return cost


def optimal_partition(y: np.ndarray, max_segments: int) -> list[tuple[list[tuple[int, int]], float]]:
    """For k = 1..max_segments, the least-squares best split of y into k constant segments,
    with its total squared deviation: [(bounds, cost)]."""
    n = y.size
    cost = _segment_costs(y)
    kmax = max(1, min(max_segments, n))
    best = np.full((kmax + 1, n + 1), np.inf)
    arg = np.zeros((kmax + 1, n + 1), dtype=np.int64)
    best[0, 0] = 0.0
    for k in range(1, kmax + 1):
        for j in range(k, n + 1):
            cands = [best[k - 1, i] + cost(i, j) for i in range(k - 1, j)]
            i = int(np.argmin(cands))
            best[k, j] = cands[i]
            arg[k, j] = i + k - 1
    out = []
    for k in range(1, kmax + 1):
        bounds, j = [], n
        for kk in range(k, 0, -1):
            i = int(arg[kk, j])
            bounds.append((i, j))
            j = i
        out.append((bounds[::-1], float(best[k, n])))
    return out


def segment(footprints: Sequence[int], latencies, min_ratio: float = 1.12, max_segments: int = 16,
            penalty: float | None = None, noise_floor: float = 0.01) -> Segmentation:
    """Plateaus of latency against footprint (see the module docstring).

    min_ratio: neighbouring plateaus closer than this factor are one plateau.
    penalty: cost (in squared log units) of each extra segment; default
    max(3 * noise^2 * ln n, (ln(min_ratio) / 4)^2), the noise being estimated from the data
    with a floor of `noise_floor` (a 1% scatter), so noise-free data still gets a penalty.
    """
    fp = np.asarray(footprints, dtype=np.int64)
    med = per_footprint_medians(latencies)
    if fp.size != med.size:
        raise ValueError(f"{fp.size} footprints but {med.size} latencies")
    if fp.size == 0:
        return Segmentation()
    if np.any(np.diff(fp) <= 0):
        raise ValueError("footprints must be strictly ascending")
    if not np.all(np.isfinite(med)) or np.any(med <= 0):
        raise ValueError("latencies must be positive and finite (one median per footprint)")
    y = np.log(med)
    noise = max(robust_noise(y), noise_floor)
    if penalty is None:
        penalty = max(3.0 * noise**2 * np.log(max(y.size, 2)), (np.log(min_ratio) / 4.0) ** 2)
    parts = optimal_partition(y, max_segments)
    # penalised cost: each segment costs `penalty` (a later k may pay off after an unhelpful one)
    chosen, _ = min(parts, key=lambda part: part[1] + penalty * len(part[0]))
    return _finish(fp, med, chosen, min_ratio, noise)


def _is_ramp(y, s: Segment, limit: float) -> bool:
    """A segment whose log latency climbs across itself (mean of its last third minus its
    first third) by more than `limit` is part of a ramp, not a plateau."""
    seg = y[s.start:s.stop]
    k = max(1, seg.size // 3)
    return abs(float(np.mean(seg[-k:]) - np.mean(seg[:k]))) > limit


def _finish(fp, med, bounds, min_ratio, noise) -> Segmentation:
    def make(i, j):
        return Segment(i, j, float(np.median(med[i:j])), int(fp[i]), int(fp[j - 1]))

    # 1. neighbours whose levels are within min_ratio (or that go down) are one segment
    segs: list[Segment] = []
    for i, j in bounds:
        s = make(i, j)
        if segs and s.level / segs[-1].level < min_ratio:
            s = make(segs.pop().start, j)
        segs.append(s)
    # 2. inner segments that are short (under 3/4 of an octave at the sweep's density of
    # footprints: a step straddling a capacity, or a one-off spike), or that lie between their
    # neighbours' levels and, under 2 octaves, climb across themselves by more than the noise
    # allows (a ramp), are transitions, not plateaus
    octaves = np.log2(fp[-1] / fp[0]) if fp.size > 1 else 0.0
    density = (fp.size - 1) / octaves if octaves > 0 else np.inf
    y = np.log(med)
    plateaus, transitions = [], []
    for k, s in enumerate(segs):
        inner = 0 < k < len(segs) - 1
        lo, hi = (sorted((segs[k - 1].level, segs[k + 1].level)) if inner else (0.0, 0.0))
        between = inner and lo < s.level < hi
        span = s.n_points / density  # octaves
        short = span < 0.75
        ramp = between and span < 2.0 and _is_ramp(y, s, max(4.0 * noise, np.log(min_ratio) / 2.0))
        (transitions if (inner and short) or ramp else plateaus).append(s)
    # 3. plateaus that met across removed transitions merge again under the same rule
    merged: list[Segment] = []
    for s in plateaus:
        if merged and s.level / merged[-1].level < min_ratio:
            prev = merged.pop()
            transitions = [t for t in transitions if not prev.stop <= t.start < s.start]
            s = make(prev.start, s.stop)
        merged.append(s)
    return Segmentation(merged, transitions, noise)


def name_tiers(segments: list[Segment], first: str = "l1", l2_bytes: int | None = None) -> list[Segment]:
    """Name plateaus in footprint order, starting at tier `first` (l2_near for an L1-bypassing chase).

    With `l2_bytes`, plateaus that start beyond the L2 are named from `hbm` on and the rest
    from `first` up to `l2_far`; without it, by order, dropping `l2_far` then `l2_near` when
    there are fewer plateaus than names. Plateaus beyond the names get `<last>_<n>`: a second
    plateau beyond the L2 is `hbm_2`, never `tlb_miss` from the ladder alone (BEYOND_HBM_LABEL).
    """
    names = [n for n in TIER_NAMES[TIER_NAMES.index(first):] if n != "tlb_miss"]
    if l2_bytes is not None:
        inside = [s for s in segments if s.footprint_lo <= l2_bytes]
        outside = [s for s in segments if s.footprint_lo > l2_bytes]
        pools = [([n for n in names if n in ("l1", "l2_near", "l2_far")], inside),
                 (["hbm"], outside)]
    else:
        pool = list(names)
        for drop in ("l2_far", "l2_near"):
            if len(pool) > len(segments) and drop in pool:
                pool.remove(drop)
        pools = [(pool, segments)]
    for pool, segs in pools:
        for k, s in enumerate(segs):
            if k < len(pool):
                s.name = pool[k]
            else:
                base = pool[-1] if pool else "tier"
                s.name = f"{base}_{k - len(pool) + 2}"
            s.label = TIER_LABELS.get(s.name, s.name.replace("_", " "))
            if s.name.startswith("hbm_"):
                s.label = BEYOND_HBM_LABEL.format(n=s.name.split("_")[-1])
    return segments


def detect_tiers(footprints: Sequence[int], latencies, first: str = "l1", l2_bytes: int | None = None,
                 min_ratio: float = 1.12, **kwargs) -> list[Segment]:
    """Named tiers (L1, L2 near, L2 far, HBM, HBM plateaus beyond it) of a latency ladder.

    `latencies`: per-footprint medians, or per-footprint sample arrays. Returns segments with
    `name`, `label`, `start`/`stop` (row indices, stop exclusive), footprint range and level.
    """
    seg = segment(footprints, latencies, min_ratio=min_ratio, **kwargs)
    return name_tiers(seg.segments, first=first, l2_bytes=l2_bytes)


def detect_steps(footprints: Sequence[int], latencies, min_ratio: float = 1.05, **kwargs) -> list[Step]:
    """Footprints where latency steps up (TLB reach) and each step's size, from the plateaus."""
    seg = segment(footprints, latencies, min_ratio=min_ratio, **kwargs)
    fp = np.asarray(footprints, dtype=np.int64)
    steps = []
    for lo, hi in zip(seg.segments, seg.segments[1:]):
        if hi.level > lo.level:
            steps.append(Step(hi.start, int(fp[lo.stop - 1]), int(fp[hi.start]), lo.level, hi.level))
    return steps
