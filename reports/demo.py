"""The report half of `sitsprof demo`: which GPU figures, and the HTML from the priced results.

`demo_report(out_dir, policy_results, document)` is called by `sitsprof demo` after it has
replayed the three-stack workload through every policy. It

1. picks the GPU figures: a measured run bundled under `examples/` (a real, complete,
   non-synthetic run directory) calibrated with `reports.fromrun`, or else the shipped
   `hopper-published` reference calibration, labelled as such on the report;
2. asks `policy_results(calibration)` for the policy-results document priced on those
   figures (the policy half, `sitsprof.policies.demo.policy_results`, which `cli/demo.py`
   passes in: reports do not run policies);
3. writes `calibration.json`, `policy-results.json` and `report.html` into `out_dir`;
4. with no measured run bundled, shows the GPU half of a report anyway, from a generated run
   (`reports.synthetic`, written to `out_dir/synthetic-run`): every one of its sections and
   figures is labelled SYNTHETIC, and nothing of it prices the policies.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .html import Report, Section, Table, write_html

__all__ = [
    "EXAMPLES",
    "SYNTHETIC_BANNER",
    "SYNTHETIC_LABEL",
    "SYNTHETIC_RUN",
    "calibration_section",
    "choose_calibration",
    "demo_report",
    "find_example_run",
    "synthetic_run",
    "synthetic_sections",
]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SYNTHETIC_RUN = "synthetic-run"
SYNTHETIC_LABEL = "SYNTHETIC"
SYNTHETIC_BANNER = ("The GPU sections (\"SYNTHETIC run\") are SYNTHETIC: generated from a model by sitsprof so a "
                    "CPU-only machine can see what a run report shows; not a measurement, and not used to price "
                    "the policies. `sitsprof run` on a GPU gives the real one.")


def find_example_run(root: Path = EXAMPLES) -> Path | None:
    """The first complete, non-synthetic run directory under `root` (None when there is none)."""
    if not root.is_dir():
        return None
    for meta_path in sorted(root.glob("**/meta.json")):
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("complete") and not meta.get("synthetic") and "schema_version" in meta:
            return meta_path.parent
    return None


def choose_calibration(out_dir: Path, run_dir: Path | None = None) -> tuple[dict, Any, str]:
    """(calibration, RunAnalysis or None, banner): measured from a bundled run, else the reference."""
    from sitsprof.calibration import load_calibration, write_calibration

    from .analysis import analyze_run
    from .errors import IncompleteRunError
    from .fromrun import calibration_from_run

    run_dir = run_dir or find_example_run()
    if run_dir is not None:
        try:
            analysis = analyze_run(run_dir)
            cal = calibration_from_run(analysis, allow_incomplete=True)
            write_calibration(cal, out_dir / "calibration.json")
            return cal, analysis, (f"GPU figures MEASURED by sitsprof: the bundled run {run_dir.name} "
                                   f"({analysis.device.get('name', 'unknown device')}), "
                                   "calibrated by `sitsprof calibrate`.")
        except IncompleteRunError:
            pass
    cal = load_calibration(None)
    write_calibration(cal, out_dir / "calibration.json")
    return cal, None, ("GPU figures NOT MEASURED: no measured run is bundled, so the policy costs use the "
                       "hopper-published reference calibration (published figures, cited below). "
                       "Run `sitsprof run` on a GPU, then `sitsprof calibrate`, for your own.")


def calibration_section(cal: dict) -> Section:
    """What the policy costs ran on: tiers, bandwidth, compute and where each came from."""
    from .tiers import TIER_LABELS

    rows = []
    for tier, entry in cal["latency"].items():
        if entry is None:
            why = cal["provenance"].get("missing", {}).get(tier, "")
            rows.append([TIER_LABELS.get(tier, tier), None, None, None, "–", why])
            continue
        q = entry["quantiles"]
        rows.append([TIER_LABELS.get(tier, tier), q.get("p50"), q.get("p99"), entry["unit"],
                     entry.get("source", "this run"), entry.get("note", "")])
    tables = [Table(["tier", "p50", "p99", "unit", "source", "note"], rows, title="Latency")]
    bw = cal["bandwidth"]
    tables.append(Table(["figure", "value"], [[k, v] for k, v in bw.items()], title="Bandwidth (GB/s)"))
    if "compute" in cal:
        tables.append(Table(["figure", "value"], [[k, v] for k, v in cal["compute"].items()], title="Compute"))
    sources = cal["provenance"].get("sources", [])
    if sources:
        tables.append(Table(["id", "citation"], [[s["id"], s["citation"]] for s in sources], title="Sources"))
    intro = f"{cal['name']}: {cal.get('label', '')} (SM clock {cal['clocks']['sm_mhz']:g} MHz)."
    return Section("Calibration used", intro=intro, tables=tables)


def synthetic_run(out: Path):
    """A generated run directory at `out/synthetic-run` (a previous demo's is replaced; a folder
    there that is not a synthetic run is left alone: None)."""
    import shutil

    from .synthetic import make_synthetic_run

    path = out / SYNTHETIC_RUN
    if path.exists():
        try:
            meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not (isinstance(meta, dict) and meta.get("synthetic")):
            return None
        shutil.rmtree(path)
    return make_synthetic_run(out, SYNTHETIC_RUN, samples=100_000).path


def synthetic_sections(analysis) -> list[Section]:
    """The run report's sections for a synthetic run, SYNTHETIC in every section and figure
    title (the heading and the plot's own title, which an exported image keeps)."""
    from .run_report import mark_synthetic, run_sections

    return mark_synthetic(run_sections(analysis, prefix=f"{SYNTHETIC_LABEL} run"), SYNTHETIC_LABEL)


def demo_report(out_dir, policy_results: Callable[[dict], dict], document: dict | None = None,
                run_dir: Path | None = None, gpu_half: bool = True) -> Path:
    """Write calibration.json, policy-results.json and report.html into `out_dir`; returns the report.

    `policy_results(calibration)` returns the policy-results document priced on `calibration`.
    `gpu_half`: with no measured run bundled, add a SYNTHETIC run's sections (`synthetic_sections`).
    """
    from sitsprof.collectors.rundir import tool_version
    from sitsprof.common import jsonout
    from sitsprof.common.atomic import atomic_write_text, make_folder

    from .policy_report import policy_section
    from .run_report import run_sections

    out = make_folder(out_dir)
    cal, analysis, banner = choose_calibration(out, run_dir)
    payload = policy_results(cal)
    atomic_write_text(out / "policy-results.json", jsonout.dumps(payload, indent=1, default=float) + "\n")

    sections = []
    if document:
        wl = document.get("workload", {})
        facts = [[k.replace("_", " "), v] for k, v in wl.items() if isinstance(v, (int, float, str))]
        facts += [[f"requests: {name}", s.get("requests")] for name, s in (wl.get("stacks") or {}).items()]
        sections.append(Section("Workload", intro="The seeded three-stack mix (qwen2-72b, deepseek-v2, phi-3-mini) "
                                "replayed through every policy; blocks of 512 tokens.",
                                tables=[Table(["", "value"], facts)]))
    policy = policy_section(payload, "the demo's replay, priced by the cost model on the calibration below")
    policy.notes.append("P99 estimates are time to first token per request from the cost model: a hit reads the "
                        "block's KV from HBM, a miss recomputes its prefill, with the GPU figures of the calibration.")
    sections.append(policy)
    sections.append(calibration_section(cal))
    banners = [banner]
    if analysis is not None:
        sections.extend(run_sections(analysis, prefix=f"Bundled run {analysis.name}"))
    elif gpu_half:
        from .analysis import analyze_run

        path = synthetic_run(out)
        if path is not None:
            sections.extend(synthetic_sections(analyze_run(path)))
            banners.append(SYNTHETIC_BANNER)
    report = Report(title="sitsprof demo: KV-cache policies on a three-stack workload",
                    subtitle=f"calibration: {cal['name']}", sections=sections, banners=banners,
                    tool_version=tool_version())
    return write_html(report, out / "report.html")
