"""Calibration from a run: schema v1 round trip into the policy engine, refusal of incomplete runs, CLI."""
from __future__ import annotations

import json

import pytest

from sitsprof.calibration import load_calibration, validate_calibration
from sitsprof.cli.main import main
from sitsprof.reports.errors import IncompleteRunError
from sitsprof.reports.fromrun import calibrate, calibration_from_run
from sitsprof.reports.synthetic import make_synthetic_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    parent = tmp_path_factory.mktemp("runs")
    return {
        "full": make_synthetic_run(parent, "full", seed=1, samples=40_000).path,
        "partial": make_synthetic_run(parent, "partial", seed=2, samples=20_000, parts=("latency",),
                                      complete=False).path,
    }


def test_round_trip_into_the_policy_engine(runs, tmp_path):
    from sitsprof.calibration import Calibration
    from sitsprof.policies.cost.costmodel import CostModel

    path, cal = calibrate(runs["full"], tmp_path / "cal.json")
    loaded = load_calibration(path)
    assert loaded == json.loads(json.dumps(cal))
    # a synthetic run's calibration is never marked measured (tests/test_consistency.py)
    assert loaded["provenance"]["kind"] == "synthetic" and loaded["provenance"]["run"] == "full"
    assert loaded["measured"] is False
    assert loaded["provenance"]["device_uuid"] == "GPU-synthetic-0001"
    assert loaded["synthetic"] is True and "SYNTHETIC" in loaded["label"]
    assert loaded["latency"]["hbm"]["quantiles"]["p50"] == pytest.approx(648, rel=0.03)
    assert loaded["latency"]["tlb_miss"]["quantiles"]["p50"] > loaded["latency"]["l2_near"]["quantiles"]["p50"]
    assert loaded["loaded_latency"][0]["tier"] == "hbm" and len(loaded["loaded_latency"][0]["points"]) == 10
    assert len(loaded["replacement_delay"]["levels"]) == 10
    gpu = Calibration.load(str(path))
    assert gpu.hbm_read_bps == pytest.approx(loaded["bandwidth"]["hbm_read_gbs"] * 1e9)
    assert gpu.hbm_latency_s == pytest.approx(loaded["latency"]["hbm"]["quantiles"]["p50"] / 1980 * 1e-6)
    assert "compute" in loaded["provenance"]["missing"]  # copied from the reference, and said so
    CostModel(calibration=str(path))


def test_incomplete_run_refused_with_what_is_missing(runs):
    with pytest.raises(IncompleteRunError) as err:
        calibration_from_run(runs["partial"])
    msg = str(err.value)
    assert "did not finish" in msg and "TLB sweep" in msg and "bandwidth" in msg and "--allow-incomplete" in msg


def test_allow_incomplete_writes_a_valid_labelled_file(runs, tmp_path):
    cal = calibration_from_run(runs["partial"], allow_incomplete=True)
    validate_calibration(cal)
    assert "hopper-published" in cal["provenance"]["missing"]["bandwidth"]
    assert "NOT MEASURED" in cal["bandwidth"]["note"]
    assert cal["loaded_latency"] == [] and cal["provenance"]["incomplete"]


def test_no_hbm_tier_is_refused_even_when_allowed(tmp_path):
    run = make_synthetic_run(tmp_path, "tlbonly", samples=5_000, parts=("tlb",))
    with pytest.raises(IncompleteRunError, match="HBM latency"):
        calibration_from_run(run.path, allow_incomplete=True)


def test_cli_calibrate(runs, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["calibrate", str(runs["full"]), "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out and load_calibration(out)
    assert main(["calibrate", str(runs["partial"]), "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sitsprof: error:") and "missing" in err and len(err.strip().splitlines()) == 1
    assert main(["calibrate", str(runs["partial"]), "-o", str(tmp_path / "p.json"), "--allow-incomplete"]) == 0
    assert main(["calibrate", str(tmp_path / "nope"), "-o", str(tmp_path / "n.json")]) == 2


def test_negative_fast_hits_fold_into_a_valid_histogram():
    import numpy as np

    from sitsprof.calibration.schema import _histogram
    from sitsprof.reports.analysis import Distribution
    from sitsprof.reports.fromrun import nonnegative_histogram

    values = np.sort(np.random.default_rng(0).normal(30, 12, 10_000))  # some below zero
    dist = Distribution.of(values, presorted=True)
    assert dist.hist_edges[0] < 0
    edges, counts = nonnegative_histogram(dist.hist_edges, dist.hist_counts)
    assert edges[0] == 0.0 and sum(counts) == values.size and len(edges) == len(counts) + 1
    _histogram({"edges": edges, "counts": counts}, "latency.l1.histogram")  # schema v1 accepts it


def test_cli_dash_writes_the_document_to_stdout(runs, tmp_path, capsys, monkeypatch):
    """`-o -` is standard output, as users of `--json` pipes expect (it wrote a file named '-'):
    stdout holds the document alone, the summary line goes to stderr, no file is left behind."""
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", str(runs["full"]), "-o", "-"]) == 0
    out, err = capsys.readouterr()
    doc = validate_calibration(json.loads(out))
    to_file = load_calibration(calibrate(runs["full"], tmp_path / "c.json")[0])
    for d in (doc, to_file):
        d["provenance"].pop("created_at")
    assert doc == to_file
    assert err.startswith("wrote standard output") and not (tmp_path / "-").exists()
    assert main(["report", str(runs["full"]), "-o", "-"]) == 0
    out, err = capsys.readouterr()
    assert out.lstrip().lower().startswith("<!doctype html") and out.rstrip().endswith("</html>")
    assert err.startswith("wrote standard output") and not (tmp_path / "-").exists()


@pytest.mark.skipif(not __import__("os").path.exists("/dev/full"), reason="no /dev/full on this system")
def test_cli_dash_onto_a_full_stdout_is_one_line(runs):
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "sitsprof.cli.main", "calibrate", str(runs["full"]), "-o", "-"],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "standard output" in lines[0] and "Traceback" not in done.stderr
