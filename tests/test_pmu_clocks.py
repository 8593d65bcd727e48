"""Clock locking with the fake NVML: validation, restore on exit/exception, permission, state file."""
from __future__ import annotations

import json
import subprocess

import pytest

from sitsprof.pmu import clocks, lockstate
from sitsprof.pmu.errors import ClockPermissionError, ClockValueError


def _dev(fake):
    return fake.state["devices"][0]


def test_resolve_max_base_tdp_and_mhz(fake_gpu):
    assert clocks.resolve(0, "max") == {"sm": 1980, "memory": None}
    assert clocks.resolve(0, "base", "max") == {"sm": 1755, "memory": 3201}
    assert clocks.resolve(0, "tdp")["sm"] == "tdp"
    assert clocks.resolve(0, "1500MHz")["sm"] == 1500
    with pytest.raises(ClockValueError, match="nearest supported: 1515, 1500"):
        clocks.resolve(0, 1503)
    with pytest.raises(ClockValueError, match="supported: 3201"):
        clocks.resolve(0, None, 1000)
    with pytest.raises(ClockValueError, match="use max, base, tdp"):
        clocks.resolve(0, "fast")


def test_lock_and_restore_on_normal_exit(fake_gpu, tmp_path):
    with clocks.locked_clocks(0, sm="max", memory="max") as session:
        assert _dev(fake_gpu)["locked_gpu"] == [1980, 1980]
        assert _dev(fake_gpu)["locked_mem"] == [3201, 3201]
        assert session.applied["sm_mhz"] == 1980
        assert session.before["sm_mhz"] == 345  # idle before
        state = list((tmp_path / "state").glob("clocks-*.json"))
        assert len(state) == 1 and json.loads(state[0].read_text())["changed"] == ["sm", "memory"]
    assert _dev(fake_gpu)["locked_gpu"] is None and _dev(fake_gpu)["locked_mem"] is None
    assert session.restored and session.after["sm_mhz"] == 345
    assert not list((tmp_path / "state").glob("clocks-*.json"))
    assert fake_gpu.calls["nvmlDeviceResetGpuLockedClocks"] == 1
    assert fake_gpu.calls["nvmlDeviceResetMemoryLockedClocks"] == 1


def test_restore_on_exception_only_what_changed(fake_gpu):
    with pytest.raises(RuntimeError):
        with clocks.locked_clocks(0, sm="tdp"):
            assert _dev(fake_gpu)["locked_gpu"] == [1830, 1830]
            raise RuntimeError("workload failed")
    assert _dev(fake_gpu)["locked_gpu"] is None
    assert "nvmlDeviceResetMemoryLockedClocks" not in fake_gpu.calls


def test_permission_denied_explains_the_fix(fake_gpu, tmp_path):
    fake_gpu.state["root"] = False
    needs_root = r"locking the SM clock needs root.*run as root.*--clocks none"
    with pytest.raises(ClockPermissionError, match=needs_root) as info:
        with clocks.locked_clocks(0):
            pass
    assert info.value.exit_code == 2
    assert not list((tmp_path / "state").glob("clocks-*.json"))


def test_failed_sm_lock_undoes_the_memory_lock(fake_gpu, tmp_path):
    """Memory locks first; when the SM lock is then refused nothing may stay changed."""
    _dev(fake_gpu)["gpu_lock_supported"] = False
    with pytest.raises(Exception, match="locking the SM clock"):
        with clocks.locked_clocks(0, sm="max", memory="max"):
            pytest.fail("the block must not run when locking failed")
    assert fake_gpu.calls["nvmlDeviceSetMemoryLockedClocks"] == 1
    assert _dev(fake_gpu)["locked_mem"] is None
    assert "nvmlDeviceResetGpuLockedClocks" not in fake_gpu.calls
    assert not list((tmp_path / "state").glob("clocks-*.json"))
    with pytest.raises(Exception, match="locking the SM clock"):
        clocks.lock_persistent(0, sm="max", memory="max")
    assert _dev(fake_gpu)["locked_mem"] is None
    assert not list((tmp_path / "state").glob("clocks-*.json"))


def test_mode_none_changes_nothing_and_records_drift(fake_gpu):
    with clocks.locked_clocks(0, mode="none") as session:
        _dev(fake_gpu)["event_reasons"] = 0  # the GPU gets busy and boosts
    assert "nvmlDeviceSetGpuLockedClocks" not in fake_gpu.calls
    assert session.before["sm_mhz"] == 345 and session.after["sm_mhz"] == 1980


def test_stale_record_warns_and_reset_restores(fake_gpu, tmp_path):
    clocks.apply_clocks(0, {"sm": 1500, "memory": None})
    record = lockstate.new_record(0, _dev(fake_gpu)["uuid"], {"sm": 1500, "memory": None}, {}, persistent=False)
    gone = subprocess.Popen(["true"])
    gone.wait()
    record["pid"], record["pid_start"] = gone.pid, None  # a process that no longer exists
    lockstate.write_state(lockstate.state_path(_dev(fake_gpu)["uuid"]), record)
    assert lockstate.lock_records()[0]["state"] == lockstate.STALE
    assert "may still be locked" in lockstate.stale_lock_warning()
    assert "sitsprof clocks reset" in lockstate.stale_lock_warning()
    done = clocks.reset_clocks()
    assert [d["index"] for d in done] == [0]
    assert _dev(fake_gpu)["locked_gpu"] is None
    assert lockstate.stale_lock_warning() is None


def test_persistent_lock_is_not_stale(fake_gpu):
    clocks.lock_persistent(0, sm="base")
    assert _dev(fake_gpu)["locked_gpu"] == [1755, 1755]
    assert lockstate.stale_lock_warning() is None
    assert lockstate.lock_records()[0]["persistent"]
    clocks.reset_clocks()
    assert _dev(fake_gpu)["locked_gpu"] is None and lockstate.lock_records() == []


def test_state_dir_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("SITSPROF_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert lockstate.state_dir() == tmp_path / "sitsprof"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert str(lockstate.state_dir()).endswith(".local/state/sitsprof")


def test_run_refuses_to_lock_over_clocks_lock(fake_gpu):
    from sitsprof.pmu.errors import PmuError

    clocks.lock_persistent(0, sm=1500)
    with pytest.raises(PmuError, match="--clocks none"):
        with clocks.locked_clocks(0, sm="max"):
            pass
    assert _dev(fake_gpu)["locked_gpu"] == [1500, 1500]  # left as the user locked it
    with clocks.locked_clocks(0, mode="none") as session:
        pass
    assert session.before["sm_mhz"] == 1500
    with pytest.raises(PmuError, match="already locked by `sitsprof clocks lock`.*--replace"):
        clocks.lock_persistent(0, sm="max")  # issue 22.5: a second lock is refused...
    clocks.lock_persistent(0, sm="max", replace=True)  # ...unless it says it replaces the first
    assert _dev(fake_gpu)["locked_gpu"] == [1980, 1980]


def test_two_gpus_reset_only_what_sitsprof_locked(tmp_path, monkeypatch):
    import fake_nvml

    state = fake_nvml.default_state(devices=[fake_nvml._h200(0), fake_nvml._h200(1)])
    monkeypatch.setenv("SITSPROF_STATE_DIR", str(tmp_path / "state"))
    fake = fake_nvml.install(state)
    try:
        clocks.lock_persistent(1, sm="base")
        assert fake.state["devices"][1]["locked_gpu"] == [1755, 1755]
        assert fake.state["devices"][0]["locked_gpu"] is None
        calls_before = fake.calls.get("nvmlDeviceResetGpuLockedClocks", 0)
        done = clocks.reset_clocks()
        assert [d["index"] for d in done] == [1]  # GPU 0 untouched
        assert fake.calls["nvmlDeviceResetGpuLockedClocks"] == calls_before + 1
        assert fake.state["devices"][1]["locked_gpu"] is None
        assert [d["index"] for d in clocks.reset_clocks()] == [0, 1]  # no records: all GPUs
    finally:
        fake_nvml.uninstall()
