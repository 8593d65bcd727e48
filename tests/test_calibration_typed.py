"""The typed `Calibration` (calibration/typed.py): its figures are the ones the cost and step
models used to read by key, it round-trips through JSON and pickle, and a command reads and
validates its calibration file once however many (policy, capacity) runs price on it."""
from __future__ import annotations

import copy
import json
import pickle

import pytest

from sitsprof.calibration import Calibration, CalibrationError, load_calibration, reference_path
from sitsprof.calibration import io as cal_io
from sitsprof.calibration import typed as cal_typed

FIT = {"l0": 700.0, "a": 90.0, "u_max": 1.2, "b": 1.3}


def _doc_with_curve_and_delay() -> dict:
    doc = copy.deepcopy(load_calibration())
    doc["loaded_latency"] = [{"tier": "hbm", "unit": "cycles", "peak_gbs": 3300.0, "fit_p50": FIT,
                              "points": [{"bandwidth_fraction": f, "quantiles": {"p50": 650 + 400 * f}}
                                         for f in (0.1, 0.5, 0.9)]}]
    doc["replacement_delay"] = {"unit": "cycles", "levels": [
        {"level": 0, "bandwidth_fraction": 0.6, "hit_cycles": 280.0,
         "residency": {"time_ns": 4000.0, "bound": "=", "curve": [{"age_ns": 100.0, "resident_fraction": 0.9},
                                                                  {"resident_fraction": 0.5}]},
         "delay": {"quantiles": {"p50": 300.0, "p90": 420.0}, "samples": 10,
                   "histogram": {"edges": [0.0, 200.0, 600.0], "counts": [3, 7]}}},
        {"level": 1, "bandwidth_fraction": 0.1, "hit_cycles": 270.0, "residency": {"time_ns": None},
         "delay": None}]}
    doc["device"].pop("sm_count")
    return doc


def test_figures_are_the_documents_own_read_independently():
    """Each attribute against the file's numbers worked out here by hand (the key reads the
    cost model and the step model did before the object existed)."""
    doc = _doc_with_curve_and_delay()
    cal = Calibration.from_json(doc)
    mhz = doc["clocks"]["sm_mhz"]
    assert cal.name == "hopper-published" and cal.kind == "published" and cal.sm_mhz == mhz
    assert cal.sm_count is None
    assert cal.hbm_read_bps == doc["bandwidth"]["hbm_read_gbs"] * 1e9
    assert cal.hbm_write_bps == doc["bandwidth"]["hbm_write_gbs"] * 1e9
    assert cal.host_bps == doc["bandwidth"]["host_to_device_gbs"] * 1e9
    assert cal.hbm_latency_s == 650 * 1e3 / mhz * 1e-9
    assert cal.flops == 989.0 * 1e12 * 0.5
    assert cal.latency_ns("l2_near") == 280 * 1e3 / mhz
    assert cal.latency_ns("hbm", "p99") == cal.latency_ns("hbm", "p50")  # only a median published
    with pytest.raises(CalibrationError, match="latency.tlb_miss"):
        cal.latency_ns("tlb_miss")
    curve = cal.hbm_curve
    assert curve.unit_s == 1e-6 / mhz and curve.peak_bps == 3300.0 * 1e9 and curve.peak_given
    assert curve.fractions == (0.1, 0.5, 0.9) and curve.p50_s[1] == 850 * (1e-6 / mhz)
    assert (curve.fit_p50.l0, curve.fit_p50.a, curve.fit_p50.u_max, curve.fit_p50.b) == (700.0, 90.0, 1.2, 1.3)
    assert cal.delay_unit_s == 1e-6 / mhz
    first, second = cal.delay_levels
    assert first.residency_curve == ((100.0, 0.9),)  # a point without an age is not on the curve
    assert first.delay_histogram == ((0.0, 200.0, 600.0), (3, 7)) and first.delay_quantiles["p90"] == 420.0
    assert second.delay_quantiles is None and second.residency_time_ns is None
    bare = load_calibration()
    del bare["bandwidth"]["hbm_write_gbs"], bare["bandwidth"]["host_to_device_gbs"], bare["compute"]
    cal = Calibration.from_json(bare)
    assert cal.hbm_write_bps == cal.hbm_read_bps and cal.host_bps == 0.0 and cal.flops is None
    assert cal.hbm_curve is None and cal.delay_levels == ()
    with pytest.raises(CalibrationError, match="^compute"):
        cal.require_flops()


def test_json_and_pickle_round_trips_and_of_reads_nothing_again(tmp_path):
    doc = _doc_with_curve_and_delay()
    cal = Calibration.from_json(doc)
    assert Calibration.from_json(cal.to_json()) == cal and cal.to_json() == doc
    cal.to_json()["name"] = "changed"  # a copy: the object keeps its document
    assert cal.name == cal.to_json()["name"] == "hopper-published"
    again = pickle.loads(pickle.dumps(cal))
    assert again == cal and again.hbm_curve == cal.hbm_curve and again.delay_levels == cal.delay_levels
    assert Calibration.of(cal) is cal
    assert Calibration.of(None) == Calibration.load(reference_path()) == Calibration.of("hopper-published")
    cal.save(tmp_path / "c.json")
    assert Calibration.load(tmp_path / "c.json") == cal
    assert json.loads((tmp_path / "c.json").read_text()) == doc
    with pytest.raises(CalibrationError, match="expected a Calibration"):
        Calibration.of(3.5)
    bad = copy.deepcopy(doc)
    bad["latency"]["hbm"]["unit"] = "parsecs"
    with pytest.raises(CalibrationError, match="latency.hbm.unit"):
        Calibration.from_json(bad)


@pytest.fixture
def validations(monkeypatch):
    """Counts every validation of a calibration document, through a file or a dict."""
    seen = []

    def counting(obj):
        seen.append(obj.get("name") if isinstance(obj, dict) else obj)
        return real(obj)

    real = cal_io.validate_calibration
    monkeypatch.setattr(cal_io, "validate_calibration", counting)
    monkeypatch.setattr(cal_typed, "validate_calibration", counting)
    return seen


@pytest.fixture(scope="module")
def replay_trace(tmp_path_factory):
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    return write_mooncake_jsonl(generate_requests(seed=2, duration_s=20.0), tmp_path_factory.mktemp("t") / "w.jsonl")


def _counted(cli, validations, tmp_path, *args):
    """`cli(*args, --calibration FILE, --json)` with FILE the reference renamed "counted",
    validations counted from here."""
    path = tmp_path / "cal.json"
    doc = load_calibration()
    doc["name"] = "counted"
    path.write_text(json.dumps(doc))
    validations.clear()
    return cli(*args, "--calibration", str(path), "--json")


def test_a_2x2_replay_reads_the_calibration_once(cli, replay_trace, tmp_path, validations):
    """issue 24: `policy replay -p lru,fifo -c A,B --calibration FILE` read and validated the
    file once per (policy, capacity), 4 times; now once, at the CLI's edge."""
    code, out, err = _counted(cli, validations, tmp_path, "policy", "replay", str(replay_trace), "-p", "lru,fifo",
                              "-c", "1500,3000")
    assert code == 0, err
    rows = json.loads(out)["replay"]
    assert [(r["policy"], r["capacity"]) for r in rows] == [("lru", 1500), ("lru", 3000), ("fifo", 1500),
                                                            ("fifo", 3000)]
    assert validations == ["counted"]


def test_a_2x2_simulate_reads_the_calibration_once(cli, replay_trace, tmp_path, validations):
    code, out, err = _counted(cli, validations, tmp_path, "policy", "simulate", str(replay_trace), "-p", "lru,sits",
                              "-c", "10%,50%")
    assert code == 0, err
    results = json.loads(out)["results"]
    assert len(results) == 4 and {r["extra"]["cost"]["calibration"] for r in results} == {"counted"}
    assert validations == ["counted"]
