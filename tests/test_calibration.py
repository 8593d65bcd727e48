"""Calibration schema v1: the reference file loads, and each kind of bad file is refused
with a message that names the offending field."""
from __future__ import annotations

import copy
import json

import pytest

from sitsprof.calibration import (
    CalibrationError,
    latency_ns,
    load_calibration,
    reference_path,
    validate_calibration,
    write_calibration,
)


@pytest.fixture(scope="module")
def reference():
    return load_calibration()


def test_reference_is_published_not_measured(reference):
    assert reference["name"] == "hopper-published"
    assert reference["provenance"]["kind"] == "published"
    assert reference["measured"] is False
    assert "NOT MEASURED HERE" in reference["label"]
    ids = {s["id"] for s in reference["provenance"]["sources"]}
    for tier, entry in reference["latency"].items():
        if entry is not None:
            assert entry["source"] in ids, tier


def test_cycles_convert_to_ns_with_sm_clock(reference):
    # 650 cycles at 1980 MHz
    assert latency_ns(reference, "hbm") == pytest.approx(650 / 1.98)
    # only p50 is published: asking for p99 falls back to it, never invents a tail
    assert latency_ns(reference, "hbm", "p99") == latency_ns(reference, "hbm", "p50")
    with pytest.raises(CalibrationError, match="latency.tlb_miss"):
        latency_ns(reference, "tlb_miss")


def _measured(reference):
    obj = copy.deepcopy(reference)
    obj["provenance"] = {"kind": "measured", "created_at": "2026-11-29T00:00:00Z", "run": "runs/x", "sources": []}
    for tier in ("l1", "l2_near", "l2_far", "hbm", "tlb_miss"):
        obj["latency"][tier] = {
            "unit": "ns",
            "quantiles": {"p50": 100.0, "p90": 120.0, "p99": 150.0},
            "histogram": {"edges": [90.0, 110.0, 160.0], "counts": [50, 50]},
        }
    obj["loaded_latency"] = [
        {"tier": "hbm", "unit": "ns", "points": [
            {"bandwidth_fraction": 0.0, "quantiles": {"p50": 500.0, "p99": 700.0}},
            {"bandwidth_fraction": 0.9, "quantiles": {"p50": 900.0, "p99": 2000.0}},
        ]}
    ]
    obj["compute"].pop("source")
    return obj


def test_measured_roundtrip(tmp_path, reference):
    obj = _measured(reference)
    path = write_calibration(obj, tmp_path / "cal.json")
    assert load_calibration(path) == obj
    assert latency_ns(obj, "hbm", "p99") == 150.0


def test_written_file_is_shareable_and_leaves_no_temporary(tmp_path, reference):
    """Calibration files are handed around a fleet: same permissions as any file the user
    writes (umask), not a temporary file's private 0600, and no leftover temporary."""
    import os

    old = os.umask(0o022)
    try:
        path = write_calibration(_measured(reference), tmp_path / "cal.json")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["cal.json"]


def _set(obj, dotted, value):
    keys = dotted.split(".")
    for k in keys[:-1]:
        obj = obj[int(k)] if isinstance(obj, list) else obj[k]
    if value is KeyError:
        del obj[keys[-1]]
    elif isinstance(obj, list):
        obj[int(keys[-1])] = value
    else:
        obj[keys[-1]] = value


BAD = [
    ("schema_version", 2, "schema_version"),
    ("device", KeyError, "device"),
    ("device.name", "", "device.name"),
    ("clocks.sm_mhz", -5, "clocks.sm_mhz"),
    ("clocks.locked", "yes", "clocks.locked"),
    ("provenance.kind", "guessed", "provenance.kind"),
    ("provenance.run", KeyError, "provenance.run"),
    ("latency.l2_far", KeyError, "latency.l2_far"),
    ("latency.hbm", None, "latency.hbm"),
    ("latency.l1", None, "provenance.missing.l1"),
    ("latency.l1.unit", "furlongs", "latency.l1.unit"),
    ("latency.hbm.quantiles.p50", KeyError, "latency.hbm.quantiles.p50"),
    ("latency.hbm.quantiles.p99", 10.0, "latency.hbm.quantiles.p99"),
    ("latency.hbm.quantiles.p90", float("nan"), "latency.hbm.quantiles.p90"),
    ("latency.l2_near.histogram", None, "latency.l2_near.histogram"),
    ("latency.l2_near.histogram.counts", [1], "latency.l2_near.histogram.counts"),
    ("latency.l2_near.histogram.edges", [90.0, 80.0, 160.0], "latency.l2_near.histogram.edges[1]"),
    ("latency.tlb_miss.histogram.counts", [1, -1], "latency.tlb_miss.histogram.counts[1]"),
    ("bandwidth.hbm_read_gbs", 0, "bandwidth.hbm_read_gbs"),
    ("bandwidth.nvlink_gbs", 900, "bandwidth.nvlink_gbs"),
    ("loaded_latency", {}, "loaded_latency"),
    ("loaded_latency.0.points.1.bandwidth_fraction", 0.0, "loaded_latency[0].points[1].bandwidth_fraction"),
    ("loaded_latency.0.tier", "l3", "loaded_latency[0].tier"),
    ("compute.achieved_fraction", 1.5, "compute.achieved_fraction"),
]


@pytest.mark.parametrize("dotted,value,field", BAD, ids=[b[0] + ("-del" if b[1] is KeyError else "") for b in BAD])
def test_invalid_files_are_refused_naming_the_field(tmp_path, reference, dotted, value, field):
    obj = _measured(reference)
    _set(obj, dotted, value)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(CalibrationError) as info:
        load_calibration(path)
    assert info.value.field == field
    assert str(info.value).startswith(f"{path}: {field}: ")
    assert info.value.exit_code == 2


def test_published_entries_must_cite_a_listed_source(reference):
    obj = copy.deepcopy(reference)
    obj["latency"]["l1"]["source"] = "hearsay"
    with pytest.raises(CalibrationError, match=r"^latency\.l1\.source: 'hearsay'"):
        validate_calibration(obj)
    obj = copy.deepcopy(reference)
    obj["provenance"]["sources"] = []
    with pytest.raises(CalibrationError, match=r"^provenance\.sources"):
        validate_calibration(obj)


def test_unreadable_and_non_json_files(tmp_path):
    with pytest.raises(CalibrationError, match="cannot read"):
        load_calibration(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CalibrationError, match=r"bad.json: \(file\): not JSON"):
        load_calibration(bad)


def test_reference_by_name_and_path():
    assert load_calibration("hopper-published")["name"] == "hopper-published"
    assert load_calibration(reference_path())["name"] == "hopper-published"


# -- the replacement-delay section and the loaded-latency fit (issue 11, S3) -------------------


def _with_replacement(reference):
    """A measured calibration with a two-level replacement_delay section and a queueing fit."""
    obj = _measured(reference)
    obj["loaded_latency"][0]["peak_gbs"] = 4200.0
    obj["loaded_latency"][0]["fit_p50"] = {"l0": 500.0, "a": 40.0, "u_max": 0.97, "b": 1.0,
                                           "rmse": 1.0, "r2": 0.99, "n": 2}
    level = {"level": 1, "bandwidth_fraction": 0.5, "hit_cycles": 300.0,
             "residency": {"time_ns": 20000.0, "bound": "=",
                           "curve": [{"interval_ns": 0, "age_ns": 10000.0, "samples": 6, "resident_fraction": 0.8},
                                     {"interval_ns": 50000, "age_ns": 60000.0, "samples": 6,
                                      "resident_fraction": 0.1}]},
             "delay": {"quantiles": {"p50": 350.0, "p90": 380.0, "p99": 410.0, "p999": 420.0}, "samples": 100,
                       "histogram": {"edges": [300.0, 350.0, 450.0], "counts": [40, 60]}}}
    idle = {"level": 0, "bandwidth_fraction": 0.0, "hit_cycles": 290.0,
            "residency": {"time_ns": 1e6, "bound": ">", "curve": []}, "delay": None}
    obj["replacement_delay"] = {"unit": "cycles", "method": "docs/replacement-delay.md", "levels": [idle, level]}
    return obj


def test_replacement_section_is_optional_and_validated(reference):
    # version-1 files without it (the shipped reference) still load
    assert "replacement_delay" not in reference
    obj = _with_replacement(reference)
    assert validate_calibration(obj) is obj


RD = "replacement_delay.levels.1"
BAD_REPLACEMENT = [
    (f"{RD}.bandwidth_fraction", 1.6, "replacement_delay.levels[1].bandwidth_fraction"),
    (f"{RD}.bandwidth_fraction", -0.1, "replacement_delay.levels[1].bandwidth_fraction"),
    (f"{RD}.level", 0, "replacement_delay.levels[1].level"),  # twice
    (f"{RD}.hit_cycles", 0.0, "replacement_delay.levels[1].hit_cycles"),
    (f"{RD}.hit_cycles", 5e6, "replacement_delay.levels[1].hit_cycles"),
    (f"{RD}.delay.quantiles.p50", KeyError, "replacement_delay.levels[1].delay.quantiles.p50"),
    (f"{RD}.delay.quantiles.p90", 300.0, "replacement_delay.levels[1].delay.quantiles.p90"),  # below p50
    (f"{RD}.delay.quantiles.p42", 360.0, "replacement_delay.levels[1].delay.quantiles.p42"),
    # a delay below minus the same-load hit would be a miss faster than zero latency
    (f"{RD}.delay.quantiles.p50", -301.0, "replacement_delay.levels[1].delay.quantiles.p50"),
    (f"{RD}.delay.quantiles.p999", 2e6, "replacement_delay.levels[1].delay.quantiles.p999"),
    (f"{RD}.delay.quantiles.p99", float("inf"), "replacement_delay.levels[1].delay.quantiles.p99"),
    (f"{RD}.delay.histogram.counts", [1, -2], "replacement_delay.levels[1].delay.histogram.counts[1]"),
    (f"{RD}.delay.histogram.edges", [300.0, 200.0, 450.0], "replacement_delay.levels[1].delay.histogram.edges[1]"),
    (f"{RD}.residency.time_ns", -1.0, "replacement_delay.levels[1].residency.time_ns"),
    (f"{RD}.residency.time_ns", 5e9, "replacement_delay.levels[1].residency.time_ns"),
    (f"{RD}.residency.bound", "~", "replacement_delay.levels[1].residency.bound"),
    (f"{RD}.residency.curve.1.age_ns", 5000.0, "replacement_delay.levels[1].residency.curve[1].age_ns"),
    (f"{RD}.residency.curve.0.resident_fraction", 1.2, "replacement_delay.levels[1].residency.curve[0]"
                                                       ".resident_fraction"),
    ("replacement_delay.unit", "furlongs", "replacement_delay.unit"),
    ("loaded_latency.0.peak_gbs", 0.5, "loaded_latency[0].peak_gbs"),
    ("loaded_latency.0.fit_p50.l0", 0.0, "loaded_latency[0].fit_p50.l0"),
    ("loaded_latency.0.fit_p50.a", -1.0, "loaded_latency[0].fit_p50.a"),
    ("loaded_latency.0.fit_p50.u_max", 0.0, "loaded_latency[0].fit_p50.u_max"),
    ("loaded_latency.0.fit_p50.u_max", 100.0, "loaded_latency[0].fit_p50.u_max"),
    ("loaded_latency.0.fit_p50.b", 50.0, "loaded_latency[0].fit_p50.b"),
    ("loaded_latency.0.fit_p50.b", KeyError, "loaded_latency[0].fit_p50.b"),
]


@pytest.mark.parametrize("dotted,value,field", BAD_REPLACEMENT,
                         ids=[f"{b[0]}={b[1]}" if b[1] is not KeyError else b[0] + "-del" for b in BAD_REPLACEMENT])
def test_bad_replacement_section_refused_naming_the_field(tmp_path, reference, dotted, value, field):
    obj = _with_replacement(reference)
    _set(obj, dotted, value)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(CalibrationError) as info:
        load_calibration(path)
    assert info.value.field == field
    assert info.value.exit_code == 2


def test_calibrate_writes_the_validated_section_from_a_run(tmp_path):
    """`calibrate` builds the section from what RunAnalysis gives (reports/replacement.py): per
    level the fraction, the delay distribution in cycles and the residency; the curve says the
    peak its fractions are of, and its queueing fit passes the schema."""
    from sitsprof.reports.fromrun import calibrate
    from sitsprof.reports.synthetic import make_synthetic_run

    run = make_synthetic_run(tmp_path, "rd", seed=3, samples=20_000)
    path, cal = calibrate(run.path, tmp_path / "cal.json")
    loaded = load_calibration(path)
    rd = loaded["replacement_delay"]
    assert rd["unit"] == "cycles"
    busy = [lv for lv in rd["levels"] if lv["delay"] is not None]
    assert busy and all(0 < lv["bandwidth_fraction"] <= 1.5 for lv in busy)
    for lv in busy:
        q = [lv["delay"]["quantiles"][k] for k in ("p50", "p90", "p99", "p999") if k in lv["delay"]["quantiles"]]
        assert q == sorted(q) and q[0] > 0
        assert lv["residency"]["time_ns"] > 0
    curve = loaded["loaded_latency"][0]
    assert curve["peak_gbs"] == pytest.approx(4200.0)  # reports/synthetic.py's MODEL_PEAK_GBS
    assert 0 < curve["fit_p50"]["u_max"] <= 1.5 and curve["fit_p50"]["l0"] > 0
