"""Build the HTML report's sections (tables and plotly figures) from analysed runs.

`build_report([RunAnalysis, ...], policy_results=None) -> html.Report`; `write_report(paths,
out)` does the whole job for the CLI. With several runs (nodes of a fleet) a comparison
section comes first, with outliers marked (robust z-score over the fleet, see
`fleet_outliers`); per-run detail sections follow for up to `detail_limit` runs (outliers
first).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .analysis import QLABELS, RunAnalysis, analyze_run, clocks_locked
from .tiers import TIER_LABELS
from .html import PALETTE, Figure, Report, Section, Table, line_traces, plot_text, write_html

KIB = 1024


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if abs(v - round(v)) < 0.05 else f"{v:.1f} {unit}"
    return f"{n:.0f} B"


def bytes_axis(values) -> dict:
    """A log axis over byte sizes with ticks at powers of 4 labelled 16 KiB, 1 MiB, ..."""
    values = np.asarray(values, dtype=np.float64)
    values = values[values > 0]
    if values.size == 0:
        return {"type": "log"}
    lo, hi = math.floor(math.log(values.min(), 4)), math.ceil(math.log(values.max(), 4))
    ticks = [4.0 ** k for k in range(lo, hi + 1)]
    return {"type": "log", "tickvals": ticks, "ticktext": [_fmt_bytes(t) for t in ticks],
            "title": {"text": "footprint"}}


def _colour(i: int, n: int) -> str:
    """A sequential blue-to-red colour for item i of n (load levels)."""
    t = 0.0 if n <= 1 else i / (n - 1)
    r, g, b = (int(round(a + (c - a) * t)) for a, c in ((0x1f, 0xd6), (0x77, 0x27), (0xb4, 0x28)))
    return f"rgb({r},{g},{b})"


def _axis_titles(x: str, y: str, **extra) -> dict:
    out = {"xaxis": {"title": {"text": x}}, "yaxis": {"title": {"text": y}}}
    for key, value in extra.items():
        out.setdefault(key, {}).update(value)
    return out


def _run_label(run: RunAnalysis) -> str:
    return run.host if run.host == run.name else f"{run.host} ({run.name})"


# -- one run ----------------------------------------------------------------------------------
def tier_table(run: RunAnalysis, tiers, title: str) -> Table:
    rows = []
    for t in tiers:
        s = t.dist.summary
        rows.append([t.label, f"{_fmt_bytes(t.footprint_lo)} – {_fmt_bytes(t.footprint_hi)}",
                     s["count"], *[s[q] for q in QLABELS], run.to_ns(s["p50"]), run.to_ns(s["p99"])])
    return Table(["tier", "footprints", "samples", *[f"{q} (cycles)" for q in QLABELS], "p50 (ns)", "p99 (ns)"],
                 rows, title=title, caption="Exact quantiles over every recorded access; ns from the SM clock above.")


def summary_section(run: RunAnalysis, title: str) -> Section:
    dev = run.device
    clocks = run.meta.get("clocks") if isinstance(run.meta.get("clocks"), dict) else {}
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
                           "y0": 0, "y1": 1, "fillcolor": PALETTE[i % len(PALETTE)], "opacity": 0.08, "line": {"width": 0}})
            notes.append({"x": math.log10(math.sqrt(t.footprint_lo * t.footprint_hi)), "xref": "x", "yref": "paper",
                          "y": 1.0, "yanchor": "bottom", "showarrow": False,
                          "text": plot_text(t.label)})
        layout = _axis_titles("footprint", "latency (cycles)", xaxis=bytes_axis(fp))
        layout.update(shapes=shapes, annotations=notes)
        figs.append(Figure("Latency ladder", data, layout,
                           caption="Quantiles per footprint; shaded spans are the tiers found by change-point detection."))
    if run.tiers:
        cdf = [{"type": "scatter", "mode": "lines", "name": plot_text(t.label),
                "x": t.dist.cdf_x, "y": t.dist.cdf_p} for t in run.tiers]
        figs.append(Figure("CDF per tier", cdf, _axis_titles("latency (cycles)", "fraction of accesses",
                                                              xaxis={"type": "log"}),
                           caption="Downsampled to a few hundred exact order statistics; the tail keeps its own points."))
        hist = []
        for t in run.tiers:
            edges, counts = t.dist.hist_edges, t.dist.hist_counts
            total = max(int(counts.sum()), 1)
            hist.append({"type": "scatter", "mode": "lines", "line": {"shape": "hv"},
                         "name": plot_text(t.label),
                         "x": edges[:-1], "y": counts / total})
        figs.append(Figure("Histogram per tier", hist, _axis_titles("latency (cycles)", "fraction per bin",
                                                                     xaxis={"type": "log"})))
    return figs


def tlb_figures(run: RunAnalysis) -> tuple[list[Figure], list[Table]]:
    if run.tlb is None or not len(run.tlb):
        return [], []
    data = []
    for stride, sub in run.tlb.groupby("stride_bytes"):
        sub = sub.sort_values("footprint_bytes")
        data.append({"type": "scatter", "mode": "lines+markers", "name": f"stride {_fmt_bytes(stride)}",
                     "x": sub["footprint_bytes"].to_numpy(), "y": sub["p50"].to_numpy()})
    fig = Figure("TLB sweep (P50)", data, _axis_titles("footprint", "latency (cycles)",
                                                      xaxis=bytes_axis(run.tlb["footprint_bytes"])))
    rows = [[_fmt_bytes(s["stride_bytes"]), _fmt_bytes(s["reach_bytes"]), _fmt_bytes(s["step_at_bytes"]),
             s["size"], s["before"], s["after"]] for s in run.tlb_steps]
    table = Table(["stride", "reach (last footprint before the step)", "step at", "step (cycles)",
                   "before (cycles)", "after (cycles)"], rows, title="TLB steps",
                  caption="No public counter reports TLB misses; these steps are measured by the chase.")
    return [fig], [table]


def bandwidth_figures(run: RunAnalysis) -> tuple[list[Figure], list[Table]]:
    bw = run.bandwidth
    if bw is None or not len(bw):
        return [], []
    from .analysis import column

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
    layout = _axis_titles(icol or "setting", "achieved GB/s", xaxis={"type": "log"} if icol else {})
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
                           _axis_titles("achieved bandwidth (fraction of peak)", "latency (cycles)")))
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
                     "line": {"color": _colour(i, len(levels))}})
        rows.append([level, frac.get(level), d.summary["count"], *[d.summary[q] for q in QLABELS], d.summary["mean"]])
    base_label, base = run.replacement_baseline
    fig = Figure("Replacement delay per load level (CDF)", data,
                 _axis_titles("extra latency over an unloaded L2 hit (cycles)", "fraction of re-touches"),
                 caption=f"Baseline: {base_label} = {base:.1f} cycles. Legend: load level and the saturator's "
                         "achieved bandwidth as a share of its peak.")
    table = Table(["level", "bandwidth fraction", "samples", *[f"{q} (cycles)" for q in QLABELS], "mean (cycles)"],
                  rows, title="Replacement delay per load level")
    return [fig], [table]


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


# -- fleet --------------------------------------------------------------------------------------
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
    mixed = len({r.device.get("name") for r in runs}) > 1  # else the device is in the subtitle
    for i, (run, row) in enumerate(zip(runs, metrics)):
        bad = [m for m, f in flags.items() if f[i]]
        if bad:
            outlier_runs.append(i)
        rows.append([run.host, *([run.device.get("name", "unknown")] if mixed else []), run.status,
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
                           _axis_titles("footprint", "latency (cycles)", xaxis=bytes_axis(all_fp)),
                           caption="Outlier runs are drawn dashed and thicker."))
    metric = "HBM p50"
    vals = [row[metric] for row in metrics]
    if any(np.isfinite(vals)):
        colours = ["#D55E00" if i in outlier_runs else "#0072B2" for i in range(len(runs))]
        figs.append(Figure(f"{metric} per host", [{"type": "bar", "x": [plot_text(r.host) for r in runs],
                                                   "y": vals, "marker": {"color": colours}}],
                           _axis_titles("host", "latency (cycles)"),
                           caption="Orange bars are outlier runs."))
    return Section("Fleet comparison", tables=[table], figures=figs), outlier_runs


class ReportInputError(ValueError):
    """An input file the report cannot use; the message names the file and the problem."""

    exit_code = 2


def read_policy_results(path: str | Path) -> Any:
    """The JSON the policy engine wrote, checked enough to render (see `policy_section`)."""
    import json

    path = Path(path)
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReportInputError(f"{path}: not JSON ({exc})") from None
    if not isinstance(payload, (list, dict)):
        raise ReportInputError(f"{path}: expected a list of policy results or an object with 'results'")
    rows = payload if isinstance(payload, list) else payload.get("results", [])
    if not isinstance(rows, list) or any(not isinstance(r, dict) or "policy" not in r for r in rows):
        raise ReportInputError(f"{path}: each policy result must be an object with at least 'policy' "
                               "(as SimResult.to_dict writes)")
    return payload


# -- policy results -----------------------------------------------------------------------------
POLICY_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star", "triangle-down", "cross",
                  "pentagon", "hexagon", "circle-open", "square-open", "diamond-open")


def _policy_trace(policy: str, xs, ys, style: dict) -> dict:
    return {"type": "scatter", "mode": "lines+markers", "name": plot_text(policy), "x": xs, "y": ys,
            "line": {"color": style["color"]}, "marker": {"color": style["color"], "symbol": style["symbol"], "size": 7}}


def policy_section(payload: Any, source: str = "") -> Section:
    """Tables and plots from the policy engine's results (SimResult.to_dict rows).

    Accepts a list of result rows, or an object with `results` (rows), optional `p99` rows
    (policy, capacity, p99_ms ...) and optional `decisions` / `timeline` (SITS controller
    windows: t or window, policy/state, and any numeric columns such as entropy, p99_ms), with
    optional `decisions_capacity` (the capacity, in blocks, the decisions were taken at)).
    """
    if isinstance(payload, list):
        payload = {"results": payload}
    if not isinstance(payload, dict):
        raise ValueError("policy results must be a JSON list of results or an object with 'results'")
    results = payload.get("results") or []
    tables, figs = [], []
    if results:
        rows = []
        by_policy: dict[str, list[dict]] = {}
        for r in results:
            by_policy.setdefault(str(r.get("policy")), []).append(r)
            extra = r.get("extra") or {}
            p99 = r.get("p99_ms", extra.get("p99_ms"))
            rows.append([r.get("policy"), r.get("capacity"), r.get("block_hit_ratio"), r.get("token_hit_ratio"),
                         r.get("prefix_hit_ratio"), r.get("evictions"), p99])
        tables.append(Table(["policy", "capacity (blocks)", "block hit ratio", "token hit ratio",
                             "prefix hit ratio", "evictions", "P99 estimate (ms)"], rows, title="Policy results"))
        # One colour and marker per policy, the same in both plots: with many policies colours
        # come close, and the markers tell them apart where lines meet.
        style = {policy: {"color": PALETTE[i % len(PALETTE)], "symbol": POLICY_SYMBOLS[i % len(POLICY_SYMBOLS)]}
                 for i, policy in enumerate(by_policy)}
        data, curves = [], {}
        for policy, rs in by_policy.items():
            rs = sorted(rs, key=lambda r: r.get("capacity") or 0)
            xs, ys = [r.get("capacity") for r in rs], [r.get("block_hit_ratio") for r in rs]
            curves.setdefault((tuple(xs), tuple(ys)), []).append(policy)
            data.append(_policy_trace(policy, xs, ys, style[policy]))
        same = [names for names in curves.values() if len(names) > 1]
        caption = " ".join(f"{' and '.join(names)} give the same hit ratio at every capacity: their lines coincide."
                           for names in same)
        figs.append(Figure("Hit ratio per capacity", data,
                           _axis_titles("capacity (blocks)", "block hit ratio", xaxis={"type": "log"}),
                           caption=caption))
        p99_data = []
        for policy, rs in by_policy.items():
            pts = [(r.get("capacity"), r.get("p99_ms", (r.get("extra") or {}).get("p99_ms"))) for r in rs]
            pts = sorted(p for p in pts if isinstance(p[1], (int, float)))
            if pts:
                p99_data.append(_policy_trace(policy, [p[0] for p in pts], [p[1] for p in pts], style[policy]))
        if p99_data:
            figs.append(Figure("P99 estimate per capacity", p99_data,
                               _axis_titles("capacity (blocks)", "P99 time to first token (ms)",
                                            xaxis={"type": "log"})))
    timeline = payload.get("decisions") or payload.get("timeline") or []
    if timeline:
        tkey = next((k for k in ("time", "t", "t_s", "time_s", "window") if k in timeline[0]), None)
        xs = [row.get(tkey) for row in timeline] if tkey else list(range(len(timeline)))
        numeric = [k for k, v in timeline[0].items() if k != tkey and isinstance(v, (int, float))
                   and not isinstance(v, bool)]
        # Large-valued series (milliseconds) on the left axis, small ones (entropy, scores) on the right.
        big = {k for k in numeric if max(abs(float(row.get(k) or 0)) for row in timeline) > 10}
        data = [{"type": "scatter", "mode": "lines", "name": plot_text(k if k in big else f"{k} (right axis)", 60),
                 "x": xs, "y": [row.get(k) for row in timeline], "yaxis": "y" if k in big else "y3"}
                for k in numeric]
        state_key = next((k for k in ("policy", "state", "behaviour", "to", "action", "decision")
                          if k in timeline[0]), None)
        if state_key:
            states = [str(row.get(state_key)) for row in timeline]
            changes = [i for i in range(len(states)) if i == 0 or states[i] != states[i - 1]]
            data.append({"type": "scatter", "mode": "markers+text", "name": plot_text(state_key),
                         "x": [xs[i] for i in changes], "y": [0] * len(changes), "yaxis": "y2",
                         "text": [plot_text(states[i]) for i in changes], "textposition": "top center",
                         "marker": {"symbol": "triangle-up", "size": 10, "color": "#D55E00"}})
        layout = _axis_titles(f"trace {tkey} (s)" if tkey in ("time", "t", "t_s", "time_s") else (tkey or "window"),
                              ", ".join(sorted(big)) or "value")
        layout["xaxis"]["anchor"] = "y2"
        layout["yaxis"]["domain"] = [0.25, 1.0]
        layout["yaxis2"] = {"domain": [0.0, 0.15], "showticklabels": False, "range": [-0.5, 1.5]}
        if len(big) < len(numeric):
            layout["yaxis3"] = {"overlaying": "y", "side": "right", "showgrid": False, "automargin": True,
                                "tickmode": "auto", "nticks": 6,
                                "title": {"text": plot_text(", ".join(k for k in numeric if k not in big), 80)}}
        layout["legend"] = {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "xanchor": "left"}
        layout["margin"] = {"t": 60, "r": 60 if len(big) < len(numeric) else 10}
        at = payload.get("decisions_capacity")
        caption = ("One point per controller window" + (f", at capacity {at:,} blocks" if isinstance(at, int) else "")
                   + ". Triangles mark the behaviour chosen at the first window and at each change.")
        figs.append(Figure("SITS decision timeline", data, layout, height=440, wide=True, caption=caption))
    intro = f"From {source}." if source else ""
    if not figs:
        intro += " The file held no results."
    return Section("Policy results", intro=intro.strip(), tables=tables, figures=figs)


# -- whole report -------------------------------------------------------------------------------
def build_report(runs: list[RunAnalysis], policy_results: Any = None, policy_source: str = "",
                 detail_limit: int = 4, title: str | None = None, banners: Sequence[str] = ()) -> Report:
    from sitsprof.collectors.rundir import tool_version

    sections: list[Section] = []
    banners = list(banners)
    if any(r.synthetic for r in runs):
        banners.append("SYNTHETIC DATA: generated from a model by sitsprof for tests and demos; not a measurement.")
    for r in runs:
        if not r.complete:
            banners.append(f"Run {r.name} is incomplete (status: {r.status}); missing parts are listed in its summary.")
    detail = list(range(len(runs)))
    if len(runs) > 1:
        fleet, outliers = fleet_section(runs)
        sections.append(fleet)
        detail = (outliers + [i for i in range(len(runs)) if i not in outliers])[:detail_limit]
        if len(runs) > detail_limit:
            fleet.notes.append(f"Details below for {len(detail)} of {len(runs)} runs (outliers first): "
                               + ", ".join(runs[i].host for i in detail) + ".")
    for i in detail:
        sections.extend(run_sections(runs[i], prefix=_run_label(runs[i]) if len(runs) > 1 else ""))
    if policy_results is not None:
        sections.append(policy_section(policy_results, policy_source))
    if title is None:
        title = "sitsprof report: " + (_run_label(runs[0]) if len(runs) == 1 else f"{len(runs)} runs")
    subtitle = ", ".join(sorted({r.device.get("name", "unknown device") for r in runs}))
    return Report(title=title, subtitle=subtitle, sections=sections, banners=banners, tool_version=tool_version())


def write_report(run_paths: Sequence[str | Path], out: str | Path, policy_results_path: str | Path | None = None,
                 detail_limit: int = 4) -> Path:
    """Analyse each run directory and write one self-contained HTML report; returns its path."""
    payload = None if policy_results_path is None else read_policy_results(policy_results_path)
    runs = [analyze_run(p) for p in run_paths]
    report = build_report(runs, payload, policy_source=Path(policy_results_path).name if policy_results_path else "",
                          detail_limit=detail_limit)
    return write_html(report, out)
