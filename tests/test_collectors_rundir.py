"""The run directory contract (docs/CONTRACTS.md): atomic tables, meta.json, incomplete flags."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from sitsprof.collectors.errors import RunDirectoryError
from sitsprof.collectors.rundir import RunDirectory, open_run


def test_create_writes_meta_marked_running(tmp_path):
    run = RunDirectory.create(tmp_path, "r1", meta={"device": {"name": "X"}})
    meta = json.loads((tmp_path / "r1" / "meta.json").read_text())
    assert meta["schema_version"] == 1
    assert meta["status"] == "running" and meta["complete"] is False
    assert meta["device"] == {"name": "X"}
    assert meta["started_at"] and meta["tool_version"] and meta["command_line"]
    assert not run.complete


def test_tables_round_trip_and_finish(tmp_path):
    run = RunDirectory.create(tmp_path, "r")
    frame = pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5]})
    path = run.write_table("latency", frame)
    assert path == tmp_path / "r" / "probes" / "latency.parquet"
    run.write_table("nvml", {"t": [1, 2]}, kind="sampler")
    run.update_meta(clocks_after={"sm": 1980})
    run.finish()
    back = open_run(tmp_path / "r")
    assert back.complete and back.meta["status"] == "complete" and back.meta["ended_at"]
    assert back.meta["clocks_after"] == {"sm": 1980}
    assert back.tables("probe") == ["latency"] and back.tables("sampler") == ["nvml"]
    pd.testing.assert_frame_equal(back.read_table("latency"), frame)
    assert back.meta["tables"]["probes"]["latency"]["rows"] == 3
    # no temporary files are left behind
    assert not [p for p in (tmp_path / "r").rglob(".*tmp*")]


def test_exception_marks_failed_and_keeps_data(tmp_path):
    with pytest.raises(RuntimeError):
        with RunDirectory.create(tmp_path, "r") as run:
            run.write_table("t", {"x": [1]})
            raise RuntimeError("boom")
    back = open_run(tmp_path / "r")
    assert back.meta["status"] == "failed" and back.complete is False
    assert "boom" in back.meta["error"]
    assert back.read_table("t")["x"].tolist() == [1]


def test_keyboard_interrupt_marks_interrupted_and_merges_parts(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with RunDirectory.create(tmp_path, "r") as run:
            run.append_table("nvml", {"t": [1, 2]})
            raise KeyboardInterrupt
    back = open_run(tmp_path / "r")
    assert back.meta["status"] == "interrupted" and not back.complete
    assert (tmp_path / "r" / "samplers" / "nvml.parquet").exists()
    assert back.read_table("nvml", "sampler")["t"].tolist() == [1, 2]


def test_parts_readable_before_finish_and_merged_after(tmp_path):
    run = RunDirectory.create(tmp_path, "r")
    run.append_table("nvml", {"t": [1, 2]})
    run.append_table("nvml", {"t": [3]})
    reader = open_run(tmp_path / "r")  # as after a crash: never finished
    assert not reader.complete
    assert reader.tables("sampler") == ["nvml"]
    assert reader.read_table("nvml", "sampler")["t"].tolist() == [1, 2, 3]
    reader.append_table("nvml", {"t": [4]})  # continues numbering, does not overwrite
    run.finish()
    assert (tmp_path / "r" / "samplers" / "nvml.parquet").exists()
    assert not (tmp_path / "r" / "samplers" / "nvml.parts").exists()
    assert open_run(tmp_path / "r").read_table("nvml", "sampler")["t"].tolist() == [1, 2, 3, 4]


def test_a_parts_folder_killed_before_its_first_part_is_no_table(tmp_path):
    """SIGKILL between making samplers/X.parts and writing its first part: the run lists the
    tables it has, so `inspect` says INCOMPLETE, not DAMAGED (a race a fresh-clone CI run hit)."""
    run = RunDirectory.create(tmp_path, "r")
    run.append_table("nvml", {"t": [1, 2]})
    (tmp_path / "r" / "samplers" / "nvml_series.parts").mkdir()
    reader = open_run(tmp_path / "r")
    assert reader.tables("sampler") == ["nvml"]
    assert reader.read_table("nvml", "sampler")["t"].tolist() == [1, 2]


def test_errors_name_the_problem(tmp_path):
    RunDirectory.create(tmp_path, "r")
    with pytest.raises(RunDirectoryError, match="already exists"):
        RunDirectory.create(tmp_path, "r")
    with pytest.raises(RunDirectoryError, match="not a run directory"):
        open_run(tmp_path)
    with pytest.raises(RunDirectoryError, match="no probe table"):
        open_run(tmp_path / "r").read_table("missing")
    with pytest.raises(ValueError):
        open_run(tmp_path / "r").write_table("../evil", {"x": [1]})


def test_default_names_are_unique(tmp_path):
    a = RunDirectory.create(tmp_path)
    b = RunDirectory.create(tmp_path)
    assert a.path != b.path and a.path.name.startswith("run-")
