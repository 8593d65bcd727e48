"""The figures a probe run must show (issue 5): the run's own numbers against published ones.

`check_figures(run)` compares the measured tiers with the published plateaus of the shipped
reference calibration (`hopper-published`: RRZE-HPC gpu-benches, gpu-latency on GH200), the
copy kernel with cudaMemcpy D2D of the same run, and lists the loaded-latency levels with
P50/P99. Every number comes from `analysis.analyze_run`, the same figures the report and the
calibration file show; a part the run lacks is listed as missing instead of failing.
"""
from __future__ import annotations

from sitsprof.calibration import load_calibration

from .analysis import RunAnalysis, analyze_run

__all__ = [
    "BAND_KEYS",
    "COPY_TARGET",
    "PUBLISHED_TIERS",
    "TOLERANCE",
    "check_figures",
    "figures_report",
    "format_figures",
    "published_plateaus",
]

#: The tiers the reference calibration publishes a plateau for, in ladder order.
PUBLISHED_TIERS = ("l1", "l2_near", "l2_far", "hbm")
TOLERANCE = 0.15
COPY_TARGET = 0.95


def published_plateaus() -> tuple[dict[str, tuple[float, float]], float]:
    """({tier: (low, high) cycles}, SM MHz they are quoted at) from the reference calibration.

    A tier's published range is its `range` where the reference gives one, else its P50.
    """
    ref = load_calibration(None)
    out = {}
    for tier in PUBLISHED_TIERS:
        entry = ref["latency"].get(tier)
        if entry is None or entry["unit"] != "cycles":
            continue
        lo, hi = entry.get("range") or (entry["quantiles"]["p50"],) * 2
        out[tier] = (lo, hi)
    return out, float(ref["clocks"]["sm_mhz"])


def _ladder_tiers(res: RunAnalysis):
    """The default-cached ladder's tiers (none when the run has only the L1-bypassing ladder)."""
    if res.ladder is None or res.ladder is res.ladder_cg:
        return []
    return res.tiers


def check_figures(run) -> dict:
    """{'clock_mhz', 'tiers': [...], 'copy': {...}, 'loaded': {...}, 'missing': [...]} of a run
    directory (a path, an open run, or its `RunAnalysis`)."""
    res = run if isinstance(run, RunAnalysis) else analyze_run(run)
    published, published_mhz = published_plateaus()
    clocks = res.meta.get("clocks") if isinstance(res.meta.get("clocks"), dict) else {}
    applied = clocks.get("applied") if isinstance(clocks.get("applied"), dict) else {}
    # clock_mhz: the run's SM clock as a number, or None (meta.json may hold text there)
    out: dict = {"synthetic": bool(res.synthetic), "clock_mhz": res.sm_mhz,
                 "published_mhz": published_mhz,
                 "nvml_sm_mhz": applied.get("sm_mhz"), "clock_mode": clocks.get("mode"),
                 "tiers": [], "hbm_ns": None, "copy": None, "loaded": None, "missing": []}
    tiers = _ladder_tiers(res)
    if not tiers:
        out["missing"].append("latency")
    for tier in tiers:
        if tier.name not in published:
            continue
        lo, hi = published[tier.name]
        p50 = float(tier.dist.summary["p50"])
        rel = 0.0 if lo <= p50 <= hi else min(abs(p50 - lo) / lo, abs(p50 - hi) / hi)
        out["tiers"].append({"tier": tier.name, "measured_cycles": p50, "published_cycles": (lo, hi),
                             "off_by": rel, "within": rel <= TOLERANCE})
        if tier.name == "hbm" and tier.p50_ns == tier.p50_ns:
            # In ns, each chase's cycles at its own clock: comparable under --clocks none, where the
            # SM clock (and so the cycle count of a memory-bound access) is not the published one.
            lo_ns, hi_ns = lo * 1e3 / published_mhz, hi * 1e3 / published_mhz
            ns = tier.p50_ns
            rel_ns = 0.0 if lo_ns <= ns <= hi_ns else min(abs(ns - lo_ns) / lo_ns, abs(ns - hi_ns) / hi_ns)
            out["hbm_ns"] = {"measured_ns": ns, "published_ns": (lo_ns, hi_ns), "off_by": rel_ns,
                             "within": rel_ns <= TOLERANCE}
    bw = res.bandwidth
    if bw is None or bw.empty:
        out["missing"].append("bandwidth")
    else:
        memcpy = bw.loc[bw["kernel"] == "memcpy", "best_gbs"]
        copy = bw.loc[bw["kernel"] == "copy", "best_gbs"]
        if len(memcpy) and len(copy):
            ratio = float(copy.max() / memcpy.max())
            out["copy"] = {"copy_gbs": float(copy.max()), "memcpy_gbs": float(memcpy.max()), "ratio": ratio,
                           "meets": ratio >= COPY_TARGET}
    levels = res.loaded
    if levels is None or levels.empty:
        out["missing"].append("loaded")
    else:
        hbm = levels[levels["access"] == "hbm"].sort_values("level")
        rt = {int(r.level): r for r in levels[levels["access"] == "retouch"].itertuples()}
        nan = float("nan")
        rows = []
        for h in hbm.itertuples():
            r = rt.get(int(h.level))
            delay = res.replacement.get(int(h.level))
            resid = (res.replacement_levels.set_index("level")["residency_ns"].get(int(h.level), nan)
                     if res.replacement_levels is not None else nan)
            rows.append({"level": int(h.level), "fraction": float(h.bandwidth_fraction),
                         "gbs": float(getattr(h, "achieved_gbs", nan)), "hbm_p50": float(h.p50),
                         "hbm_p99": float(h.p99), "retouch_p50": float(r.p50) if r is not None else nan,
                         "retouch_p99": float(r.p99) if r is not None else nan,
                         "delay_p50": float(delay.summary["p50"]) if delay is not None else nan,
                         "residency_us": float(resid) / 1e3})
        bands = ([] if res.replacement_levels is None else
                 [{k: (int(v) if k in ("level", "far_band", "misses", "retouches") else float(v))
                   for k, v in r.items() if k in BAND_KEYS}
                  for r in res.replacement_levels.to_dict("records")])
        out["loaded"] = {"levels": int(levels["level"].nunique()),
                         "max_fraction": float(levels["bandwidth_fraction"].max()), "rows": rows, "bands": bands,
                         "invalid_chases": len(res.loaded_invalid), "excluded_levels": list(res.loaded_excluded_levels)}
        out["loaded"]["meets"] = out["loaded"]["levels"] >= 8 and out["loaded"]["max_fraction"] >= 0.9
    return out


#: Per level, the re-touch classification (reports/replacement.py): the two references, the
#: cuts, how well the references separate and what fell in each band.
BAND_KEYS = ("level", "hit_p99", "miss_p1", "hit_cut", "cut", "separation", "retouches", "far_band", "far_p50",
             "misses")


def _band_lines(bands: list[dict]) -> list[str]:
    lines = ["re-touch bands (cycles, same-load references; docs/replacement-delay.md): hit <= hot-set p99 < "
             "far-L2 band < HBM p1 <= evicted; far-band re-touches are never counted as evictions",
             "level  hot p99  hbm p1  cut(s)       separation  re-touches  far band (p50)  evicted"]
    for b in bands:
        cuts = (f"{b['hit_cut']:.0f} / {b['cut']:.0f}" if b["hit_cut"] < b["cut"]
                else f"{b['cut']:.0f} (overlap)")
        far = f"{b['far_band']} ({b['far_p50']:.0f})" if b["far_band"] else "0"
        lines.append(f"{b['level']:5d}  {b['hit_p99']:7.0f}  {b['miss_p1']:6.0f}  {cuts:<11}  {b['separation']:10.2f}"
                     f"  {b['retouches']:10d}  {far:>14}  {b['misses']:7d}")
    return lines


def format_figures(fig: dict) -> list[str]:
    """Plain lines for a terminal or a closing note."""
    nvml = (f"; NVML read {fig['nvml_sm_mhz']} MHz with the clocks locked" if fig.get("nvml_sm_mhz")
            else f"; clocks {fig.get('clock_mode') or 'not recorded'}")
    # A synthetic run (reports/synthetic.py) is generated from a model: never say "measured" of it.
    clock = f"SM clock {fig['clock_mhz'] or float('nan'):.0f} MHz"
    clock += (" generated (SYNTHETIC run)" if fig.get("synthetic")
              else f" measured (clock64 against %globaltimer{nvml})")
    lines = [f"{clock}; published plateaus are at {fig['published_mhz']:.0f} MHz"]
    if fig.get("synthetic"):
        lines.insert(0, "SYNTHETIC: this run was generated by sitsprof from a model (tests, demos); "
                        "none of its figures is a measurement")
    for t in fig["tiers"]:
        lo, hi = t["published_cycles"]
        pub = f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"
        lines.append(f"{t['tier']:<8} {t['measured_cycles']:7.1f} cycles vs published {pub:>7}: "
                     f"{'within' if t['within'] else 'OUTSIDE'} {TOLERANCE:.0%} (off by {t['off_by']:.1%})")
    if fig.get("hbm_ns"):
        h = fig["hbm_ns"]
        lo, hi = h["published_ns"]
        lines.append(f"hbm      {h['measured_ns']:7.1f} ns     vs published {lo:.0f}-{hi:.0f} ns: "
                     f"{'within' if h['within'] else 'OUTSIDE'} {TOLERANCE:.0%} (off by {h['off_by']:.1%}; "
                     "each chase at its own clock)")
    if fig["copy"]:
        c = fig["copy"]
        lines.append(f"copy kernel {c['copy_gbs']:.0f} GB/s vs cudaMemcpy D2D {c['memcpy_gbs']:.0f} GB/s: "
                     f"{c['ratio']:.1%} ({'meets' if c['meets'] else 'BELOW'} {COPY_TARGET:.0%})")
    if fig["loaded"]:
        ld = fig["loaded"]
        lines.append(f"loaded latency: {ld['levels']} levels up to {ld['max_fraction']:.0%} of peak "
                     f"({'meets' if ld['meets'] else 'does NOT meet'} >= 8 levels to >= 90%)")
        if ld.get("invalid_chases") or ld.get("excluded_levels"):
            lines.append(f"  {ld['invalid_chases']} chase(s) invalid (outside the saturator's window) and excluded; "
                         f"levels excluded: {', '.join(map(str, ld['excluded_levels'])) or 'none'}")
        lines.append("level  fraction   GB/s  hbm p50/p99 (cycles)  retouch p50/p99  delay p50  residency (us)")
        for r in ld["rows"]:
            lines.append(f"{r['level']:5d}  {r['fraction']:8.2f}  {r['gbs']:5.0f}  {r['hbm_p50']:8.0f} / "
                         f"{r['hbm_p99']:6.0f}      {r['retouch_p50']:6.0f} / {r['retouch_p99']:6.0f}  "
                         f"{r['delay_p50']:8.0f}  {r['residency_us']:12.1f}")
        if ld.get("bands"):
            lines.extend(_band_lines(ld["bands"]))
    for m in fig["missing"]:
        lines.append(f"missing: probes/{m}.parquet")
    return lines


def figures_report(run) -> list[str]:
    """`sitsprof probe figures RUN_DIR`: the checked figures of one run, as lines to print."""
    return format_figures(check_figures(run))
