"""What one run directory measured: the numbers behind the report and the calibration file.

`analyze_run(path_or_run)` reads the probe and sampler tables (columns as documented in
docs/run-directory.md) and computes, with exact quantiles over every sample:

* latency ladder: per footprint P50/P90/P99/P99.9, tiers from `reports/tiers.py` (change-point
  detection), per tier quantiles, a histogram and a downsampled CDF;
* TLB sweep: per stride and footprint, and the latency steps;
* bandwidth against intensity, with the device-to-device memcpy in the same run;
* loaded latency: per load level and access kind quantiles against the achieved bandwidth
  fraction, with the fitted queueing curve (`reports/queueing.py`); replacement delay per
  level (re-touch latency minus the unloaded L2-hit latency) as a distribution;
* sampler timelines (downsampled) with the probe phases, and the SM clock drift.

Parts that a run lacks are listed in `RunAnalysis.missing` rather than failing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .tiers import detect_steps, detect_tiers
from .distributions import QUANTILES, cdf_points, downsample_series, histogram, quantile_label, summarize

QLABELS = [quantile_label(q) for q in QUANTILES]
#: Probe tables the report and calibration read (docs/run-directory.md), by role.
PROBE_TABLES = {"latency": "latency", "tlb": "tlb", "bandwidth": "bandwidth", "loaded": "loaded"}
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
    def of(cls, values: np.ndarray, presorted: bool = False) -> "Distribution":
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
    tlb: Any = None                 # DataFrame: stride_bytes, footprint_bytes, count, p50..
    tlb_steps: list[dict] = field(default_factory=list)
    tlb_miss: tuple[str, Distribution] | None = None  # (where from, distribution) of the first TLB step
    bandwidth: Any = None           # DataFrame as recorded, plus fraction_of_memcpy
    loaded: Any = None              # DataFrame: level, access, bandwidth_fraction, count, p50..
    loaded_fits: dict = field(default_factory=dict)   # (access, quantile) -> QueueingFit
    loaded_dists: dict = field(default_factory=dict)  # (access, level) -> Distribution
    replacement: dict = field(default_factory=dict)   # level -> Distribution of extra cycles
    replacement_baseline: tuple[str, float] | None = None
    samplers: dict = field(default_factory=dict)      # name -> {"t": array, "series": {col: array}}
    phases: list[dict] = field(default_factory=list)
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


# -- parts ----------------------------------------------------------------------------------
def _read(run, name: str, kind: str = "probe"):
    if name not in run.tables(kind):
        return None
    return run.read_table(name, kind)


def _ladder(res: RunAnalysis, frame) -> None:
    import pandas as pd

    fp_col, lat_col = column(frame, "footprint"), column(frame, "latency")
    groups = sorted_groups(frame[fp_col].to_numpy(), frame[lat_col].to_numpy())
    res.ladder = pd.DataFrame([{"footprint_bytes": int(k), **_quantile_row(v)} for k, v in groups])
    l2 = res.device.get("l2_bytes")
    segments = detect_tiers(res.ladder["footprint_bytes"].to_numpy(), res.ladder["p50"].to_numpy(),
                            l2_bytes=int(l2) if isinstance(l2, (int, float)) and l2 > 0 else None)
    for seg in segments:
        parts = [groups[i][1] for i in range(seg.start, seg.stop)]
        # Merging sorted runs: the stable sort (timsort/radix) is near linear here.
        values = np.sort(np.concatenate(parts), kind="stable") if parts else np.array([], dtype=np.float32)
        res.tiers.append(Tier(seg.name, seg.label, seg.footprint_lo, seg.footprint_hi,
                              Distribution.of(values, presorted=True)))


def _tlb(res: RunAnalysis, frame) -> None:
    import pandas as pd

    stride_col, fp_col, lat_col = column(frame, "stride"), column(frame, "footprint"), column(frame, "latency")
    rows = []
    samples = {}
    for stride, sub in frame.groupby(stride_col, sort=True):
        groups = sorted_groups(sub[fp_col].to_numpy(), sub[lat_col].to_numpy())
        samples[int(stride)] = groups
        for fp, srt in groups:
            rows.append({"stride_bytes": int(stride), "footprint_bytes": int(fp), **_quantile_row(srt)})
    res.tlb = pd.DataFrame(rows)
    for stride, sub in res.tlb.groupby("stride_bytes", sort=True):
        steps = detect_steps(sub["footprint_bytes"].to_numpy(), sub["p50"].to_numpy())
        for k, step in enumerate(steps):
            res.tlb_steps.append({"stride_bytes": int(stride), **step.to_dict()})
            if k == 0 and res.tlb_miss is None:
                # The plateau after the first step: HBM plus a TLB miss, at the smallest stride showing one.
                end = steps[1].reach_bytes if len(steps) > 1 else None
                parts = [v for fp, v in samples[int(stride)]
                         if fp >= step.step_at_bytes and (end is None or fp <= end)]
                res.tlb_miss = (f"TLB sweep, stride {int(stride)} bytes, footprints from {step.step_at_bytes} bytes "
                                "(first latency step: HBM plus a TLB miss)",
                                Distribution.of(np.sort(np.concatenate(parts), kind="stable"), presorted=True))


def _bandwidth(res: RunAnalysis, frame) -> None:
    frame = frame.copy()
    kcol, gcol = column(frame, "kernel"), column(frame, "achieved_gbs")
    memcpy = frame.loc[frame[kcol] == "memcpy", gcol]
    ref = float(memcpy.max()) if len(memcpy) else float("nan")
    frame["fraction_of_memcpy"] = frame[gcol] / ref if np.isfinite(ref) else np.nan
    res.bandwidth = frame


def _loaded(res: RunAnalysis, frame) -> None:
    import pandas as pd

    from .queueing import fit_queueing

    lcol, fcol, acol = column(frame, "level"), column(frame, "fraction"), column(frame, "access")
    latcol = column(frame, "latency")
    gbs = column(frame, "achieved_gbs", required=False)
    means = frame.groupby([acol, lcol], sort=True)[[fcol] + ([gbs] if gbs else [])].mean()
    codes, names = pd.factorize(frame[acol], sort=True)
    key = codes.astype(np.int64) * (1 << 32) + frame[lcol].to_numpy().astype(np.int64)
    rows = []
    retouch_sorted = {}
    for k, values in sorted_groups(key, frame[latcol].to_numpy()):
        access, level = str(names[k >> 32]), int(k & 0xFFFFFFFF)
        res.loaded_dists[(access, level)] = Distribution.of(values, presorted=True)
        mean = means.loc[(names[k >> 32], level)]
        rows.append({"access": access, "level": level, "bandwidth_fraction": float(mean[fcol]),
                     **_quantile_row(values)})
        if gbs:
            rows[-1]["achieved_gbs"] = float(mean[gbs])
        if access == "retouch":
            retouch_sorted[level] = values
    res.loaded = pd.DataFrame(rows)
    for access, sub in res.loaded.groupby("access"):
        for q in ("p50", "p99"):
            try:
                res.loaded_fits[(access, q)] = fit_queueing(sub["bandwidth_fraction"], sub[q])
            except ValueError as exc:
                res.notes.append(f"loaded latency {access} {q}: no queueing fit ({exc})")
    # Replacement delay: re-touch latency minus the unloaded L2-hit latency.
    l2 = res.tier("l2_near")
    if l2 is not None:
        res.replacement_baseline = ("L2-near P50 from the latency ladder", l2.dist.summary["p50"])
    else:
        retouch = res.loaded[res.loaded["access"] == "retouch"]
        if len(retouch):
            idle = retouch.sort_values("bandwidth_fraction").iloc[0]
            res.replacement_baseline = (f"re-touch P50 at the lowest load level ({idle['bandwidth_fraction']:.2f})",
                                        float(idle["p50"]))
    if res.replacement_baseline is not None:
        base = res.replacement_baseline[1]
        for level, values in retouch_sorted.items():
            res.replacement[level] = Distribution.of(values - base, presorted=True)


def _samplers(res: RunAnalysis, run) -> None:
    for name in run.tables("sampler"):
        frame = run.read_table(name, "sampler")
        tcol = column(frame, "time", required=False)
        if tcol is None or len(frame) == 0:
            res.notes.append(f"sampler {name}: no time column, not plotted")
            continue
        t = frame[tcol].to_numpy(dtype=np.float64)
        series = {}
        for col in frame.columns:
            if col == tcol or frame[col].dtype.kind not in "fiu":
                continue
            xs, ys = downsample_series(t, frame[col].to_numpy(dtype=np.float64), 1500)
            series[col] = (xs, ys)
        res.samplers[name] = series
        if "sm_clock_mhz" in frame.columns:
            sm = frame["sm_clock_mhz"].to_numpy(dtype=np.float64)
            sm = sm[np.isfinite(sm)]
            if sm.size:
                ref = res.sm_mhz or float(np.median(sm))
                res.clock = {"sampler": name, "samples": int(sm.size), "min_mhz": float(sm.min()),
                             "max_mhz": float(sm.max()), "mean_mhz": float(sm.mean()),
                             "reference_mhz": ref, "max_drift_pct": float(np.max(np.abs(sm - ref)) / ref * 100)}


def _sm_mhz(meta: dict) -> float | None:
    for path in (("sm_clock_mhz",), ("clocks", "applied", "sm_mhz"), ("clocks", "measured_sm_mhz"),
                 ("clocks", "requested", "sm_mhz")):
        node: Any = meta
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, (int, float)) and not isinstance(node, bool) and node > 0:
            return float(node)
    return None


PARTS = {"latency": _ladder, "tlb": _tlb, "bandwidth": _bandwidth, "loaded": _loaded}


def analyze_run(run_or_path) -> RunAnalysis:
    """Analyse one run directory (a path or an open `RunDirectory`)."""
    from sitsprof.collectors.rundir import open_run

    run = open_run(run_or_path) if isinstance(run_or_path, (str, Path)) else run_or_path
    meta = dict(run.meta)
    res = RunAnalysis(name=run.path.name, path=str(run.path), meta=meta, complete=run.complete,
                      status=run.status, synthetic=bool(meta.get("synthetic")), sm_mhz=_sm_mhz(meta))
    phases = meta.get("phases")
    res.phases = phases if isinstance(phases, list) else []
    for part, table in PROBE_TABLES.items():
        frame = _read(run, table)
        if frame is None or len(frame) == 0:
            res.missing[part] = f"no probes/{table}.parquet in the run"
            continue
        try:
            PARTS[part](res, frame)
        except KeyError as exc:
            res.missing[part] = f"probes/{table}.parquet: {exc.args[0]}"
    _samplers(res, run)
    if not res.samplers:
        res.missing["samplers"] = "no sampler tables with a time column"
    return res
