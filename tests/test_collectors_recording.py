"""`recording()`, the skeleton `sitsprof record` and `sitsprof run` share, with the fake NVML:
clocks restored and the restore written before the run is marked, whichever command and
however the work ends."""
from __future__ import annotations

import pytest

from sitsprof.cli.main import main
from sitsprof.collectors.recording import recording
from sitsprof.collectors.rundir import open_run


def _locked(fake):
    return fake.state["devices"][0]["locked_gpu"]


def test_failed_work_restores_clocks_and_records_the_restore(fake_gpu, tmp_path):
    with pytest.raises(RuntimeError, match="work failed"):
        with recording(tmp_path, "r", "probe", {"suite": "quick"}, clocks="lock", sm="max", gpm=False) as rec:
            assert _locked(fake_gpu) == [1980, 1980]
            rec.set_outcome(never="written")
            raise RuntimeError("work failed")
    meta = open_run(tmp_path / "r").meta
    assert meta["status"] == "failed" and "work failed" in meta["error"]
    assert meta["kind"] == "probe" and meta["suite"] == "quick" and meta["device"]["name"] == "NVIDIA H200"
    assert meta["clocks"]["restored"] and meta["clocks"]["after"]["sm_mhz"] == 345
    assert "never" not in meta  # outcomes are for runs that ended well
    assert _locked(fake_gpu) is None


def test_outcome_is_written_after_the_restore(fake_gpu, tmp_path):
    with recording(tmp_path, "r", "record", {"workload": {"command": []}}, gpm=False) as rec:
        rec.set_outcome(workload={"command": [], "exit_code": 0})
    back = open_run(tmp_path / "r")
    assert back.complete and back.meta["workload"] == {"command": [], "exit_code": 0}
    assert back.meta["clocks"]["mode"] == "none" and back.meta["clocks"]["after"] is not None
    assert {"nvml"} <= set(back.tables("sampler")) <= {"nvml", "nvml_series"}  # driver series rows if any came


def test_run_command_locks_syncs_and_samples_around_the_suite(fake_gpu, tmp_path, monkeypatch):
    from sitsprof.common.sizes import GiB, MiB
    from sitsprof.probes import gpu, suite
    from sitsprof.probes.plan import DeviceLimits

    h200 = DeviceLimits(name="NVIDIA H200", compute_capability=(9, 0), sm_count=132, l2_bytes=50 * MiB,
                        memory_bytes=141 * GiB, free_bytes=140 * GiB)
    monkeypatch.setattr(gpu, "device_limits", lambda index=0: h200)
    seen = {}

    def run_suite(run, plan, index=0, progress=None, probes=None):
        seen["locked"], seen["parts"] = _locked(fake_gpu), plan.parts
        run.write_table("bandwidth", {"gbs": [1.0, 2.0]})
        progress("bandwidth", 1, 1)
        return {}

    monkeypatch.setattr(suite, "run_suite", run_suite)
    args = ["run", "--parts", "bandwidth", "--clocks", "max", "--gpm", "off", "--out", str(tmp_path), "--name", "r"]
    assert main(args) == 0
    assert seen == {"locked": [1980, 1980], "parts": ("bandwidth",)} and _locked(fake_gpu) is None
    back = open_run(tmp_path / "r")
    meta = back.meta
    assert back.complete and meta["kind"] == "probe" and meta["parts"] == ["bandwidth"]
    assert meta["clocks"]["applied"]["sm_mhz"] == 1980 and meta["clocks"]["restored"]
    assert meta["clock_sync"]["host_clock"] == "time.monotonic_ns"
    assert {"nvml"} <= set(back.tables("sampler")) <= {"nvml", "nvml_series"} and back.tables("probe") == ["bandwidth"]
