"""Bad inputs are one line and exit status 2, never "internal error" (issue 12 items 6 and 7).

Every case goes through `sitsprof.cli.main.main` in this process, as a user's command would,
and requires: status 2, exactly one line on stderr, no "internal error", no traceback.
"""
from __future__ import annotations

import json
import math
import shutil

import pytest

from sitsprof.calibration import CalibrationError, load_calibration, reference_path, validate_calibration
from sitsprof.collectors.errors import DamagedTableError
from sitsprof.collectors.rundir import inspect_run, open_run
from sitsprof.common import jsonout

DEEP = "[" * 100_000 + "]" * 100_000
GOOD_LINE = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1, 2]}


def one_line_exit_2(result, *needles):
    code, out, err = result
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1, err
    assert "internal error" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return lines[0]


def _jsonl(tmp_path, name, *rows):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    from sitsprof.reports.synthetic import make_synthetic_run

    parent = tmp_path_factory.mktemp("runs")
    make_synthetic_run(parent, name="good", samples=2000)
    return parent / "good"


def _copy_run(good_run, tmp_path, name="run"):
    return shutil.copytree(good_run, tmp_path / name)


# -- 12.6: traces ---------------------------------------------------------------------------
@pytest.mark.parametrize("text, needle", [
    (DEEP, "nested too deeply"),
    ('{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": ' + DEEP + "}", "nested too deeply"),
    (json.dumps({**GOOD_LINE, "input_length": 2**70}), "input_length 1180591620717411303424 is beyond the 64-bit"),
    (json.dumps({**GOOD_LINE, "output_length": 2**64}), "output_length"),
    (json.dumps({**GOOD_LINE, "timestamp": 2**70}), "timestamp 1180591620717411303424 is beyond the 64-bit"),
    (json.dumps({**GOOD_LINE, "timestamp": 10**400}), "(401 characters) is beyond"),
    (json.dumps({**GOOD_LINE, "timestamp": 1.7e308}), "timestamp 1.7e+308 is beyond"),
    (json.dumps(GOOD_LINE).replace('"timestamp": 0', '"timestamp": NaN'), "timestamp must be a number"),
    (json.dumps(GOOD_LINE).replace('"timestamp": 0', '"timestamp": -Infinity'), "timestamp must be a number"),
])
def test_mooncake_trace_problems_are_one_line(cli, tmp_path, text, needle):
    """12.6: deeply nested JSON (RecursionError), integers beyond 64 bits in lengths and
    timestamps (OverflowError), NaN/inf: one line naming the line, exit 2."""
    path = _jsonl(tmp_path, "t.jsonl", text)
    one_line_exit_2(cli("policy", "simulate", path, "-c", "10", "-p", "lru", "--json"), f"{path}:1:", needle)


@pytest.mark.parametrize("field, value", [
    ("input_tokens", 2**70), ("max_new_tokens", 2**64), ("output_tokens", 2**80), ("arrival_ms", 2**70),
    ("arrival_ms", 1e300),
])
def test_request_trace_big_numbers_are_one_line(cli, tmp_path, field, value):
    """12.6: the request JSONL format's counts and arrival times beyond 64 bits."""
    row = {"model_stack": "a", "input_tokens": 1, "max_new_tokens": 1, "hash_ids": [1], field: value}
    path = _jsonl(tmp_path, "r.jsonl", row)
    one_line_exit_2(cli("policy", "simulate", path, "-c", "10", "-p", "lru"), field, "beyond the 64-bit")


def test_deep_json_skipped_with_skip_bad_lines(cli, tmp_path):
    """12.6: --skip-bad-lines drops the unreadable nested line and keeps the good one."""
    path = _jsonl(tmp_path, "t.jsonl", DEEP, GOOD_LINE)
    code, out, err = cli("policy", "simulate", path, "-c", "10", "-p", "lru", "--json", "--skip-bad-lines")
    assert code == 0, err
    assert json.loads(out)["trace"]["skipped_lines"] == 1


def test_format_sniffing_survives_deep_json(cli, tmp_path):
    """12.6: format detection reads the first JSON object, which may be deeply nested."""
    path = tmp_path / "trace"
    path.write_text('{"x": ' + DEEP + "}\n")
    one_line_exit_2(cli("policy", "mrc", str(path)), "nested too deeply")


# -- 12.6 and 12.7: calibrations --------------------------------------------------------------
def _calibration(tmp_path, mutate=None, text=None, raw=None):
    cal = json.loads(reference_path().read_text())
    if mutate is not None:
        mutate(cal)
    path = tmp_path / "cal.json"
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text(text if text is not None else json.dumps(cal))
    return str(path)


def _simulate_with(cli, tmp_path, cal_path):
    trace = _jsonl(tmp_path, "t.jsonl", GOOD_LINE)
    return cli("policy", "simulate", trace, "-c", "10", "-p", "lru", "--json", "--calibration", cal_path)


@pytest.mark.parametrize("raw, needle", [
    (DEEP.encode(), "nested too deeply"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"{\"name\": \"caf\xe9\"}", "not UTF-8"),  # Latin-1, not UTF-8
])
def test_unreadable_calibration_files_are_one_line(cli, tmp_path, raw, needle):
    """12.6: deeply nested and non-UTF-8 calibration files."""
    one_line_exit_2(_simulate_with(cli, tmp_path, _calibration(tmp_path, raw=raw)), needle)


def _set(path, value):
    def mutate(cal):
        node = cal
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return mutate


@pytest.mark.parametrize("path, value, field", [
    (("bandwidth", "hbm_read_gbs"), 5e-324, "bandwidth.hbm_read_gbs"),
    (("bandwidth", "hbm_read_gbs"), 1e6, "bandwidth.hbm_read_gbs"),
    (("latency", "hbm", "quantiles", "p50"), 1.7e308, "latency.hbm.quantiles.p50"),
    (("latency", "l1", "quantiles", "p50"), 0.001, "latency.l1.quantiles.p50"),
    (("clocks", "sm_mhz"), 1e-308, "clocks.sm_mhz"),
    (("clocks", "sm_mhz"), 2**70, "clocks.sm_mhz"),
    (("clocks", "memory_mhz"), 1e9, "clocks.memory_mhz"),
    (("compute", "bf16_dense_tflops"), 1e-300, "compute.bf16_dense_tflops"),
])
def test_implausible_calibration_values_are_refused(cli, tmp_path, path, value, field):
    """12.7: values that are finite but not physical are refused, naming the field, the
    accepted range and the schema doc (they used to be accepted and print NaN/Infinity)."""
    cal = _calibration(tmp_path, _set(path, value))
    line = one_line_exit_2(_simulate_with(cli, tmp_path, cal), field, "docs/calibration.md")
    assert "plausible" in line


def test_integer_beyond_float_in_calibration(cli, tmp_path):
    """12.6: an integer too large for a float (10**400) is out of range, not an OverflowError."""
    cal = json.loads(reference_path().read_text())
    cal["device"]["sm_count"] = 7
    text = json.dumps(cal).replace('"sm_count": 7', '"sm_count": 1' + "0" * 400)
    one_line_exit_2(_simulate_with(cli, tmp_path, _calibration(tmp_path, text=text)), "device.sm_count", "out of range")


def test_shipped_and_measured_calibrations_are_in_range(good_run, tmp_path):
    """12.7: the ranges never refuse a real calibration: the shipped reference and one built
    from a (synthetic) measured run both validate."""
    from sitsprof.reports.fromrun import calibrate

    validate_calibration(load_calibration())
    path, cal = calibrate(good_run, tmp_path / "measured.json")
    assert load_calibration(path)["clocks"]["sm_mhz"] == cal["clocks"]["sm_mhz"]


def test_every_range_is_documented():
    """12.7: each bound of schema.RANGES appears, with its reason, in docs/calibration.md."""
    from pathlib import Path

    from sitsprof.calibration.schema import RANGES

    doc = (Path(__file__).resolve().parent.parent / "docs" / "calibration.md").read_text()
    for kind in RANGES:
        assert f"`{kind}`" in doc, kind


def test_validate_calibration_error_type():
    """12.7: the refusal is a CalibrationError (exit 2), field first."""
    cal = json.loads(reference_path().read_text())
    cal["bandwidth"]["hbm_read_gbs"] = 5e-324
    with pytest.raises(CalibrationError, match=r"^bandwidth\.hbm_read_gbs: "):
        validate_calibration(cal)


# -- 12.7: never non-JSON ---------------------------------------------------------------------
def test_jsonout_writes_null_for_non_finite():
    """12.7: the one JSON writer maps NaN/inf (NumPy's too) to null and emits strict JSON."""
    import numpy as np

    text = jsonout.dumps({"a": float("nan"), "b": [float("inf"), -math.inf, 1.5], "c": np.float64("nan"),
                          "d": np.arange(2), "e": (np.int64(3),)})
    assert json.loads(text) == {"a": None, "b": [None, None, 1.5], "c": None, "d": [0, 1], "e": [3]}
    assert "NaN" not in text and "Infinity" not in text


def test_emit_json_prints_null(capsys):
    """12.7: `emit_json` (every `policy ... --json`) prints null for a non-finite figure."""
    from sitsprof.cli.console import emit_json

    emit_json({"hit_ratio": float("nan"), "rate": float("inf")})
    out = capsys.readouterr().out
    assert json.loads(out) == {"hit_ratio": None, "rate": None}
    assert "NaN" not in out and "Infinity" not in out


# -- 12.6: policy results ---------------------------------------------------------------------
@pytest.mark.parametrize("text, needle", [
    (DEEP, "nested too deeply"),
    ('{"results": [{"policy": "lru", "extra": ' + DEEP + "}]}", "nested too deeply"),
    ('[{"policy": 1}]', "results[0]: policy must be a policy name"),
    ('[{"policy": "lru", "capacity": "x"}]', "results[0]: capacity must be a count"),
    ('[{"policy": "lru", "capacity": 10, "block_hit_ratio": NaN}]', "block_hit_ratio must be a ratio"),
    ('[{"policy": "lru", "capacity": 10, "block_hit_ratio": 7}]', "block_hit_ratio must be a ratio"),
    ('[{"policy": "lru", "extra": [1]}]', "extra must be an object"),
    ('[{"policy": "lru", "extra": {"p99_ms": Infinity}}]', "p99_ms must be a finite number"),
    ('{"results": [], "decisions": [1, 2]}', "decisions must be a list of objects"),
    ('{"results": [], "decisions": [{"time": 0, "p99": NaN}]}', "decisions[0].p99 is nan"),
    ('{"format": "sitsprof.policy-results", "format_version": true, "results": []}', "format_version True"),
])
def test_malformed_policy_results_are_one_line(cli, tmp_path, good_run, text, needle):
    """12.6: malformed `--policy-results` files (read_results) are one line, exit 2."""
    path = tmp_path / "pr.json"
    path.write_text(text)
    one_line_exit_2(cli("report", str(good_run), "-o", str(tmp_path / "r.html"), "--policy-results", str(path)),
                    str(path), needle)
    assert not (tmp_path / "r.html").exists()


# -- 12.6: run directories --------------------------------------------------------------------
@pytest.mark.parametrize("value", ["1", 1.5, [1], None, True, 0, -3])
def test_non_integer_schema_version_is_one_line(cli, good_run, tmp_path, value):
    """12.6: a schema_version that is not a whole number >= 1 broke even `inspect` (TypeError)."""
    run = _copy_run(good_run, tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    meta["schema_version"] = value
    (run / "meta.json").write_text(json.dumps(meta))
    for args in (["inspect", str(run)], ["report", str(run), "-o", str(tmp_path / "r.html")],
                 ["calibrate", str(run), "-o", str(tmp_path / "c.json")]):
        one_line_exit_2(cli(*args), "schema_version must be a whole number")


def test_deeply_nested_meta_json_is_one_line(cli, good_run, tmp_path):
    """12.6: a meta.json nested thousands deep (RecursionError)."""
    run = _copy_run(good_run, tmp_path)
    (run / "meta.json").write_text('{"schema_version": 1, "x": ' + DEEP + "}")
    one_line_exit_2(cli("inspect", str(run)), "meta.json: unreadable: JSON nested too deeply")


def _truncate(path):
    path.write_bytes(path.read_bytes()[:100])


def _empty(path):
    path.write_bytes(b"")


def _garbage(path):
    path.write_bytes(b"PAR1" + bytes(range(256)) * 8)


def _mismatched_parts(run):
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = run / "samplers" / "extra.parts"
    parts.mkdir()
    pq.write_table(pa.table({"t_ns": [1, 2], "x": [1.0, 2.0]}), parts / "part-00000.parquet")
    pq.write_table(pa.table({"t_ns": ["a", "b"], "x": ["u", "v"]}), parts / "part-00001.parquet")
    return "samplers/extra"


def _garbage_part(run):
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = run / "samplers" / "extra.parts"
    parts.mkdir()
    pq.write_table(pa.table({"t_ns": [1, 2], "x": [1.0, 2.0]}), parts / "part-00000.parquet")
    (parts / "part-00001.parquet").write_bytes(b"PAR1 half a part")
    return "samplers/extra"


def _damage(how, table):
    def apply(run):
        how(run / f"{table}.parquet")
        return table
    return apply


DAMAGE = {
    "truncated probe": _damage(_truncate, "probes/latency"),
    "empty probe": _damage(_empty, "probes/bandwidth"),
    "garbage probe": _damage(_garbage, "probes/tlb"),
    "truncated sampler": _damage(_truncate, "samplers/nvml"),
    "mismatched part schemas": _mismatched_parts,
    "garbage part": _garbage_part,
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_tables_say_damaged(cli, good_run, tmp_path, case):
    """12.6: truncated, empty and garbage Parquet files and parts whose schemas disagree:
    `inspect` says DAMAGED (not complete) and names the table; reading the table is a
    one-line DamagedTableError; `report` still writes, reporting the table as missing;
    `calibrate` refuses or degrades with one line, never an internal error."""
    run = _copy_run(good_run, tmp_path)
    table = DAMAGE[case](run)
    code, out, err = cli("inspect", str(run))
    assert code == 0, err
    assert "DAMAGED" in out.splitlines()[0] and table in out.splitlines()[0], out
    summary = inspect_run(run)
    assert summary["complete"] is False and table in summary["damaged"]
    kind, name = table.split("/")
    with pytest.raises(DamagedTableError, match="damaged"):
        open_run(run).read_table(name, kind[:-1])
    code, out, err = cli("report", str(run), "-o", str(tmp_path / "r.html"))
    assert code == 0 and "internal error" not in err, err
    code, out, err = cli("calibrate", str(run), "-o", str(tmp_path / "c.json"))
    assert code in (0, 2) and len(err.strip().splitlines()) <= 1 and "internal error" not in err, err


def test_listed_table_that_is_absent_is_damage(cli, good_run, tmp_path):
    """12.6: a table meta.json lists whose file is gone is reported by `inspect`."""
    run = _copy_run(good_run, tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    meta.setdefault("tables", {}).setdefault("probes", {})["ghost"] = {"rows": 3, "file": "probes/ghost.parquet"}
    (run / "meta.json").write_text(json.dumps(meta))
    code, out, err = cli("inspect", "--json", str(run))
    summary = json.loads(out)
    assert summary["complete"] is False
    assert summary["damaged"] == {"probes/ghost": "listed in meta.json but absent"}


def test_intact_run_is_complete(cli, good_run):
    """The other side: an intact run says complete and lists no damage."""
    code, out, err = cli("inspect", "--json", str(good_run))
    summary = json.loads(out)
    assert summary["complete"] is True and summary["damaged"] == {}


@pytest.mark.parametrize("fields", [
    {"sm_clock_mhz": 2**70}, {"phases_origin_ns": 2**80}, {"sm_clock_mhz": 1e400},
    {"clock_sync": {"globaltimer": {"available": True, "offset_ns": 2**90}}},
])
def test_meta_numbers_beyond_64_bits(cli, good_run, tmp_path, fields):
    """12.6: integers beyond 64 bits and infinities in meta.json (OverflowError in numpy, a
    RuntimeWarning on stderr) are ignored as unusable, not fatal."""
    run = _copy_run(good_run, tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    meta.update(fields)
    (run / "meta.json").write_text(json.dumps(meta))
    code, out, err = cli("report", str(run), "-o", str(tmp_path / "r.html"))
    assert code == 0 and err == "", err


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 1e300])
def test_non_finite_latencies_in_probe_tables(cli, good_run, tmp_path, value):
    """12.6: NaN/inf (and absurd) values in the probe tables' numbers ended in OverflowError
    (tlb), IndexError (loaded) or NumPy warnings on stderr; the rows without a number are left
    out and counted in the report's notes, and `report`/`calibrate` stay quiet. Every third row
    of the latency, TLB, loaded-latency and bandwidth tables gets `value` in every numeric column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = _copy_run(good_run, tmp_path)
    for table in ("latency", "tlb", "loaded", "bandwidth"):
        path = run / "probes" / f"{table}.parquet"
        frame = pq.read_table(path).to_pandas()
        for name in frame.columns:
            if frame[name].dtype.kind in "fiu":
                frame[name] = frame[name].astype("float64")
                frame.loc[frame.index[::3], name] = value
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    code, out, err = cli("report", str(run), "-o", str(tmp_path / "r.html"))
    assert code == 0 and err == "", err
    code, out, err = cli("calibrate", str(run), "-o", str(tmp_path / "c.json"))
    assert code in (0, 2) and "internal error" not in err and len(err.strip().splitlines()) <= 1, err
    if code == 0:
        text = (tmp_path / "c.json").read_text()
        assert "NaN" not in text and "Infinity" not in text


def test_table_whose_pandas_metadata_is_not_utf8(cli, good_run, tmp_path):
    """12.6 (found by tests/fault_injection.py): a flipped bit in a Parquet file's pandas
    metadata reads as Arrow but not as pandas (UnicodeDecodeError): DamagedTableError, and the
    report still writes."""
    import pyarrow.parquet as pq

    run = _copy_run(good_run, tmp_path)
    path = run / "probes" / "bandwidth.parquet"
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({b"pandas": b'{"index_columns": \xff\xfe}'}), path)
    with pytest.raises(DamagedTableError, match="bandwidth"):
        open_run(run).read_table("bandwidth")
    code, out, err = cli("report", str(run), "-o", str(tmp_path / "r.html"))
    assert code == 0 and err == "", err


@pytest.mark.parametrize("fields", [
    {"phases": [1]}, {"phases": [{"name": "x", "start_s": "a", "end_s": 2}]}, {"phases": "x"},
    {"tool_version": float("nan")},
])
def test_meta_fields_of_the_wrong_type(cli, good_run, tmp_path, fields):
    """12.6 (found by tests/fault_injection.py): phases that are not objects with numbers
    (AttributeError, TypeError in the timeline) and a NaN tool_version (which made the
    calibration non-JSON: ValueError) are read around: report and calibrate succeed quietly,
    and the calibration written is strict JSON."""
    run = _copy_run(good_run, tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    meta.update(fields)
    (run / "meta.json").write_text(json.dumps(meta))
    code, out, err = cli("report", str(run), "-o", str(tmp_path / "r.html"))
    assert code == 0 and err == "", err
    code, out, err = cli("calibrate", str(run), "-o", str(tmp_path / "c.json"))
    assert code == 0 and "error" not in err and "Warning" not in err, err  # a SYNTHETIC notice is fine
    json.loads((tmp_path / "c.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
