"""`record` in-process with the fake NVML: the run directory it writes, failures, skipped samplers."""
from __future__ import annotations

import sys

import fake_nvml
import pytest

from sitsprof.cli.main import main
from sitsprof.collectors.errors import CollectorError
from sitsprof.collectors.record import record
from sitsprof.collectors.rundir import open_run
from sitsprof.common.durations import DurationError, parse_duration


def test_record_writes_a_complete_run(fake_gpu, tmp_path):
    run, result = record([sys.executable, "-c", "import time; time.sleep(0.4)"], parent=tmp_path, name="r",
                         clocks="lock", sm="base", nvml_interval_s=0.005, flush_every_s=0.1)
    assert result["exit_code"] == 0 and not result["timed_out"]
    back = open_run(tmp_path / "r")
    meta = back.meta
    assert back.complete and meta["status"] == "complete"
    assert meta["device"]["name"] == "NVIDIA H200" and meta["device"]["sm_count"] == 132
    assert meta["clocks"]["resolved"] == {"sm": 1755, "memory": None}
    assert meta["clocks"]["applied"]["sm_mhz"] == 1755 and meta["clocks"]["restored"]
    assert meta["clock_sync"]["host_clock"] == "time.monotonic_ns"
    assert set(back.tables("sampler")) == {"nvml", "nvml_series", "gpm"}  # nvml_series: the driver series (issue 10.14)
    nvml = back.read_table("nvml", "sampler")
    assert len(nvml) == meta["samplers"]["nvml"]["samples"] > 20
    assert (nvml["sm_clock_mhz"] == 1755).all()  # locked for the whole run
    assert meta["samplers"]["nvml"]["achieved_hz"] > 0 and "dropped" in meta["samplers"]["nvml"]
    assert fake_gpu.state["devices"][0]["locked_gpu"] is None


def test_duration_stops_the_command(fake_gpu, tmp_path):
    run, result = record(["sleep", "30"], duration_s=0.3, parent=tmp_path, name="r", gpm=False)
    assert result["timed_out"] and result["seconds"] < 10
    assert open_run(run.path).complete


def test_failed_start_marks_run_failed_and_restores(fake_gpu, tmp_path):
    with pytest.raises(CollectorError, match="cannot run"):
        record(["/nonexistent/tool"], parent=tmp_path, name="r", clocks="lock", gpm=False)
    back = open_run(tmp_path / "r")
    assert back.meta["status"] == "failed" and "cannot run" in back.meta["error"]
    assert back.meta["clocks"]["restored"]
    assert fake_gpu.state["devices"][0]["locked_gpu"] is None


def test_unsupported_gpm_is_skipped_with_reason(tmp_path):
    fake_nvml.install(fake_nvml.default_state(gpm="unsupported"))
    try:
        run, _ = record(duration_s=0.2, parent=tmp_path, name="r")
        assert "needs Hopper" in run.meta["samplers_skipped"]["gpm"]
        assert run.tables("sampler") == ["nvml", "nvml_series"]  # no gpm table; nvml_series: issue 10.14
    finally:
        fake_nvml.uninstall()


def test_parse_duration():
    assert parse_duration("10s") == 10 and parse_duration("500ms") == 0.5 and parse_duration("2m") == 120
    assert parse_duration("10us") == pytest.approx(1e-5) and parse_duration(3) == 3
    with pytest.raises(DurationError):
        parse_duration("soon")


def test_cli_record_and_permission_error(fake_gpu, tmp_path, capsys):
    assert main(["record", "--out", str(tmp_path), "--name", "a", "--no-gpm", "--duration", "0.2s"]) == 0
    assert "nvml:" in capsys.readouterr().out
    fake_gpu.state["root"] = False
    code = main(["record", "--out", str(tmp_path), "--name", "b", "--clocks", "lock", "--duration", "0.2s"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "run as root" in err and "--clocks none" in err
    assert open_run(tmp_path / "b").meta["status"] == "failed"


def test_cli_without_driver_is_one_line(tmp_path, capsys):
    fake_nvml.install(fake_nvml.default_state(driver="no_library"))
    try:
        for args in (["devices"], ["clocks", "show"], ["record", "--duration", "1s", "--out", str(tmp_path)]):
            assert main(args) == 2
            err = capsys.readouterr().err
            assert err.startswith("sitsprof: error: no NVIDIA driver") and err.count("\n") == 1
    finally:
        fake_nvml.uninstall()
