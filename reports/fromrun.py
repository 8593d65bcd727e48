"""Fill a calibration file (schema v1, `calibration/`) from a measured run directory.

What comes from the run: per-tier latency quantiles and histograms (cycles), HBM read/write/
copy bandwidth, the loaded-latency curve of the HBM-missing chase (with its queueing fit), the
replacement delay per load level, and provenance (run id, host, device UUID, clocks, tool
version). What a run cannot measure, the dense BF16 compute rate the cost model prices
recomputation with, is copied from the shipped `hopper-published` reference with its citation
and said so in `provenance.missing.compute`.

An incomplete run (meta.json `complete: false`, or a probe part or tier absent) is refused with
the list of what is missing, unless `allow_incomplete`; even then the HBM latency and the SM
clock are needed (the cost model cannot run without them).
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

from sitsprof.calibration import SCHEMA, SCHEMA_VERSION, TIERS, load_calibration, write_calibration

from .analysis import Distribution, RunAnalysis, analyze_run, clocks_locked
from .errors import IncompleteRunError

__all__ = [
    "EXPECTED_TIERS",
    "PROBE_PARTS",
    "QKEYS",
    "calibrate",
    "calibration_from_run",
    "missing_parts",
    "nonnegative_histogram",
    "replacement_delay_entry",
]

#: distributions.quantile_label -> calibration quantile key
QKEYS = {"p50": "p50", "p90": "p90", "p99": "p99", "p99.9": "p999"}
#: Tiers a complete ladder is expected to show (l2_far and tlb_miss depend on the device/sweep).
EXPECTED_TIERS = ("l1", "l2_near", "hbm")
PROBE_PARTS = {"latency": "latency ladder", "tlb": "TLB sweep", "bandwidth": "bandwidth", "loaded": "loaded latency"}


def _quantiles(summary: dict) -> dict:
    return {key: float(summary[label]) for label, key in QKEYS.items() if label in summary}


def nonnegative_histogram(edges, counts) -> tuple[list[float], list[int]]:
    """The histogram with bins below 0 folded into the bin holding 0 (schema v1 edges are >= 0;
    with the timer overhead subtracted, the fastest hits can be a few cycles below zero)."""
    import numpy as np

    edges = np.asarray(edges, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    if edges[0] < 0 < edges[-1]:
        k = int(np.searchsorted(edges, 0.0, side="right")) - 1  # the bin that starts at or spans 0
        counts = np.concatenate([[counts[: k + 1].sum()], counts[k + 1:]])
        edges = np.concatenate([[0.0], edges[k + 1:]])
    return [float(e) for e in edges], [int(c) for c in counts]


def _latency_entry(dist: Distribution, note: str = "") -> dict:
    edges, counts = nonnegative_histogram(dist.hist_edges, dist.hist_counts)
    entry = {"unit": "cycles", "quantiles": _quantiles(dist.summary),
             "histogram": {"edges": edges, "counts": counts}, "samples": int(dist.summary["count"])}
    if note:
        entry["note"] = note
    return entry


def missing_parts(res: RunAnalysis) -> list[str]:
    """Human-readable list of what this run lacks for a full calibration."""
    out = []
    if not res.complete:
        out.append(f"the run did not finish (status {res.status!r}, meta.json complete: false)")
    for part, label in PROBE_PARTS.items():
        if part in res.missing:
            out.append(f"{label}: {res.missing[part]}")
    if "latency" not in res.missing:
        found = {t.name for t in res.tiers}
        for tier in EXPECTED_TIERS:
            if tier not in found:
                out.append(f"tier {tier}: not found in the latency ladder")
    if res.sm_mhz is None:
        out.append("SM clock: meta.json records no SM clock (clocks.applied.sm_mhz or sm_clock_mhz)")
    return out


def calibration_from_run(run, allow_incomplete: bool = False, name: str | None = None) -> dict:
    """A schema-v1 calibration dict from a run directory (path, RunDirectory or RunAnalysis)."""
    res = run if isinstance(run, RunAnalysis) else analyze_run(run)
    missing = missing_parts(res)
    if missing and not allow_incomplete:
        raise IncompleteRunError(
            f"{res.path}: cannot calibrate from an incomplete run; missing: " + "; ".join(missing)
            + " (rerun the missing probes, or pass --allow-incomplete to write what there is)")
    hbm = res.tier("hbm")
    if hbm is None or res.sm_mhz is None:
        raise IncompleteRunError(
            f"{res.path}: even with --allow-incomplete a calibration needs the HBM latency tier and the SM clock; "
            "missing: " + "; ".join(m for m in missing if "hbm" in m or "SM clock" in m or "ladder" in m))

    reference = load_calibration(None)
    dev = res.device
    meta = res.meta
    clocks_meta = meta.get("clocks") if isinstance(meta.get("clocks"), dict) else {}
    why_missing: dict[str, str] = {}
    latency: dict[str, dict | None] = {}
    for tier in TIERS:
        t = res.tier(tier)
        if t is not None:
            latency[tier] = _latency_entry(t.dist, f"footprints {t.footprint_lo}-{t.footprint_hi} bytes")
        elif tier == "tlb_miss" and res.tlb_miss is not None:
            latency[tier] = _latency_entry(res.tlb_miss[1], res.tlb_miss[0])
        else:
            latency[tier] = None
            why_missing[tier] = f"no {tier} tier in this run's latency ladder or TLB sweep"

    bandwidth: dict = {}
    if res.bandwidth is not None:
        best = res.bandwidth.groupby("kernel")["best_gbs"].max()
        for kernel, key in (("read", "hbm_read_gbs"), ("write", "hbm_write_gbs"), ("copy", "hbm_copy_gbs")):
            if kernel in best and best[kernel] > 0:
                bandwidth[key] = float(best[kernel])
        if "memcpy" in best:
            bandwidth["note"] = f"cudaMemcpy device-to-device in the same run: {float(best['memcpy']):.1f} GB/s"
    if "hbm_read_gbs" not in bandwidth:
        bandwidth = {k: v for k, v in reference["bandwidth"].items() if k in ("hbm_read_gbs", "hbm_write_gbs")}
        bandwidth["note"] = "NOT MEASURED by this run: HBM bandwidth copied from the hopper-published reference"
        why_missing["bandwidth"] = "no bandwidth probe in the run; hbm_read/write_gbs copied from hopper-published"

    curves = []
    if res.loaded is not None and len(res.loaded):
        for access, tier, label in (("hbm", "hbm", "HBM-missing chase under a bandwidth saturator"),):
            sub = res.loaded[res.loaded["access"] == access].sort_values("bandwidth_fraction")
            points, last = [], -1.0
            for _, row in sub.iterrows():
                frac = float(row["bandwidth_fraction"])
                if frac <= last or row["p50"] <= 0:
                    continue
                points.append({"bandwidth_fraction": frac, "quantiles": _quantiles(row.to_dict()),
                               "samples": int(row["count"])})
                last = frac
            if points:
                curve = {"tier": tier, "unit": "cycles", "access": label, "points": points}
                # What the fractions are of (the saturator's best, probes/gpu.py): the step model
                # (policies/serving/latency.py) turns a fraction into bytes/s with it.
                if "achieved_gbs" in sub.columns:
                    ratio = (sub["achieved_gbs"] / sub["bandwidth_fraction"])[sub["bandwidth_fraction"] > 0.05]
                    if len(ratio) and ratio.notna().all() and 1.0 <= float(ratio.median()) <= 100_000.0:
                        curve["peak_gbs"] = float(ratio.median())
                fit = res.loaded_fits.get((access, "p50"))
                if fit is not None:
                    curve["fit_p50"] = fit.to_dict()
                curves.append(curve)
    else:
        why_missing["loaded_latency"] = "no loaded-latency probe in the run"

    sources = [s for s in reference["provenance"]["sources"] if s["id"] == reference["compute"]["source"]]
    why_missing["compute"] = ("a run does not measure compute: bf16_dense_tflops and achieved_fraction copied "
                              "from the hopper-published reference")
    run_id = str(meta.get("run_id") or res.name)
    calibration = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "name": name or ((f"synthetic-{res.name}" if res.synthetic else f"measured-{res.name}") if res.host == res.name
                         else f"{'synthetic' if res.synthetic else 'measured'}-{res.host}-{res.name}"),
        # A synthetic run (reports/synthetic.py) is a model, not a measurement: its calibration
        # says so in `measured`, `synthetic`, `provenance.kind` and `label` alike.
        "measured": not res.synthetic,
        "label": ("SYNTHETIC: built from a generated run, not a measurement" if res.synthetic
                  else f"measured by sitsprof on {res.host}"),
        "device": {k: dev[k] for k in ("name", "uuid", "pci_bus_id", "compute_capability", "sm_count",
                                       "l2_bytes", "memory_bytes") if k in dev} or {"name": "unknown"},
        "clocks": {"sm_mhz": float(res.sm_mhz), "locked": bool(clocks_locked(meta))},
        "provenance": {
            "kind": "synthetic" if res.synthetic else "measured",
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "run": run_id,
            "run_path": str(Path(res.path).resolve()),
            "host": res.host,
            "device_uuid": dev.get("uuid"),
            "tool_version": meta.get("tool_version"),
            "run_status": res.status,
            "clocks": clocks_meta,
            "clock_drift": res.clock or None,
            "sources": sources,
            "missing": why_missing,
            "incomplete": missing,
        },
        "latency": latency,
        "bandwidth": bandwidth,
        "loaded_latency": curves,
        "compute": dict(reference["compute"]),
    }
    if "name" not in calibration["device"]:
        calibration["device"]["name"] = "unknown"
    if res.synthetic:
        calibration["synthetic"] = True
    mem = clocks_meta.get("applied", {}).get("memory_mhz") if isinstance(clocks_meta.get("applied"), dict) else None
    if isinstance(mem, (int, float)) and mem > 0:
        calibration["clocks"]["memory_mhz"] = float(mem)
    if res.replacement_levels is not None and len(res.replacement_levels):
        calibration["replacement_delay"] = replacement_delay_entry(res)
    return calibration


def replacement_delay_entry(res: RunAnalysis) -> dict:
    """The calibration's replacement delay (docs/replacement-delay.md): per load level the
    same-load hit latency, the classification cuts (hit at or below `hit_cut_cycles`, evicted at
    or above `cut_cycles`, the far-L2 band between: `far_band` re-touches, never evictions), the
    delay distribution of missed re-touches (quantiles and histogram; null where nothing was
    evicted) and the L2 residency curve and time."""
    import math

    levels = []
    for row in res.replacement_levels.itertuples():
        level = int(row.level)
        d = res.replacement.get(level)
        curve = res.residency.get(level)
        residency = {"time_ns": float(row.residency_ns) if math.isfinite(row.residency_ns) else None,
                     "bound": str(row.residency_bound),
                     "curve": [] if curve is None else [
                         {"interval_ns": int(c.interval_ns), "age_ns": float(c.age_ns), "samples": int(c.samples),
                          "resident_fraction": float(c.resident_fraction)} for c in curve.itertuples()]}
        entry = {"level": level, "bandwidth_fraction": float(row.bandwidth_fraction),
                 "hit_cycles": float(row.hit_p50), "miss_cycles": float(row.miss_p50), "cut_cycles": float(row.cut),
                 "hit_cut_cycles": float(row.hit_cut), "far_band": int(row.far_band),
                 "far_cycles": float(row.far_p50) if math.isfinite(row.far_p50) else None,
                 "separation": float(row.separation), "retouches": int(row.retouches), "misses": int(row.misses),
                 "evicted_fraction": float(row.evicted_fraction), "residency": residency, "delay": None}
        if d is not None and d.summary["count"]:
            edges, counts = nonnegative_histogram(d.hist_edges, d.hist_counts)
            entry["delay"] = {"quantiles": {QKEYS[k]: float(v) for k, v in d.summary.items() if k in QKEYS},
                              "mean": float(d.summary["mean"]), "samples": int(d.summary["count"]),
                              "histogram": {"edges": edges, "counts": counts}}
        levels.append(entry)
    return {"unit": "cycles", "method": "docs/replacement-delay.md", "baseline": res.replacement_baseline[0],
            "levels": levels}


def calibrate(run_path, out, allow_incomplete: bool = False, name: str | None = None) -> tuple[Path, dict]:
    """Analyse `run_path`, validate and write the calibration to `out`; returns (path, calibration)."""
    calibration = calibration_from_run(run_path, allow_incomplete=allow_incomplete, name=name)
    return write_calibration(calibration, out), calibration
