"""What one run directory measured: the numbers behind the report and the calibration file.

`analyze_run(path_or_run)` reads the probe and sampler tables (columns as documented in
docs/run-directory.md) and computes, with exact quantiles over every sample:

* latency ladder: per footprint P50/P90/P99/P99.9, tiers from `reports/tiers.py` (change-point
  detection), per tier quantiles, a histogram and a downsampled CDF;
* TLB sweep: per stride and footprint, and the latency steps;
* bandwidth against intensity, with the device-to-device memcpy in the same run;
* loaded latency: per load level and access kind quantiles against the achieved bandwidth
  fraction, with the fitted queueing curve (`reports/queueing.py`), over the valid chases only
  (invalid ones and the levels they leave incomplete are counted in `notes`); replacement delay
  per level (a missed re-touch's latency minus the same-load hot-set hit latency) as a
  distribution, the share of re-touches evicted, and the L2 residency curve and time
  (`reports/replacement.py`, docs/replacement-delay.md);
* sampler timelines (downsampled) with the probe phases, and the SM clock drift.

Parts that a run lacks are listed in `RunAnalysis.missing` rather than failing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .distributions import QUANTILES, cdf_points, downsample_series, histogram, quantile_label, summarize
from .tiers import detect_steps, detect_tiers

__all__ = [
    "CDF_POINTS",
    "COLUMNS",
    "HIST_BINS",
    "LADDER_PAGE_BYTES",
    "OPTIONAL_PARTS",
    "PARTS",
    "PROBE_TABLES",
    "QLABELS",
    "SAMPLER_SKIP",
    "Distribution",
    "RunAnalysis",
    "Tier",
    "analyze_run",
    "clocks_locked",
    "column",
    "ladder_tiers",
    "name_tiers_by_tlb",
    "sampler_times_ns",
    "sorted_groups",
]

QLABELS = [quantile_label(q) for q in QUANTILES]
#: Probe tables the report and calibration read (docs/run-directory.md), by role.
PROBE_TABLES = {"latency": "latency", "latency_cg": "latency_cg", "tlb": "tlb", "bandwidth": "bandwidth",
                "loaded": "loaded"}
#: Parts a run may lack without being incomplete (the L1-bypassing ladder is optional).
OPTIONAL_PARTS = ("latency_cg",)
#: Column names, first match wins (the documented name first).
COLUMNS = {
    "footprint": ("footprint_bytes",),
    "stride": ("stride_bytes",),
    "latency": ("latency_cycles",),
    "kernel": ("kernel",),
    "intensity": ("blocks", "active_sms", "intensity"),
    "throttle": ("throttle_ns",),
    "achieved_gbs": ("achieved_gbs",),
    "level": ("level",),
    "fraction": ("bandwidth_fraction",),
    "access": ("access",),
    "time": ("t_s", "time_s"),
}
CDF_POINTS = 300
HIST_BINS = 120


def column(frame, role: str, required: bool = True):
    """The column of `frame` playing `role` (see COLUMNS), or None when optional and absent."""
    for name in COLUMNS[role]:
        if name in frame.columns:
            return name
    if required:
        raise KeyError(f"no {role} column (expected one of {', '.join(COLUMNS[role])}; "
                       f"have {', '.join(map(str, frame.columns))})")
    return None


@dataclass
class Distribution:
    """Exact statistics of one sample set plus what a plot needs (downsampled)."""

    summary: dict
    cdf_x: np.ndarray
    cdf_p: np.ndarray
    hist_edges: np.ndarray
    hist_counts: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray, presorted: bool = False) -> Distribution:
        srt = values if presorted else np.sort(values)
        summary = summarize(srt).to_dict()
        xs, ps = cdf_points(srt, CDF_POINTS, sorted_values=srt)
        # Log-spaced bins: equal relative resolution for a peak and its long tail.
        edges, counts = histogram(srt, bins=HIST_BINS, log=summary["count"] > 0 and summary["min"] > 0,
                                  presorted=True)
        return cls(summary, xs, ps, edges, counts)


@dataclass
class Tier:
    name: str
    label: str
    footprint_lo: int
    footprint_hi: int
    dist: Distribution
    #: median of the tier's samples in ns, each converted at its own chase's clock (latency_ns)
    p50_ns: float = float("nan")


@dataclass
class RunAnalysis:
    name: str
    path: str
    meta: dict
    complete: bool
    status: str
    synthetic: bool
    sm_mhz: float | None
    ladder: Any = None              # DataFrame: footprint_bytes, count, mean, p50.. p99.9
    tiers: list[Tier] = field(default_factory=list)
    ladder_cg: Any = None           # the same for the L1-bypassing chase (probes/latency_cg), when recorded
    tiers_cg: list[Tier] = field(default_factory=list)
    tlb: Any = None                 # DataFrame: stride_bytes, footprint_bytes, count, p50..
    tlb_steps: list[dict] = field(default_factory=list)
    tlb_miss: tuple[str, Distribution] | None = None  # (where from, distribution) of the first TLB step
    bandwidth: Any = None           # DataFrame as recorded, plus fraction_of_memcpy
    loaded: Any = None              # DataFrame: level, access, bandwidth_fraction, count, p50.., evicted_fraction
    loaded_fits: dict = field(default_factory=dict)   # (access, quantile) -> QueueingFit
    loaded_dists: dict = field(default_factory=dict)  # (access, level) -> Distribution
    replacement: dict = field(default_factory=dict)   # level -> Distribution of a missed re-touch's extra cycles
    replacement_baseline: tuple[str, float] | None = None  # (what, first level's same-load hit median)
    replacement_levels: Any = None  # DataFrame per level: hit_p50, miss_p50, cut, misses, delay_p50.., residency_ns
    residency: dict = field(default_factory=dict)     # level -> DataFrame: interval_ns, age_ns, samples, resident_
    #                                                    fraction (the L2 residency curve)
    loaded_invalid: list[dict] = field(default_factory=list)  # invalid chases: level, access, reason
    loaded_excluded_levels: list[int] = field(default_factory=list)
    samplers: dict = field(default_factory=dict)      # name -> {"t": array, "series": {col: array}}
    phases: list[dict] = field(default_factory=list)
    phases_aligned: bool = False    # phase times anchored to the samplers' clock (else: at the first sample)
    clock: dict = field(default_factory=dict)         # SM clock drift figures
    missing: dict = field(default_factory=dict)       # part -> why it is absent
    notes: list[str] = field(default_factory=list)

    @property
    def host(self) -> str:
        return str(self.meta.get("host") or self.name)

    @property
    def device(self) -> dict:
        dev = self.meta.get("device")
        return dev if isinstance(dev, dict) else {}

    def tier(self, name: str) -> Tier | None:
        return next((t for t in self.tiers if t.name == name), None)

    def to_ns(self, cycles: float) -> float:
        return float("nan") if not self.sm_mhz else cycles * 1e3 / self.sm_mhz

    def load_fractions(self, access: str = "retouch") -> dict:
        """{load level: achieved bandwidth fraction} of one loaded-latency access ({} without the probe)."""
        if self.loaded is None:
            return {}
        sub = self.loaded[self.loaded["access"] == access]
        return dict(zip(sub["level"], sub["bandwidth_fraction"]))


# -- grouping -------------------------------------------------------------------------------
def sorted_groups(keys: np.ndarray, values: np.ndarray) -> list[tuple[Any, np.ndarray]]:
    """[(key, sorted values of that key)] in key order, NaN dropped.

    Probe tables are written one parameter value after another, so keys usually come in
    contiguous runs; then each run is sorted on its own (no global argsort of the table).
    """
    keys = np.asarray(keys)
    values = np.asarray(values)
    if keys.size == 0:
        return []
    change = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [keys.size]])
    run_keys = keys[starts]
    if np.unique(run_keys).size != run_keys.size:  # interleaved: fall back to one argsort
        order = np.argsort(keys, kind="stable")
        return sorted_groups(keys[order], values[order])
    out = []
    for k in np.argsort(run_keys, kind="stable"):
        seg = values[starts[k]:ends[k]]
        if seg.dtype.kind == "f":
            seg = seg[np.isfinite(seg)]
        out.append((run_keys[k].item() if hasattr(run_keys[k], "item") else run_keys[k], np.sort(seg)))
    return out


def _quantile_row(srt: np.ndarray) -> dict:
    if srt.size == 0:
        return {"count": 0, "mean": float("nan"), **{q: float("nan") for q in QLABELS}}
    qs = np.quantile(srt, QUANTILES)
    return {"count": int(srt.size), "mean": float(srt.mean(dtype=np.float64)),
            **{label: float(v) for label, v in zip(QLABELS, qs)}}


def _plausible(value: Any, low: float, high: float) -> bool:
    """A number from meta.json that is usable: finite and in [low, high] (a damaged or hand-edited
    file may hold strings, NaN or integers beyond 64 bits, which numpy cannot take)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return (isinstance(value, int) or math.isfinite(value)) and low <= value <= high


# -- parts ----------------------------------------------------------------------------------
def _read(run, name: str, kind: str = "probe"):
    """The table, None when the run has none of that name; a damaged file raises DamagedTableError."""
    if name not in run.tables(kind):
        return None
    return run.read_table(name, kind)


#: Name endings of the columns that hold numbers in every table sitsprof writes (docs/run-directory.md).
_NUMERIC_SUFFIXES = ("_ns", "_cycles", "_bytes", "_mhz", "_gbs", "_s", "_w", "_c", "_pct", "_fraction", "_sms",
                     "_blocks", "_sm")
_NUMERIC_ROLES = ("footprint", "stride", "latency", "intensity", "throttle", "achieved_gbs", "level", "fraction",
                  "time")


def _meant_numeric(frame, name: str) -> bool:
    known = {c for role in _NUMERIC_ROLES for c in COLUMNS[role]}
    return name in known or str(name).endswith(_NUMERIC_SUFFIXES)


def _as_numbers(res: RunAnalysis, frame, where: str, required=()):
    """`frame` with every column meant to hold numbers (by name, or because most of its values
    are numbers) as numbers: text in it (a damaged or hand-edited table: `latency_cycles` "abc")
    becomes NaN, counted in the notes, instead of a TypeError deep in the analysis. Rows with
    no number in a `required` column are left out."""
    import pandas as pd

    converted = {}
    damaged = np.zeros(len(frame), dtype=bool)
    for name in frame.columns:
        if frame[name].dtype.kind in "fiub":
            continue
        values = pd.to_numeric(frame[name], errors="coerce")
        text = (values.isna() & frame[name].notna()).to_numpy()
        bad = int(text.sum())
        if not _meant_numeric(frame, name) and bad * 2 > len(frame):
            continue  # a text column (variant, kernel, access, ...)
        converted[name] = values.astype(np.float64)
        damaged |= text
        if bad:
            res.notes.append(f"{where}: {bad} of {len(frame)} values of {name} are not numbers; their rows "
                             "are left out")
    if converted:
        frame = frame.assign(**converted)[~damaged]  # a row with text for a number is damaged whole
    keys = [c for c in required if c in frame.columns]
    if keys:
        missing = frame[keys].isna().any(axis=1).to_numpy()
        if missing.any():
            frame = frame[~missing]
    return frame


#: Roles whose columns every row needs as a number (a group key or the measurement itself).
_KEY_ROLES = ("footprint", "stride", "latency", "level", "fraction")
#: Roles whose text columns are group keys every row needs (issue 22: a NaN `access` column ended
#: in an IndexError, a NaN among valid ones was counted under another access).
_TEXT_KEY_ROLES = ("access", "kernel")
#: Roles whose numbers are positive by nature (issue 22: latency_cycles 0 or -5 ended in ValueError).
_POSITIVE_ROLES = ("footprint", "stride", "latency")
_WILD = 1e30  # beyond anything a probe measures (cycles, ns, bytes, GB/s); squares still fit a float


def _numbers_only(res: RunAnalysis, frame, table: str):
    """`frame` with +-inf and values beyond 1e30 as NaN, and the rows without a number in a key
    column (`_KEY_ROLES`) or a value in a text key (`_TEXT_KEY_ROLES`) left out and counted in
    the notes: a damaged or hand-edited table must not end in an OverflowError, an IndexError or
    a NumPy warning."""
    frame = frame.copy()
    for name in (column(frame, role, required=False) for role in _POSITIVE_ROLES):
        if name is not None and frame[name].dtype.kind in "iuf":
            values = frame[name].to_numpy(dtype=np.float64)
            ok = (values > 0) & (values < 2**53)  # 0 or less, or past exact integers: never measured
            if not ok[~np.isnan(values)].all():
                frame[name] = np.where(ok, values, np.nan)
    floats = [c for c in frame.columns if frame[c].dtype.kind == "f"]
    for name in floats:
        values = frame[name].to_numpy(dtype=np.float64)
        wild = np.isinf(values) | (np.abs(values) > _WILD)
        if wild.any():
            frame[name] = np.where(wild, np.nan, values)
    keys = [c for c in (column(frame, role, required=False) for role in _KEY_ROLES) if c in floats]
    if keys:
        missing = frame[keys].isna().any(axis=1).to_numpy()
        if missing.any():
            res.notes.append(f"probes/{table}.parquet: {int(missing.sum())} of {len(frame)} rows have no number in "
                             f"{', '.join(keys)} (NaN or infinite) and are left out")
            frame = frame[~missing]
    # Last, after the wild numbers became NaN: a group key with no value (a NaN `access`, or 1e100
    # in a damaged one) has no group; factorize codes it -1.
    texts = [c for c in (column(frame, role, required=False) for role in _TEXT_KEY_ROLES) if c is not None]
    missing = frame[texts].isna().any(axis=1).to_numpy() if texts else None
    if missing is not None and missing.any():
        res.notes.append(f"probes/{table}.parquet: {int(missing.sum())} of {len(frame)} rows have no "
                         f"{', '.join(texts)} and are left out")
        frame = frame[~missing]
    return frame


def ladder_tiers(res: RunAnalysis, frame, first: str = "l1"):
    """(per-footprint quantile table, tiers) of one latency ladder table."""
    import pandas as pd

    fp_col, lat_col = column(frame, "footprint"), column(frame, "latency")
    groups = sorted_groups(frame[fp_col].to_numpy(), frame[lat_col].to_numpy())
    table = pd.DataFrame([{"footprint_bytes": int(k), **_quantile_row(v)} for k, v in groups])
    l2 = res.device.get("l2_bytes")
    segments = detect_tiers(table["footprint_bytes"].to_numpy(), table["p50"].to_numpy(), first=first,
                            l2_bytes=int(l2) if _plausible(l2, 1, 2**50) else None)
    tiers = []
    for seg in segments:
        parts = [groups[i][1] for i in range(seg.start, seg.stop)]
        # Merging sorted runs: the stable sort (timsort/radix) is near linear here.
        values = np.sort(np.concatenate(parts), kind="stable") if parts else np.array([], dtype=np.float32)
        tier = Tier(seg.name, seg.label, seg.footprint_lo, seg.footprint_hi, Distribution.of(values, presorted=True))
        if "latency_ns" in frame.columns:
            fps = frame[fp_col].to_numpy()
            ns = frame["latency_ns"].to_numpy()[(fps >= seg.footprint_lo) & (fps <= seg.footprint_hi)]
            ns = ns[np.isfinite(ns)]
            tier.p50_ns = float(np.median(ns)) if ns.size else float("nan")
        tiers.append(tier)
    return table, tiers


def _ladder(res: RunAnalysis, frame) -> None:
    res.ladder, res.tiers = ladder_tiers(res, frame, first="l1")


def _ladder_cg(res: RunAnalysis, frame) -> None:
    """The L1-bypassing ladder (ld.global.cg): its own tiers from L2 near; primary when `latency` is absent."""
    res.ladder_cg, res.tiers_cg = ladder_tiers(res, frame, first="l2_near")
    if res.ladder is None:
        res.ladder, res.tiers = res.ladder_cg, res.tiers_cg


def _tlb(res: RunAnalysis, frame) -> None:
    import pandas as pd

    stride_col, fp_col, lat_col = column(frame, "stride"), column(frame, "footprint"), column(frame, "latency")
    rows = []
    for stride, sub in frame.groupby(stride_col, sort=True):
        groups = sorted_groups(sub[fp_col].to_numpy(), sub[lat_col].to_numpy())
        per_fp = [{"stride_bytes": int(stride), "footprint_bytes": int(fp), **_quantile_row(srt)} for fp, srt in groups]
        rows.extend(per_fp)
        steps = detect_steps(np.array([r["footprint_bytes"] for r in per_fp], dtype=np.int64),
                             np.array([r["p50"] for r in per_fp], dtype=np.float64))
        for k, step in enumerate(steps):
            res.tlb_steps.append({"stride_bytes": int(stride), **step.to_dict(),
                                  "reach_pages": step.reach_bytes // int(stride)})
            if k == 0 and res.tlb_miss is None:
                # The plateau after the first step (the sweep's few links stay in L2, so the step is
                # address translation), at the smallest stride showing one.
                end = steps[1].reach_bytes if len(steps) > 1 else None
                parts = [v for fp, v in groups if fp >= step.step_at_bytes and (end is None or fp <= end)]
                res.tlb_miss = (f"TLB sweep, stride {int(stride)} bytes, footprints from {step.step_at_bytes} bytes "
                                "(after the first latency step: an L2-resident line reached through a TLB miss)",
                                Distribution.of(np.sort(np.concatenate(parts), kind="stable"), presorted=True))
    res.tlb = pd.DataFrame(rows)


#: The page the ladder's 128 B links fall on (CUDA's large allocations are mapped in 2 MiB pages):
#: a ladder footprint F touches F / LADDER_PAGE_BYTES pages.
LADDER_PAGE_BYTES = 2 << 20


def name_tiers_by_tlb(res: RunAnalysis, within: float = 2.0) -> None:
    """Name a ladder plateau beyond HBM (`hbm_<n>`) `tlb_miss` only where the TLB sweep shows a
    step at that page count: the ladder's plateau starts at footprint / LADDER_PAGE_BYTES pages,
    a sweep's step at step_at_bytes / stride pages (one link per stride), and they must agree
    within a factor `within`. Without such a step the plateau keeps its `hbm_<n>` name and a note
    says why: a second plateau alone does not show what causes it."""
    from .tiers import TIER_LABELS

    for tiers in (res.tiers, res.tiers_cg):
        named = False
        for tier in tiers:
            if not tier.name.startswith("hbm_"):
                continue
            pages = tier.footprint_lo / LADDER_PAGE_BYTES
            steps = [s for s in res.tlb_steps
                     if pages / within <= s["step_at_bytes"] / s["stride_bytes"] <= pages * within]
            if steps and not named:
                step = min(steps, key=lambda s: s["stride_bytes"])
                tier.name, named = "tlb_miss", True
                tier.label = (f"{TIER_LABELS['tlb_miss']} (TLB sweep step at "
                              f"{step['step_at_bytes'] // step['stride_bytes']} pages, stride {step['stride_bytes']})")
            elif not any(n.startswith(f"ladder plateau {tier.name}") for n in res.notes):
                res.notes.append(f"ladder plateau {tier.name} from {tier.footprint_lo} bytes "
                                 f"({pages:.0f} pages of {LADDER_PAGE_BYTES >> 20} MiB): "
                                 + (f"no TLB sweep step within a factor {within:g} of that page count"
                                    if res.tlb_steps or res.tlb is not None else "no TLB sweep in the run")
                                 + ", so it is not called a TLB miss")


def _bandwidth(res: RunAnalysis, frame) -> None:
    """One row per (kernel, intensity, throttle): median and best GB/s over the repetitions."""
    kcol, gcol = column(frame, "kernel"), column(frame, "achieved_gbs")
    keys = [kcol] + [c for c in (column(frame, "intensity", required=False), column(frame, "throttle", required=False))
                     if c]
    agg = (frame.groupby(keys, sort=True)[gcol].agg(["median", "max", "count"])
           .rename(columns={"median": "achieved_gbs", "max": "best_gbs", "count": "reps"}).reset_index())
    agg = agg.rename(columns={kcol: "kernel"})
    if "throttle_ns" not in agg.columns:
        agg["throttle_ns"] = 0
    memcpy = agg.loc[agg["kernel"] == "memcpy", "best_gbs"]
    ref = float(memcpy.max()) if len(memcpy) else float("nan")
    agg["fraction_of_memcpy"] = agg["best_gbs"] / ref if np.isfinite(ref) else np.nan
    res.bandwidth = agg


def _valid_loaded(res: RunAnalysis, frame):
    """The rows of valid chases (raw `valid` column: the probe's window inside the saturator's,
    on the baseline's SM), with the invalid chases listed and the levels left without a valid
    chase of some access excluded whole; both counted in the notes."""
    if "valid" not in frame.columns:
        return frame
    lcol, acol = column(frame, "level"), column(frame, "access")
    keys = [lcol, acol] + (["attempt"] if "attempt" in frame.columns else [])
    ok = frame["valid"].to_numpy(dtype=bool)
    chases = frame.groupby(keys, sort=True).agg(valid=("valid", "first"),
                                                reason=("invalid_reason", "first") if "invalid_reason" in frame
                                                else ("valid", "first")).reset_index()
    bad = chases[~chases["valid"].astype(bool)]
    res.loaded_invalid = [{"level": int(r[lcol]), "access": str(r[acol]), "reason": str(r["reason"])}
                          for _, r in bad.iterrows()]
    have = {(int(lv), str(a)) for lv, a in zip(frame.loc[ok, lcol], frame.loc[ok, acol])}
    wanted = {(int(lv), str(a)) for lv, a in zip(chases[lcol], chases[acol])}
    dropped = sorted({lv for lv, a in wanted - have})
    res.loaded_excluded_levels = dropped
    if len(bad):
        res.notes.append(f"loaded latency: {len(bad)} of {len(chases)} chases invalid (window not inside the "
                         f"saturator's, or off the baseline's SM) and excluded; "
                         + "; ".join(sorted({i['reason'] for i in res.loaded_invalid})))
    if dropped:
        res.notes.append(f"loaded latency: {len(dropped)} level(s) excluded for want of a valid chase: "
                         + ", ".join(map(str, dropped)))
    keep = ok & ~frame[lcol].isin(dropped).to_numpy()
    return frame[keep]


def _loaded(res: RunAnalysis, frame) -> None:
    import pandas as pd

    from .queueing import fit_queueing

    lcol, fcol, acol = column(frame, "level"), column(frame, "fraction"), column(frame, "access")
    latcol = column(frame, "latency")
    gbs = column(frame, "achieved_gbs", required=False)
    frame = _valid_loaded(res, frame)
    means = frame.groupby([acol, lcol], sort=True)[[fcol] + ([gbs] if gbs else [])].mean()
    codes, names = pd.factorize(frame[acol], sort=True)
    key = codes.astype(np.int64) * (1 << 32) + frame[lcol].to_numpy().astype(np.int64)
    rows = []
    for k, values in sorted_groups(key, frame[latcol].to_numpy()):
        access, level = str(names[k >> 32]), int(k & 0xFFFFFFFF)
        dist = res.loaded_dists[(access, level)] = Distribution.of(values, presorted=True)
        mean = means.loc[(names[k >> 32], level)]
        # The row's count, mean and quantiles are the distribution's own (one pass over the samples).
        rows.append({"access": access, "level": level, "bandwidth_fraction": float(mean[fcol]),
                     **{key: dist.summary[key] for key in ("count", "mean", *QLABELS)}})
        if gbs:
            rows[-1]["achieved_gbs"] = float(mean[gbs])
    res.loaded = pd.DataFrame(rows)
    for access, sub in res.loaded.groupby("access"):
        for q in ("p50", "p99"):
            try:
                res.loaded_fits[(access, q)] = fit_queueing(sub["bandwidth_fraction"], sub[q])
            except ValueError as exc:
                res.notes.append(f"loaded latency {access} {q}: no queueing fit ({exc})")
    _replacement(res, frame)


def _replacement(res: RunAnalysis, frame) -> None:
    """Replacement delay and residency per level (reports/replacement.py, docs/replacement-delay.md)."""
    import pandas as pd

    from .replacement import MIN_SEPARATION, has_method_columns, replacement_levels

    res.loaded["evicted_fraction"] = np.nan
    if not has_method_columns(frame):
        if (frame[column(frame, "access")] == "retouch").any():
            res.notes.append("loaded latency: this run has no hot set or re-touch intervals (recorded before the "
                             "method of docs/replacement-delay.md): no replacement delay or residency")
        return
    levels = replacement_levels(frame, column(frame, "level"), column(frame, "latency"), column(frame, "fraction"))
    rows = []
    for lv in levels:
        if lv.delays.size:
            res.replacement[lv.level] = Distribution.of(lv.delays, presorted=True)
        res.residency[lv.level] = pd.DataFrame(lv.curve)
        rows.append(lv.row())
        if lv.separation < MIN_SEPARATION:
            res.notes.append(f"loaded latency level {lv.level}: hits and misses overlap (separation "
                             f"{lv.separation:.2f}); its re-touch classification is unreliable")
    if not rows:
        return
    res.replacement_levels = pd.DataFrame(rows)
    first = res.replacement_levels.iloc[0]
    res.replacement_baseline = ("median hot-set hit latency under the same load, per level "
                                f"(docs/replacement-delay.md); level {int(first['level'])}", float(first["hit_p50"]))
    evicted = dict(zip(res.replacement_levels["level"], res.replacement_levels["evicted_fraction"]))
    is_rt = res.loaded["access"] == "retouch"
    res.loaded.loc[is_rt, "evicted_fraction"] = res.loaded.loc[is_rt, "level"].map(evicted).to_numpy(dtype=float)


#: Sampler columns that are bookkeeping, not measurements (docs/run-directory.md).
SAMPLER_SKIP = {"t_ns", "tick", "read_ns", "gpu_start_ns", "gpu_end_ns", "clock_event_reasons", "t_s", "time_s"}
_TIME_COLUMNS = ("t_ns", "gpu_start_ns", *COLUMNS["time"])


def sampler_times_ns(frame, meta: dict) -> np.ndarray | None:
    """Monotonic ns of each sampler row: `t_ns`, or CUPTI's GPU `gpu_start_ns` minus the measured
    globaltimer offset (clock_sync.globaltimer.offset_ns); None when neither is usable."""
    if "t_ns" in frame.columns:
        t = frame["t_ns"].to_numpy()
        return t.astype(np.int64) if t.dtype.kind != "f" or np.isfinite(t).all() else None
    if "gpu_start_ns" in frame.columns:
        sync = (meta.get("clock_sync") or {}).get("globaltimer") or {}
        if sync.get("available") and _plausible(sync.get("offset_ns"), -(2**62), 2**62):
            return frame["gpu_start_ns"].to_numpy(dtype=np.int64) - int(sync["offset_ns"])
    for name in COLUMNS["time"]:
        if name in frame.columns:  # already seconds since the start (older or synthetic runs)
            return (frame[name].to_numpy(dtype=np.float64) * 1e9).astype(np.int64)
    return None


def _plausible_times(res: RunAnalysis, frame, where: str):
    """`frame` without the rows whose time is past +-2^62 ns (146 years) or not finite: cast to
    int64 such a time became INT64_MIN (NumPy warns "invalid value encountered in cast") and
    differences of times wrapped, so a damaged `t_ns` of 1e19 put its rows at a random place."""
    bad = np.zeros(len(frame), dtype=bool)
    for name in _TIME_COLUMNS:
        if name in frame.columns and frame[name].dtype.kind in "fiu":
            limit = 2**62 if name.endswith("_ns") else 2**62 / 1e9
            values = frame[name].to_numpy(dtype=np.float64)
            bad |= ~(np.abs(values) < limit)  # NaN too
    if bad.any():
        res.notes.append(f"{where}: {int(bad.sum())} of {len(frame)} rows have a time past 146 years or none; "
                         "they are left out")
        frame = frame[~bad]
    return frame


def _samplers(res: RunAnalysis, run) -> None:
    frames = {}
    from sitsprof.collectors.errors import DamagedTableError

    for name in run.tables("sampler"):
        try:
            frame = run.read_table(name, "sampler")
        except DamagedTableError as exc:  # the rest of the run is still worth reading
            res.notes.append(f"sampler {name}: not plotted: {exc}")
            continue
        frame = _as_numbers(res, frame, f"samplers/{name}.parquet", required=_TIME_COLUMNS)
        frame = _plausible_times(res, frame, f"samplers/{name}.parquet")
        t = sampler_times_ns(frame, res.meta) if len(frame) else None
        if t is None:
            res.notes.append(f"sampler {name}: no usable time column, not plotted")
            continue
        frames[name] = (frame, t)
    if not frames:
        return
    origin = res.meta.get("phases_origin_ns")
    if _plausible(origin, -(2**62), 2**62):
        res.phases_aligned = True
    else:
        origin = min(int(t.min()) for _, t in frames.values())
    for name, (frame, t) in frames.items():
        secs = (t - int(origin)) / 1e9
        order = np.argsort(secs, kind="stable")
        secs = secs[order]
        series = {}
        for col in frame.columns:
            if col in SAMPLER_SKIP or frame[col].dtype.kind not in "fiu":
                continue
            values = frame[col].to_numpy(dtype=np.float64)[order]
            if not np.isfinite(values).any():
                continue
            series[col] = downsample_series(secs, values, 1500)
        res.samplers[name] = series
        if "sm_clock_mhz" in frame.columns and not res.clock:
            sm = frame["sm_clock_mhz"].to_numpy(dtype=np.float64)
            sm = sm[np.isfinite(sm)]
            if sm.size:
                ref = res.sm_mhz or float(np.median(sm))
                res.clock = {"sampler": name, "samples": int(sm.size), "min_mhz": float(sm.min()),
                             "max_mhz": float(sm.max()), "mean_mhz": float(sm.mean()),
                             "reference_mhz": ref, "max_drift_pct": float(np.max(np.abs(sm - ref)) / ref * 100)}


def clocks_locked(meta: dict) -> bool | None:
    """Whether the run's clocks were locked: ClockSession `mode` "lock" with applied clocks; None if unrecorded."""
    clocks = meta.get("clocks")
    if not isinstance(clocks, dict):
        return None
    if isinstance(clocks.get("locked"), bool):
        return clocks["locked"]
    if "mode" in clocks:
        return clocks["mode"] == "lock" and bool(clocks.get("applied"))
    return None


def _sm_mhz(meta: dict) -> float | None:
    for path in (("sm_clock_mhz",), ("clocks", "applied", "sm_mhz"), ("clocks", "measured_sm_mhz"),
                 ("clocks", "requested", "sm_mhz")):
        node: Any = meta
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if _plausible(node, 1, 100_000):  # MHz
            return float(node)
    return None


def _usable_phases(phases) -> list[dict]:
    """meta.json's `phases` that a timeline can draw: objects with a finite `start_s` and `end_s`
    (a damaged or hand-edited file may hold anything there)."""
    if not isinstance(phases, list):
        return []
    return [{**ph, "name": str(ph.get("name", ""))} for ph in phases
            if isinstance(ph, dict) and _plausible(ph.get("start_s"), -1e12, 1e12)
            and _plausible(ph.get("end_s"), -1e12, 1e12)]


PARTS = {"latency": _ladder, "latency_cg": _ladder_cg, "tlb": _tlb, "bandwidth": _bandwidth, "loaded": _loaded}


def analyze_run(run_or_path) -> RunAnalysis:
    """Analyse one run directory (a path or an open `RunDirectory`)."""
    from sitsprof.collectors.errors import DamagedTableError
    from sitsprof.collectors.rundir import open_run

    run = open_run(run_or_path) if isinstance(run_or_path, (str, Path)) else run_or_path
    meta = dict(run.meta)
    res = RunAnalysis(name=run.path.name, path=str(run.path), meta=meta, complete=run.complete,
                      status=run.status, synthetic=bool(meta.get("synthetic")), sm_mhz=_sm_mhz(meta))
    phases = meta.get("phases")
    res.phases = _usable_phases(phases)
    # The L1-bypassing ladder first: it stands in for the default one when that is absent.
    for part, table in sorted(PROBE_TABLES.items(), key=lambda kv: kv[0] != "latency_cg"):
        try:
            frame = _read(run, table)
        except DamagedTableError as exc:  # reported as missing; the other parts are still read
            res.missing[part] = str(exc)
            continue
        if frame is not None:
            frame = _numbers_only(res, _as_numbers(res, frame, f"probes/{table}.parquet"), table)
        if frame is None or len(frame) == 0:
            # A `sitsprof record` run profiles the user's command: it has no probes by design.
            if part not in OPTIONAL_PARTS and meta.get("kind") != "record":
                res.missing[part] = (f"no probes/{table}.parquet in the run" if frame is None else
                                     f"probes/{table}.parquet has no usable row")
            continue
        try:
            PARTS[part](res, frame)
        except KeyError as exc:
            res.missing[part] = f"probes/{table}.parquet: {exc.args[0]}"
    if res.ladder is not None:
        res.missing.pop("latency", None)
    name_tiers_by_tlb(res)
    _samplers(res, run)
    if not res.samplers:
        res.missing["samplers"] = "no sampler tables with a time column"
    return res
