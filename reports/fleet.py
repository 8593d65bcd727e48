"""Several runs (nodes of a fleet) side by side, with outliers marked.

An outlier is a robust z-score over the fleet (median and MAD) with a relative floor, so a
fleet of near-identical nodes does not flag noise (`fleet_outliers`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .analysis import RunAnalysis
from .axes import axis_titles, bytes_axis
from .html import Figure, Section, Table, line_traces, plot_text
from .tiers import TIER_LABELS

__all__ = ["fleet_metrics", "fleet_outliers", "fleet_section"]


def fleet_metrics(run: RunAnalysis) -> dict[str, float]:
    """The figures compared across nodes (NaN where the run lacks them)."""
    nan = float("nan")
    out = {}
    for tier in ("l1", "l2_near", "l2_far", "hbm"):
        t = run.tier(tier)
        out[f"{TIER_LABELS[tier]} p50"] = t.dist.summary["p50"] if t else nan
    hbm = run.tier("hbm")
    out["HBM p99"] = hbm.dist.summary["p99"] if hbm else nan
    if run.bandwidth is not None:
        copy = run.bandwidth.loc[run.bandwidth["kernel"] == "copy", "best_gbs"]
        out["copy GB/s"] = float(copy.max()) if len(copy) else nan
    else:
        out["copy GB/s"] = nan
    if run.loaded is not None and len(run.loaded):
        hb = run.loaded[run.loaded["access"] == "hbm"].sort_values("bandwidth_fraction")
        out["HBM p99 at top load"] = float(hb["p99"].iloc[-1]) if len(hb) else nan
    else:
        out["HBM p99 at top load"] = nan
    out["clock drift %"] = run.clock.get("max_drift_pct", nan)
    return out


def fleet_outliers(values: Sequence[float], z: float = 3.5, min_rel: float = 0.03) -> list[bool]:
    """Robust outliers: |x - median| / (1.4826 MAD) > z and more than `min_rel` off the median.

    The relative floor keeps a fleet of near-identical nodes (MAD close to 0) from flagging
    noise; with fewer than 3 finite values nothing is flagged.
    """
    x = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(x)
    out = [False] * x.size
    if ok.sum() < 3:
        return out
    med = float(np.median(x[ok]))
    mad = float(np.median(np.abs(x[ok] - med))) * 1.4826
    for i, v in enumerate(x):
        if not ok[i]:
            continue
        dev = abs(v - med)
        rel = dev / abs(med) if med else (math.inf if dev else 0.0)
        robust = dev / mad if mad > 0 else (math.inf if dev else 0.0)
        out[i] = bool(robust > z and rel > min_rel)
    return out


def fleet_section(runs: list[RunAnalysis]) -> tuple[Section, list[int]]:
    metrics = [fleet_metrics(r) for r in runs]
    names = list(metrics[0])
    flags = {m: fleet_outliers([row[m] for row in metrics]) for m in names if m != "clock drift %"}
    outlier_runs = []
    rows, classes = [], []
    mixed = len({str(r.device.get("name")) for r in runs}) > 1  # else the device is in the subtitle
    for i, (run, row) in enumerate(zip(runs, metrics)):
        bad = [m for m, f in flags.items() if f[i]]
        if bad:
            outlier_runs.append(i)
        rows.append([run.host, *([str(run.device.get("name", "unknown"))] if mixed else []), run.status,
                     *[row[m] for m in names], ", ".join(bad) or "–"])
        classes.append("outlier" if bad else "")
    table = Table(["host", *(["device"] if mixed else []), "status", *names, "outlier in"], rows, row_classes=classes,
                  title=f"{len(runs)} runs side by side",
                  caption="Outliers (marked ▲): more than 3.5 robust standard deviations (MAD) and 3% from the "
                          "fleet median. Latencies in cycles.")
    figs = []
    with_ladder = [i for i, r in enumerate(runs) if r.ladder is not None and len(r.ladder)]
    ladder = [(runs[i].host, runs[i].ladder["footprint_bytes"].to_numpy(), runs[i].ladder["p50"].to_numpy())
              for i in with_ladder]
    if ladder:
        data = line_traces(ladder, mode="lines")
        for trace, i in zip(data, with_ladder):
            if i in outlier_runs:
                trace["line"] = {"width": 3, "dash": "dash"}
        all_fp = np.concatenate([x for _, x, _ in ladder])
        figs.append(Figure("Latency ladder P50, every run", data,
                           axis_titles("footprint", "latency (cycles)", xaxis=bytes_axis(all_fp)),
                           caption="Outlier runs are drawn dashed and thicker."))
    metric = "HBM p50"
    vals = [row[metric] for row in metrics]
    if any(np.isfinite(vals)):
        colours = ["#D55E00" if i in outlier_runs else "#0072B2" for i in range(len(runs))]
        figs.append(Figure(f"{metric} per host", [{"type": "bar", "x": [plot_text(r.host) for r in runs],
                                                   "y": vals, "marker": {"color": colours}}],
                           axis_titles("host", "latency (cycles)"),
                           caption="Orange bars are outlier runs."))
    return Section("Fleet comparison", tables=[table], figures=figs), outlier_runs
