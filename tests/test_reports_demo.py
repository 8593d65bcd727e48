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
