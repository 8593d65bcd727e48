"""The sections of one run: summary and tiers, ladder, TLB, bandwidth, loaded latency,
replacement delay and the sampler timelines, each from a `RunAnalysis` (no recomputing).

`run_sections(run, prefix)` is what the report (and the demo's bundled run) shows per run.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .analysis import QLABELS, RunAnalysis, clocks_locked, column
from .axes import axis_titles, bytes_axis, colour_ramp, fmt_bytes
from .html import PALETTE, Figure, Section, Table, line_traces, plot_text

__all__ = [
    "SAMPLER_LABELS",
    "SAMPLER_STATS",
    "SYNTHETIC_LABEL",
    "bandwidth_figures",
    "ladder_figures",
    "loaded_figures",
    "mark_synthetic",
    "replacement_figures",
    "run_sections",
    "sampler_label",
    "sampler_stats",
    "summary_section",
    "tier_table",
    "timeline_figures",
    "tlb_figures",
]


def tier_table(run: RunAnalysis, tiers, title: str) -> Table:
    rows = []
    for t in tiers:
        s = t.dist.summary
        rows.append([t.label, f"{fmt_bytes(t.footprint_lo)} – {fmt_bytes(t.footprint_hi)}",
                     s["count"], *[s[q] for q in QLABELS], run.to_ns(s["p50"]), run.to_ns(s["p99"])])
    return Table(["tier", "footprints", "samples", *[f"{q} (cycles)" for q in QLABELS], "p50 (ns)", "p99 (ns)"],
                 rows, title=title, caption="Exact quantiles over every recorded access; ns from the SM clock above.")


def summary_section(run: RunAnalysis, title: str) -> Section:
    dev = run.device
    facts = [
        ["host", run.host], ["run", run.name], ["status", run.status + ("" if run.complete else " (incomplete)")],
        ["device", dev.get("name", "unknown")], ["device UUID", dev.get("uuid", "unknown")],
        ["SM clock used for ns (MHz)", run.sm_mhz],
        ["clocks locked", "not recorded" if clocks_locked(run.meta) is None else clocks_locked(run.meta)],
        ["tool version", run.meta.get("tool_version", "unknown")],
        ["started", run.meta.get("started_at")], ["ended", run.meta.get("ended_at")],
    ]
    workload = run.meta.get("workload")
    if isinstance(workload, dict):  # a `sitsprof record` run of the user's own command
        command = workload.get("command")
        facts.append(["recorded command", " ".join(map(str, command)) if isinstance(command, list) else command])
        facts.append(["exit code", workload.get("exit_code")])
        facts.append(["seconds", workload.get("seconds")])
    if run.clock:
        c = run.clock
        facts.append(["SM clock during run (MHz)", f"{c['min_mhz']:.0f} – {c['max_mhz']:.0f} "
                      f"(mean {c['mean_mhz']:.0f}, max drift {c['max_drift_pct']:.2f}% from {c['reference_mhz']:.0f})"])
    tables = [Table(["", "value"], facts, title="Run")]
    if run.tiers:
        tables.append(tier_table(run, run.tiers, "Latency per tier" + (
            " (default-cached chase)" if run.tiers_cg and run.tiers is not run.tiers_cg else "")))
    if run.tiers_cg and run.tiers is not run.tiers_cg:
        tables.append(tier_table(run, run.tiers_cg, "Latency per tier, L1-bypassing chase (ld.global.cg)"))
    if run.missing:
        tables.append(Table(["part", "why it is absent"], [[k, v] for k, v in run.missing.items()],
                            title="Not in this run", row_classes=["outlier"] * len(run.missing)))
    return Section(title, tables=tables, notes=list(run.notes))


def ladder_figures(run: RunAnalysis) -> list[Figure]:
    figs = []
    if run.ladder is not None and len(run.ladder):
        lad = run.ladder
        fp = lad["footprint_bytes"].to_numpy()
        data = line_traces([(q, fp, lad[q].to_numpy()) for q in ("p50", "p90", "p99")], mode="lines+markers")
        if run.ladder_cg is not None and run.ladder_cg is not lad:
            data.append({"type": "scatter", "mode": "lines", "name": "p50, L1-bypassing",
                         "x": run.ladder_cg["footprint_bytes"].to_numpy(), "y": run.ladder_cg["p50"].to_numpy(),
                         "line": {"dash": "dot", "color": "#555"}})
        shapes, notes = [], []
        for i, t in enumerate(run.tiers):
            shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": t.footprint_lo, "x1": t.footprint_hi,
                           "y0": 0, "y1": 1, "fillcolor": PALETTE[i % len(PALETTE)], "opacity": 0.08,
                           "line": {"width": 0}})
            notes.append({"x": math.log10(math.sqrt(t.footprint_lo * t.footprint_hi)), "xref": "x", "yref": "paper",
                          "y": 1.0, "yanchor": "bottom", "showarrow": False,
                          "text": plot_text(t.label)})
        layout = axis_titles("footprint", "latency (cycles)", xaxis=bytes_axis(fp))
        layout.update(shapes=shapes, annotations=notes)
        figs.append(Figure("Latency ladder", data, layout,
                           caption="Quantiles per footprint; shaded spans are the tiers found by change-point "
                                   "detection."))
    if run.tiers:
        cdf = [{"type": "scatter", "mode": "lines", "name": plot_text(t.label),
                "x": t.dist.cdf_x, "y": t.dist.cdf_p} for t in run.tiers]
        figs.append(Figure("CDF per tier", cdf, axis_titles("latency (cycles)", "fraction of accesses",
                                                              xaxis={"type": "log"}),
                           caption="Downsampled to a few hundred exact order statistics; the tail keeps its own "
                                   "points."))
        hist = []
        for t in run.tiers:
            edges, counts = t.dist.hist_edges, t.dist.hist_counts
            total = max(int(counts.sum()), 1)
            hist.append({"type": "scatter", "mode": "lines", "line": {"shape": "hv"},
                         "name": plot_text(t.label),
                         "x": edges[:-1], "y": counts / total})
        figs.append(Figure("Histogram per tier", hist, axis_titles("latency (cycles)", "fraction per bin",
                                                                     xaxis={"type": "log"})))
    return figs


def tlb_figures(run: RunAnalysis) -> tuple[list[Figure], list[Table]]:
    if run.tlb is None or not len(run.tlb):
        return [], []
    data = []
    for stride, sub in run.tlb.groupby("stride_bytes"):
        sub = sub.sort_values("footprint_bytes")
        data.append({"type": "scatter", "mode": "lines+markers", "name": f"stride {fmt_bytes(stride)}",
                     "x": sub["footprint_bytes"].to_numpy(), "y": sub["p50"].to_numpy()})
    fig = Figure("TLB sweep (P50)", data, axis_titles("footprint", "latency (cycles)",
                                                      xaxis=bytes_axis(run.tlb["footprint_bytes"])))
    rows = [[fmt_bytes(s["stride_bytes"]), fmt_bytes(s["reach_bytes"]), fmt_bytes(s["step_at_bytes"]),
             s["size"], s["before"], s["after"]] for s in run.tlb_steps]
    table = Table(["stride", "reach (last footprint before the step)", "step at", "step (cycles)",
                   "before (cycles)", "after (cycles)"], rows, title="TLB steps",
                  caption="No public counter reports TLB misses; these steps are measured by the chase.")
    return [fig], [table]


def bandwidth_figures(run: RunAnalysis) -> tuple[list[Figure], list[Table]]:
    bw = run.bandwidth
    if bw is None or not len(bw):
        return [], []
    icol = column(bw, "intensity", required=False)
    throttles = sorted(bw.loc[bw["kernel"] != "memcpy", "throttle_ns"].unique())
    data, shapes = [], []
    for (kernel, throttle), sub in bw.groupby(["kernel", "throttle_ns"]):
        if kernel == "memcpy":
            ref = float(sub["best_gbs"].max())
            if not shapes:
                shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": ref, "y1": ref,
                               "line": {"dash": "dash", "color": "#555"}})
                data.append({"type": "scatter", "mode": "lines", "name": "cudaMemcpy D2D", "x": [None],
                             "y": [None], "line": {"dash": "dash", "color": "#555"}})
            continue
        sub = sub.sort_values(icol) if icol else sub
        name = kernel if len(throttles) <= 1 else f"{kernel}, throttle {throttle} ns"
        data.append({"type": "scatter", "mode": "lines+markers", "name": plot_text(name),
                     "x": sub[icol].to_numpy() if icol else np.arange(len(sub)), "y": sub["achieved_gbs"].to_numpy()})
    layout = axis_titles(icol or "setting", "achieved GB/s", xaxis={"type": "log"} if icol else {})
    layout["shapes"] = shapes
    best = bw.groupby("kernel")["best_gbs"].max()
    memcpy = best.get("memcpy", float("nan"))
    rows = [[k, v, v / memcpy if memcpy == memcpy else None] for k, v in best.items()]
    return ([Figure("Bandwidth against intensity", data, layout,
                    caption="Median over repetitions per setting; the dashed line is cudaMemcpy device-to-device.")],
            [Table(["kernel", "best GB/s", "fraction of memcpy"], rows, title="Bandwidth")])


def loaded_figures(run: RunAnalysis) -> tuple[list[Figure], list[Table]]:
    lo = run.loaded
    if lo is None or not len(lo):
        return [], []
    figs, fit_rows = [], []
    titles = {"hbm": "Loaded latency: HBM-missing chase", "retouch": "Loaded latency: re-touch of an L2-resident set"}
    for access, sub in lo.groupby("access"):
        sub = sub.sort_values("bandwidth_fraction")
        u = sub["bandwidth_fraction"].to_numpy()
        data = []
        for i, q in enumerate(("p50", "p99")):
            colour = PALETTE[i]
            data.append({"type": "scatter", "mode": "markers", "name": f"{q} measured", "x": u,
                         "y": sub[q].to_numpy(), "marker": {"color": colour, "size": 8}})
            fit = run.loaded_fits.get((access, q))
            if fit is not None:
                grid = np.linspace(0, min(u.max() * 1.03, fit.u_max * 0.995), 120)
                data.append({"type": "scatter", "mode": "lines", "name": f"{q} fit", "x": grid,
                             "y": fit.predict(grid), "line": {"color": colour, "dash": "dot"}})
                fit_rows.append([access, q, fit.l0, fit.a, fit.u_max, fit.b, fit.rmse, fit.r2, fit.n])
        figs.append(Figure(titles.get(access, f"Loaded latency: {access}"), data,
                           axis_titles("achieved bandwidth (fraction of peak)", "latency (cycles)")))
    tables = [Table(["access", "quantile", "L0 (cycles)", "a (cycles)", "u_max", "b", "rmse", "R²", "levels"],
                    fit_rows, title="Queueing fit: latency = L0 + a·((1 − u/u_max)^−b − 1)",
                    caption="u is the achieved bandwidth as a fraction of peak; b = 1 is the M/M/1 form.")]
    return figs, tables


def replacement_figures(run: RunAnalysis) -> tuple[list[Figure], list[Table]]:
    if not run.replacement:
        return [], []
    levels = sorted(run.replacement)
    frac = run.load_fractions("retouch")
    data, rows = [], []
    for i, level in enumerate(levels):
        d = run.replacement[level]
        f = frac.get(level)
        name = f"level {level}: {f:.0%} of peak" if isinstance(f, (int, float)) and f == f else f"level {level}"
        data.append({"type": "scatter", "mode": "lines", "name": name, "x": d.cdf_x, "y": d.cdf_p,
                     "line": {"color": colour_ramp(i, len(levels))}})
        rows.append([level, frac.get(level), d.summary["count"], *[d.summary[q] for q in QLABELS], d.summary["mean"]])
    base_label, base = run.replacement_baseline
    fig = Figure("Replacement delay per load level (CDF)", data,
                 axis_titles("a missed re-touch's extra latency over a same-load L2 hit (cycles)",
                             "fraction of missed re-touches"),
                 caption=f"Baseline: {base_label} = {base:.1f} cycles. Each re-touch is classified hit or miss "
                         "against that level's hot-set and HBM distributions (docs/replacement-delay.md). Legend: "
                         "load level and the saturator's achieved bandwidth as a share of its peak.")
    table = Table(["level", "bandwidth fraction", "samples", *[f"{q} (cycles)" for q in QLABELS], "mean (cycles)"],
                  rows, title="Replacement delay per load level")
    figs, tables = [fig], [table]
    if run.residency:
        curves = []
        for i, (level, curve) in enumerate(sorted(run.residency.items())):
            curves.append({"type": "scatter", "mode": "lines+markers", "name": f"level {level}",
                           "x": curve["age_ns"].to_numpy() / 1e3, "y": curve["resident_fraction"].to_numpy(),
                           "line": {"color": colour_ramp(i, len(run.residency))}})
        layout = axis_titles("line age (us, log)", "share of re-touched lines still in the L2")
        layout["xaxis"]["type"] = "log"
        figs.append(Figure("L2 residency per load level", curves, layout,
                           caption="Share of re-touches not evicted (near hits and the far-L2 band) against the "
                                   "line's age (prime to re-touch)."))
        lv = run.replacement_levels
        tables.append(Table(["level", "bandwidth fraction", "hit p50 (cycles)", "miss p50 (cycles)",
                             "hit cut (hot p99)", "evicted cut (HBM p1)", "far-L2 band share", "evicted share",
                             "residency (us)"],
                            [[int(r.level), r.bandwidth_fraction, r.hit_p50, r.miss_p50, r.hit_cut, r.cut,
                              r.far_fraction, r.evicted_fraction,
                              ("" if r.residency_bound == "=" else r.residency_bound) + f"{r.residency_ns / 1e3:.1f}"]
                             for r in lv.itertuples()], title="L2 residency time per load level"))
    return figs, tables


#: Display names of the sampler columns documented in docs/run-directory.md (others: by suffix).
SAMPLER_LABELS = {
    "sm_clock_mhz": "SM clock (MHz)", "memory_clock_mhz": "memory clock (MHz)", "power_w": "power (W)",
    "temperature_c": "temperature (°C)", "gpu_util_pct": "GPU utilisation (%)",
    "memory_util_pct": "memory controller utilisation (%)", "memory_used_bytes": "memory used (B)",
    "power_instant_w": "instant power (W)", "energy_mj": "energy since driver load (mJ)",
    "gpm_dram_bw_util_pct": "HBM bandwidth utilisation (%)", "gpm_sm_util_pct": "SM utilisation (%)",
    "gpm_sm_occupancy_pct": "SM occupancy (%)", "gpm_any_tensor_util_pct": "tensor core utilisation (%)",
    "gpm_pcie_tx_mibps": "PCIe TX (MiB/s)", "gpm_pcie_rx_mibps": "PCIe RX (MiB/s)",
    "gpm_nvlink_tx_mibps": "NVLink TX (MiB/s)", "gpm_nvlink_rx_mibps": "NVLink RX (MiB/s)",
}
_SUFFIX_UNITS = (("_pct", "%"), ("_mhz", "MHz"), ("_w", "W"), ("_c", "°C"), ("_bytes", "B"), ("_mj", "mJ"),
                 ("_mibps", "MiB/s"), ("_ns", "ns"), ("_us", "us"))


def sampler_label(col: str) -> str:
    """A sampler column's display name with its unit: `power_w` -> `power (W)`; CUPTI metric names as they are."""
    if col in SAMPLER_LABELS:
        return SAMPLER_LABELS[col]
    if "__" in col:  # a CUPTI metric name: the name is the documentation
        return col
    for suffix, unit in _SUFFIX_UNITS:
        if col.endswith(suffix) and len(col) > len(suffix):
            return f"{col[: -len(suffix)].replace('_', ' ')} ({unit})"
    return col.replace("_", " ")


def timeline_figures(run: RunAnalysis) -> list[Figure]:
    figs = []
    for name, series in run.samplers.items():
        if not series:
            continue
        cols = list(series)
        n = len(cols)
        gap = 0.1
        height = 1.0 / n
        # Room above the first panel for the phase names (its own title sits inside the plot area).
        layout: dict[str, Any] = {"showlegend": False, "shapes": [], "annotations": [], "margin": {"t": 50}}
        data = []
        for i, col in enumerate(cols):
            axis = "" if i == 0 else str(i + 1)
            lo = 1.0 - (i + 1) * height
            top = lo + height - gap / 2
            xs, ys = series[col]
            yaxis = {"domain": [lo + gap / 2, top], "gridcolor": "#e5e5e5", "automargin": True}
            finite = np.abs(np.asarray(ys, dtype=np.float64))
            finite = finite[np.isfinite(finite)]
            if finite.size and finite.max() < 1e5:  # plain numbers (2619.5, not "2,619.5" next to "2620")
                yaxis["tickformat"] = "~r"
            layout[f"yaxis{axis}"] = yaxis
            label = sampler_label(col)
            layout["annotations"].append({"x": 0, "xref": "paper", "y": top, "yref": "paper", "xanchor": "left",
                                          "yanchor": "bottom", "showarrow": False, "font": {"size": 11},
                                          "text": f"<b>{plot_text(label, 60)}</b>"})
            data.append({"type": "scatter", "mode": "lines", "name": plot_text(label, 60), "x": xs, "y": ys,
                         "yaxis": f"y{axis}", "line": {"width": 1, "color": PALETTE[i % len(PALETTE)]}})
        origin = "the probe suite started" if run.phases_aligned else "the first sample"
        layout["xaxis"] = {"title": {"text": f"seconds since {origin}"}, "anchor": f"y{'' if n == 1 else n}"}
        for j, ph in enumerate(run.phases):
            start, end = ph.get("start_s"), ph.get("end_s")
            if start is None or end is None:
                continue
            layout["shapes"].append({"type": "rect", "xref": "x", "yref": "paper", "x0": start, "x1": end,
                                     "y0": 0, "y1": 1, "fillcolor": PALETTE[j % len(PALETTE)], "opacity": 0.07,
                                     "line": {"width": 0}})
            layout["annotations"].append({"x": (start + end) / 2, "xref": "x", "y": 1.0, "yref": "paper",
                                          "yanchor": "bottom", "yshift": 14, "showarrow": False,
                                          "font": {"color": "#777"},
                                          "text": plot_text(ph.get("name", ""))})
        caption = "Shaded spans are the probe phases" + (
            "." if run.phases_aligned or not run.phases else
            " (placed from the first sample: the run does not record the phases' clock origin).")
        figs.append(Figure(f"Sampler: {name}", data, layout, height=max(340, 150 * n + 90), caption=caption))
    return figs


def run_sections(run: RunAnalysis, prefix: str = "") -> list[Section]:
    p = f"{prefix}: " if prefix else ""
    sections = [summary_section(run, f"{p}Summary")]
    figs = ladder_figures(run)
    if figs:
        sections.append(Section(f"{p}Latency ladder and tiers", figures=figs))
    for title, (figs, tables) in (("TLB sweep", tlb_figures(run)), ("Bandwidth", bandwidth_figures(run)),
                                  ("Loaded latency", loaded_figures(run)),
                                  ("Replacement delay", replacement_figures(run))):
        if figs or tables:
            sections.append(Section(f"{p}{title}", figures=figs, tables=tables))
    figs = timeline_figures(run)
    if figs:
        sections.append(Section(f"{p}Sampler timelines", figures=figs, tables=sampler_stats(run)))
    return sections


#: What every title of a generated run's sections says (reports/synthetic.py runs, the demo's).
SYNTHETIC_LABEL = "SYNTHETIC"


def mark_synthetic(sections: list[Section], label: str = SYNTHETIC_LABEL) -> list[Section]:
    """Say `label` in every section, figure and plot title (and first in every intro) of a
    generated run's `sections`, so no part of it, a screenshot of one plot or an exported image
    included, reads as a measurement. Returns them."""
    def marked(text: str) -> str:
        return text if label in text else f"{label}: {text}" if text else text

    for section in sections:
        section.title = marked(section.title)
        if not section.intro.startswith(f"{label}:"):
            section.intro = (f"{label}: generated from a model, not measured. " + section.intro).strip()
        for fig in section.figures:
            fig.title = marked(fig.title)
            title = fig.layout.get("title")
            text = title.get("text", "") if isinstance(title, dict) else (title or "")
            # at the figure's top left, above the plot area and its annotations (tier names): the
            # toolbar sits at the top right, so the two never meet
            fig.layout["title"] = {"text": marked(text) if text else fig.title, "font": {"size": 12},
                                   "x": 0, "xref": "container", "xanchor": "left", "y": 1, "yref": "container",
                                   "yanchor": "top", "pad": {"l": 8, "t": 6}}
            margin = fig.layout.get("margin", {})
            fig.layout["margin"] = {**margin, "t": max(margin.get("t", 0), 56)}
    return sections


SAMPLER_STATS = ("requested_hz", "achieved_hz", "samples", "dropped", "errors", "overflow", "cpu_pct_of_core",
                 "lateness_p99_us")


def sampler_stats(run: RunAnalysis) -> list[Table]:
    """How well each sampler kept its rate (meta.json `samplers`), and the ones that did not run."""
    stats = run.meta.get("samplers") if isinstance(run.meta.get("samplers"), dict) else {}
    rows = [[name, *[s.get(k) for k in SAMPLER_STATS]] for name, s in stats.items() if isinstance(s, dict)]
    tables = []
    if rows:
        classes = ["outlier" if (r[4] or 0) > 0 or r[6] else "" for r in rows]
        tables.append(Table(["sampler", *[k.replace("_", " ") for k in SAMPLER_STATS]], rows, row_classes=classes,
                            title="Samplers", caption="Rows marked ▲ dropped ticks or overflowed."))
    skipped = run.meta.get("samplers_skipped")
    if isinstance(skipped, dict) and skipped:
        tables.append(Table(["sampler", "why it did not run"], [[k, v] for k, v in skipped.items()],
                            title="Samplers not run"))
    return tables
