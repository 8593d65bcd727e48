"""The HTML report of one or several runs: the sections put together and written.

`build_report([RunAnalysis, ...], policy_results=None) -> html.Report`; `write_report(paths,
out)` does the whole job for the CLI. With several runs (nodes of a fleet) the comparison
section comes first (`fleet.py`, outliers marked); per-run detail sections (`run_report.py`)
follow for up to `detail_limit` runs (outliers first); the policy engine's results
(`policy_report.py`) come last.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sitsprof.policies.engine.results import read_results

from .analysis import RunAnalysis, analyze_run
from .fleet import fleet_section
from .html import Report, Section, write_html
from .policy_report import policy_section
from .run_report import mark_synthetic, run_sections

__all__ = ["PolicyResultsList", "build_report", "write_report"]


def _run_label(run: RunAnalysis) -> str:
    return run.host if run.host == run.name else f"{run.host} ({run.name})"


def build_report(runs: list[RunAnalysis], policy_results: Any = None, policy_source: str = "",
                 detail_limit: int = 4, title: str | None = None, banners: Sequence[str] = ()) -> Report:
    from sitsprof.collectors.rundir import tool_version

    sections: list[Section] = []
    banners = list(banners)
    if any(r.synthetic for r in runs):
        banners.append("SYNTHETIC DATA: generated from a model by sitsprof for tests and demos; not a measurement.")
    for payload in (policy_results if isinstance(policy_results, PolicyResultsList) else [policy_results]):
        verdict = payload.get("verdict") if isinstance(payload, dict) else None
        if isinstance(verdict, dict) and isinstance(verdict.get("lines"), list):  # policy replay's answer, on top
            banners.append(" ".join(str(line).strip() for line in verdict["lines"][:2]))
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
        if runs[i].synthetic:  # every title says so (the README's promise), not the banner alone
            label = _run_label(runs[i]) if len(runs) > 1 else "run"
            sections.extend(mark_synthetic(run_sections(runs[i], prefix=f"SYNTHETIC {label}")))
        else:
            sections.extend(run_sections(runs[i], prefix=_run_label(runs[i]) if len(runs) > 1 else ""))
    if policy_results is not None:
        # several files (--policy-results repeated): one section each, named by its file
        many = isinstance(policy_results, PolicyResultsList)
        for payload, source in (zip(policy_results, policy_source) if many else [(policy_results, policy_source)]):
            section = policy_section(payload, source)
            if many:
                section.title = f"{section.title}: {source}"
            sections.append(section)
    if title is None:
        title = "sitsprof report: " + (_run_label(runs[0]) if len(runs) == 1 else f"{len(runs)} runs")
    # str: meta.json may hold any value there (a number, a list)
    subtitle = ", ".join(sorted({str(r.device.get("name", "unknown device")) for r in runs}))
    return Report(title=title, subtitle=subtitle, sections=sections, banners=banners, tool_version=tool_version())


class PolicyResultsList(list):
    """Several policy-results payloads (`--policy-results` repeated), one report section each;
    `build_report`'s `policy_source` is then the list of their names."""


def write_report(run_paths: Sequence[str | Path], out: str | Path,
                 policy_results_path: str | Path | Sequence[str | Path] | None = None, detail_limit: int = 4) -> Path:
    """Analyse each run directory and write one self-contained HTML report; returns its path.
    `policy_results_path`: one file, or several (each its own section; two with the same file
    name are refused, since their sections could not be told apart)."""
    paths = ([] if policy_results_path is None else [policy_results_path]
             if isinstance(policy_results_path, (str, Path)) else list(policy_results_path))
    names = [Path(p).name for p in paths]
    if len(set(names)) < len(names):
        from .errors import ReportError

        twice = next(n for n in names if names.count(n) > 1)
        raise ReportError(f"--policy-results names {twice} twice: give each file once (files of the same name "
                          "in other folders: copy one under another name)")
    if len(paths) > 1:
        payload, source = PolicyResultsList(read_results(p) for p in paths), names
    else:
        payload = read_results(paths[0]) if paths else None
        source = names[0] if names else ""
    runs = [analyze_run(p) for p in run_paths]
    report = build_report(runs, payload, policy_source=source, detail_limit=detail_limit)
    return write_html(report, out)
