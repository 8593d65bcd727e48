"""The report over runs: fleet comparison with outliers, policy results, the CLI, escaping."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sitsprof.cli.main import main
from sitsprof.reports.analysis import analyze_run
from sitsprof.reports.fleet import fleet_outliers
from sitsprof.reports.html import render_html
from sitsprof.reports.policy_report import policy_section
from sitsprof.reports.report import build_report
from sitsprof.reports.synthetic import make_fleet, make_synthetic_run

HOSTILE = '<script>alert(1)</script>'


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    parent = tmp_path_factory.mktemp("fleet")
    hosts = ["node-01", "node-02", "node-03", "node-04", f"node-05{HOSTILE}"]
    return [r.path for r in make_fleet(parent, hosts, samples=20_000, outlier="node-03")]


def test_fleet_outliers_rule():
    assert fleet_outliers([648, 647, 649, 648, 726]) == [False, False, False, False, True]
    assert fleet_outliers([648, 648, 648, 648, 650]) == [False] * 5  # within 3%: noise, not an outlier
    assert fleet_outliers([1.0, float("nan"), 9.0]) == [False] * 3   # too few finite values
    assert fleet_outliers([648, 648, 648, 700])[-1] is True          # MAD 0 but 8% off


def test_fleet_report_marks_the_slow_node(fleet, html_refs):
    runs = [analyze_run(p) for p in fleet]
    report = build_report(runs, detail_limit=2)
    fleet_table = report.sections[0].tables[0]
    marked = [row[0] for row, cls in zip(fleet_table.rows, fleet_table.row_classes) if cls == "outlier"]
    assert marked == ["node-03"]
    titles = [s.title for s in report.sections]
    assert titles[1].startswith("SYNTHETIC node-03")  # a generated fleet: every title says so
    assert any("Details below for 2 of 5" in n for n in report.sections[0].notes)
    html = render_html(report)
    assert HOSTILE not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert html_refs(html).external == []


def _policy_payload():
    from sitsprof.policies.engine.replay import as_trace
    from sitsprof.policies.sweep import simulate_many

    rng = np.random.default_rng(0)
    trace = as_trace(rng.zipf(1.3, 5_000).astype(np.int32) % 2_000)
    results = [r.to_dict() for r in simulate_many(trace, ["lru", "fifo"], [50, 500])]
    for r in results:
        r["extra"]["p99_ms"] = 100.0 / (1 + r["block_hit_ratio"])
    decisions = [{"t": float(i), "policy": "lirs" if i < 5 else "sits", "entropy": 2.0 + i / 3, "p99_ms": 40.0 + i}
                 for i in range(10)]
    return {"results": results, "decisions": decisions}


def test_policy_section():
    section = policy_section(_policy_payload(), "policy.json")
    assert [f.title for f in section.figures] == ["Hit ratio per capacity", "P99 estimate per capacity",
                                                 "SITS decision timeline"]
    assert len(section.tables[0].rows) == 4
    marks = section.figures[2].data[-1]
    assert marks["text"] == ["lirs", "sits"]
    assert policy_section([], "empty.json").intro.endswith("held no results.")
    with pytest.raises(ValueError):
        policy_section("nonsense")


def test_cli_report(fleet, tmp_path, capsys):
    pol = tmp_path / "policy.json"
    pol.write_text(json.dumps(_policy_payload()))
    out = tmp_path / "fleet.html"
    assert main(["report", *map(str, fleet), "-o", str(out), "--policy-results", str(pol), "--detail", "1"]) == 0
    assert "5 runs" in capsys.readouterr().out
    html = out.read_text()
    assert "Fleet comparison" in html and "Policy results" in html and out.stat().st_size < 10e6
    assert main(["report", str(tmp_path / "missing-run"), "-o", str(tmp_path / "x.html")]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["report", str(fleet[0]), "-o", str(tmp_path / "y.html"), "--policy-results", str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err


def test_incomplete_run_is_bannered(tmp_path):
    run = make_synthetic_run(tmp_path, "half", samples=5_000, parts=("latency",), complete=False)
    report = build_report([analyze_run(run.path)])
    assert any("incomplete" in b for b in report.banners) and any("SYNTHETIC" in b for b in report.banners)
    missing = [t for t in report.sections[0].tables if t.title == "Not in this run"][0]
    assert {row[0] for row in missing.rows} == {"tlb", "bandwidth", "loaded"}


def test_record_run_shows_timelines_and_sampler_health(tmp_path):
    import pandas as pd

    from sitsprof.collectors.rundir import RunDirectory

    run = RunDirectory.create(tmp_path, "rec", meta={
        "kind": "record", "workload": {"command": ["python", "train.py"], "exit_code": 0, "seconds": 3.0},
        "samplers": {"nvml": {"requested_hz": 1000, "achieved_hz": 998.0, "samples": 2994, "dropped": 6,
                              "errors": 0}},
        "samplers_skipped": {"gpm": "GPM needs a Hopper GPU"}})
    t = np.arange(3000, dtype=np.int64) * 1_000_000
    run.write_table("nvml", pd.DataFrame({"t_ns": t, "tick": np.arange(3000), "read_ns": 5,
                                          "sm_clock_mhz": 1980.0, "power_w": np.linspace(100, 300, 3000)}),
                    kind="sampler")
    run.finish()
    res = analyze_run(run.path)
    assert res.missing == {} and res.clock["max_drift_pct"] == 0.0
    report = build_report([res])
    titles = [s.title for s in report.sections]
    assert titles == ["Summary", "Sampler timelines"]
    facts = dict((r[0], r[1]) for r in report.sections[0].tables[0].rows)
    assert facts["recorded command"] == "python train.py"
    stats = report.sections[1].tables
    assert stats[0].row_classes == ["outlier"] and stats[1].rows == [["gpm", "GPM needs a Hopper GPU"]]


def test_sampler_labels_carry_units():
    from sitsprof.reports.run_report import sampler_label

    assert sampler_label("power_w") == "power (W)"
    assert sampler_label("gpm_dram_bw_util_pct") == "HBM bandwidth utilisation (%)"
    assert sampler_label("fan_speed_pct") == "fan speed (%)"
    assert sampler_label("dram__bytes_read.sum") == "dram__bytes_read.sum"  # CUPTI names stay as they are


def test_policy_plots_say_which_lines_coincide_and_at_what_capacity():
    payload = _policy_payload()
    twin = [dict(r, policy="lru-twin") for r in payload["results"] if r["policy"] == "lru"]
    payload["results"] += twin
    payload["decisions_capacity"] = 500
    section = policy_section(payload, "policy.json")
    hit, p99, timeline = section.figures
    assert "lru and lru-twin give the same hit ratio" in hit.caption
    markers = {d["name"]: d["marker"] for d in hit.data}
    assert len({m["symbol"] for m in markers.values()}) == 3  # lines that meet stay apart by marker
    assert {d["name"]: d["marker"] for d in p99.data} == markers  # the same style in both plots
    assert "at capacity 500 blocks" in timeline.caption
    assert timeline.layout["yaxis3"]["title"]["text"] == "entropy"
