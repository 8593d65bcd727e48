"""The figures a probe run must show (issue 5), read back from its run directory.

`check_figures(run)` compares the measured tiers with DESIGN.md's published plateaus
(RRZE-HPC gpu-benches, gpu-latency on GH200 at 1980 MHz), the copy kernel with cudaMemcpy
D2D of the same run, and lists the loaded-latency levels with P50/P99. It reads only the
documented probe tables (docs/run-directory.md) and says what is missing instead of failing.
"""
from __future__ import annotations

import numpy as np

#: Published plateaus in SM cycles at 1980 MHz (DESIGN.md "Probes"): (low, high).
PUBLISHED_CYCLES = {"l1": (32, 32), "l2_near": (280, 280), "l2_far": (490, 530), "hbm": (610, 690)}
PUBLISHED_MHZ = 1980.0
TOLERANCE = 0.15
COPY_TARGET = 0.95


def _table(run, name):
    return run.read_table(name, "probe") if name in run.tables("probe") else None


def check_figures(run) -> dict:
    """{'clock_mhz', 'tiers': [...], 'copy': {...}, 'loaded': {...}, 'missing': [...]}."""
    clocks = run.meta.get("clocks") if isinstance(run.meta.get("clocks"), dict) else {}
    applied = clocks.get("applied") if isinstance(clocks.get("applied"), dict) else {}
    out: dict = {"clock_mhz": run.meta.get("sm_clock_mhz"), "published_mhz": PUBLISHED_MHZ,
                 "nvml_sm_mhz": applied.get("sm_mhz"), "clock_mode": clocks.get("mode"),
                 "tiers": [], "copy": None, "loaded": None, "missing": []}
    tiers = _table(run, "latency_tiers")
    if tiers is None or tiers.empty:
        out["missing"].append("latency_tiers")
    else:
        for row in tiers[tiers["variant"] == "ca"].itertuples():
            if row.tier not in PUBLISHED_CYCLES:
                continue
            lo, hi = PUBLISHED_CYCLES[row.tier]
            rel = 0.0 if lo <= row.p50_cycles <= hi else min(abs(row.p50_cycles - lo) / lo, abs(row.p50_cycles - hi) / hi)
            out["tiers"].append({"tier": row.tier, "measured_cycles": float(row.p50_cycles),
                                 "published_cycles": (lo, hi), "off_by": rel, "within": rel <= TOLERANCE})
    bw = _table(run, "bandwidth")
    if bw is None or bw.empty:
        out["missing"].append("bandwidth")
    else:
        memcpy = bw.loc[bw["kernel"] == "memcpy", "achieved_gbs"]
        copy = bw.loc[bw["kernel"] == "copy", "achieved_gbs"]
        if len(memcpy) and len(copy):
            ratio = float(copy.max() / memcpy.max())
            out["copy"] = {"copy_gbs": float(copy.max()), "memcpy_gbs": float(memcpy.max()), "ratio": ratio,
                           "meets": ratio >= COPY_TARGET}
    levels = _table(run, "loaded_levels")
    if levels is None or levels.empty:
        out["missing"].append("loaded_levels")
    else:
        hbm = levels[levels["access"] == "hbm"].sort_values("level")
        rt = levels[levels["access"] == "retouch"].sort_values("level")
        out["loaded"] = {
            "levels": int(levels["level"].nunique()),
            "max_fraction": float(levels["bandwidth_fraction"].max()),
            "rows": [{"level": int(h.level), "fraction": float(h.bandwidth_fraction), "gbs": float(h.achieved_gbs),
                      "hbm_p50": float(h.p50), "hbm_p99": float(h.p99),
                      "retouch_p50": float(r.p50) if r is not None else np.nan,
                      "retouch_p99": float(r.p99) if r is not None else np.nan,
                      "delay_p50": float(r.delay_p50) if r is not None else np.nan}
                     for h, r in zip(hbm.itertuples(), list(rt.itertuples()) + [None] * (len(hbm) - len(rt)))],
        }
        out["loaded"]["meets"] = out["loaded"]["levels"] >= 8 and out["loaded"]["max_fraction"] >= 0.9
    return out


def format_figures(fig: dict) -> list[str]:
    """Plain lines for a terminal or a closing note."""
    nvml = (f"; NVML read {fig['nvml_sm_mhz']} MHz with the clocks locked" if fig.get("nvml_sm_mhz")
            else f"; clocks {fig.get('clock_mode') or 'not recorded'}")
    lines = [f"SM clock {fig['clock_mhz'] or float('nan'):.0f} MHz measured (clock64 against %globaltimer{nvml}); "
             f"published plateaus are at {fig['published_mhz']:.0f} MHz"]
    for t in fig["tiers"]:
        lo, hi = t["published_cycles"]
        pub = f"{lo}" if lo == hi else f"{lo}-{hi}"
        lines.append(f"{t['tier']:<8} {t['measured_cycles']:7.1f} cycles vs published {pub:>7}: "
                     f"{'within' if t['within'] else 'OUTSIDE'} 15% (off by {t['off_by']:.1%})")
    if fig["copy"]:
        c = fig["copy"]
        lines.append(f"copy kernel {c['copy_gbs']:.0f} GB/s vs cudaMemcpy D2D {c['memcpy_gbs']:.0f} GB/s: "
                     f"{c['ratio']:.1%} ({'meets' if c['meets'] else 'BELOW'} 95%)")
    if fig["loaded"]:
        ld = fig["loaded"]
        lines.append(f"loaded latency: {ld['levels']} levels up to {ld['max_fraction']:.0%} of peak "
                     f"({'meets' if ld['meets'] else 'does NOT meet'} >= 8 levels to >= 90%)")
        lines.append("level  fraction   GB/s  hbm p50/p99 (cycles)  retouch p50/p99  delay p50")
        for r in ld["rows"]:
            lines.append(f"{r['level']:5d}  {r['fraction']:8.2f}  {r['gbs']:5.0f}  {r['hbm_p50']:8.0f} / "
                         f"{r['hbm_p99']:6.0f}      {r['retouch_p50']:6.0f} / {r['retouch_p99']:6.0f}  "
                         f"{r['delay_p50']:8.0f}")
    for m in fig["missing"]:
        lines.append(f"missing: probes/{m}.parquet")
    return lines
