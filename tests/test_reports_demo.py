"""The demo chain's report: calibration (reference or a bundled run) -> priced policy results -> HTML."""
from __future__ import annotations

import json

import pytest

from sitsprof.reports.demo import demo_report, find_example_run


@pytest.fixture(scope="module")
def workload():
    from sitsprof.policies.sweep import simulate_many
    from sitsprof.policies.traces import generator

    requests = generator.generate_requests(seed=1, duration_s=240.0)
    trace = generator.requests_to_trace(requests, source="test")
    caps = [max(1, trace.n_blocks // 20), max(2, trace.n_blocks // 4)]
    return trace, simulate_many(trace, ["lru", "lirs"], caps)


def pricing(trace, results):
    """The policy half the CLI passes in: the results priced on the calibration the report chose."""
    from sitsprof.policies.demo import policy_results

    return lambda calibration: policy_results(trace, results, calibration)


def test_reference_calibration_is_labelled(workload, tmp_path, monkeypatch):
    monkeypatch.setattr("sitsprof.reports.demo.find_example_run", lambda: None)
    trace, results = workload
    path = demo_report(tmp_path, pricing(trace, results), {"workload": {"requests": trace.n_requests}})
    html = path.read_text()
    assert "GPU figures NOT MEASURED" in html and "hopper-published" in html
    payload = json.loads((tmp_path / "policy-results.json").read_text())
    assert payload["calibration"] == "hopper-published"
    priced = payload["results"]
    assert len(priced) == 4 and all(r["extra"]["p99_ms"] > 0 for r in priced)
    assert payload["decisions"] and {"time", "behaviour"} <= set(payload["decisions"][0])
    assert json.loads((tmp_path / "calibration.json").read_text())["name"] == "hopper-published"


def test_bundled_run_is_calibrated_and_shown(workload, tmp_path):
    from sitsprof.reports.synthetic import make_synthetic_run

    trace, results = workload
    run = make_synthetic_run(tmp_path / "examples", "h200-node", samples=20_000).path
    assert find_example_run(tmp_path / "examples") is None  # synthetic runs are never the bundled example
    path = demo_report(tmp_path / "out", pricing(trace, results), run_dir=run)
    html = path.read_text()
    assert "MEASURED by sitsprof" in html and "Bundled run h200-node" in html
    assert json.loads((tmp_path / "out" / "calibration.json").read_text())["provenance"]["run"] == "h200-node"


def test_no_bundled_run_shows_a_synthetic_gpu_half_labelled_everywhere(workload, tmp_path, monkeypatch):
    """Issue 13: a CPU-only user sees the GPU half of a report, from a generated run, and
    SYNTHETIC is on every section and every figure of it (heading and plot title)."""
    import re

    from sitsprof.reports.analysis import analyze_run
    from sitsprof.reports.demo import SYNTHETIC_RUN, synthetic_sections

    monkeypatch.setattr("sitsprof.reports.demo.find_example_run", lambda: None)
    trace, results = workload
    out = tmp_path / "out"
    for _ in range(2):  # a second demo into the same folder replaces its synthetic run
        path = demo_report(out, pricing(trace, results))
    html = path.read_text()
    assert "are SYNTHETIC: generated from a model" in html
    # the policies are still priced on the reference, never on the synthetic run
    assert json.loads((out / "calibration.json").read_text())["name"] == "hopper-published"
    sections = re.findall(r"<section id=\"[^\"]*\">\s*<h2>(.*?)</h2>(.*?)</section>", html, flags=re.S)
    gpu = [(title, body) for title, body in sections if title.startswith("SYNTHETIC run")]
    assert {"SYNTHETIC run: Summary", "SYNTHETIC run: Latency ladder and tiers"} <= {t for t, _ in gpu}
    figure_titles = [t for _, body in gpu for t in re.findall(r"<h3>(.*?)</h3>\s*<div class=\"plot\"", body)]
    assert len(figure_titles) >= 8
    assert all(t.startswith("SYNTHETIC: ") for t in figure_titles), figure_titles
    # every figure's own plot title too (what an image exported from the plot keeps)
    figs = [f for s in synthetic_sections(analyze_run(out / SYNTHETIC_RUN)) for f in s.figures]
    assert len(figs) == len(figure_titles)
    assert all(f.layout["title"]["text"].startswith("SYNTHETIC") for f in figs)
    assert all(f.title.count("SYNTHETIC") == 1 for f in figs)


def test_synthetic_gpu_half_can_be_left_out_and_never_replaces_other_data(workload, tmp_path, monkeypatch):
    monkeypatch.setattr("sitsprof.reports.demo.find_example_run", lambda: None)
    trace, results = workload
    html = demo_report(tmp_path / "a", pricing(trace, results), gpu_half=False).read_text()
    assert "SYNTHETIC run" not in html and not (tmp_path / "a" / "synthetic-run").exists()
    mine = tmp_path / "b" / "synthetic-run"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("not a run")
    html = demo_report(tmp_path / "b", pricing(trace, results)).read_text()
    assert (mine / "notes.txt").read_text() == "not a run" and "SYNTHETIC run" not in html


def test_demo_says_what_each_file_is_for(cli, tmp_path):
    out = tmp_path / "demo"
    code, text, err = cli("demo", "--duration", "120", "-p", "lru", "--out", str(out))
    assert code == 0, err
    for line in (f"--calibration {out}/calibration.json", f"sitsprof report RUN --policy-results "
                 f"{out}/policy-results.json", f"sitsprof policy simulate {out}/workload.jsonl",
                 "calibration.json     the GPU figures the costs were priced on (hopper-published: not measured)"):
        assert line in text, line
    # and the commands it suggests run
    assert cli("report", str(out / "synthetic-run"), "--policy-results", str(out / "policy-results.json"),
               "-o", str(tmp_path / "r.html"))[0] == 0
    assert cli("policy", "simulate", str(out / "workload.jsonl"), "-p", "lru", "-c", "100", "--calibration",
               str(out / "calibration.json"))[0] == 0
