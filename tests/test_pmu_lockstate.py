"""The clock-lock state files with the fake NVML: damaged files, staleness beyond the pid,
records of absent GPUs, `clocks reset` under a live run, and what locking does on the card.

Issue 12 item 2 (every state file understood or reported and removable; boot id and start
time; --force and the run's meta.json) and issue 10 item 13 (persistence mode, MIG, records
of locks the driver dropped, `clocks show` against NVML, `devices`).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fake_nvml
import pytest

from sitsprof.collectors.rundir import open_run
from sitsprof.pmu import clocks, lockstate
from sitsprof.pmu.errors import PmuError, UnsupportedError

RUNNER = Path(__file__).resolve().parent / "fakenvml" / "run_sitsprof.py"

DAMAGED = {
    "list": b"[]",
    "number": b"42",
    "null": b"null",
    "string": b'"clocks"',
    "string pid": json.dumps({"pid": "123", "uuid": "U"}).encode(),
    "huge pid": json.dumps({"pid": 2**40, "uuid": "U"}).encode(),
    "pid 0": json.dumps({"pid": 0, "uuid": "U"}).encode(),
    "no pid": json.dumps({"uuid": "U", "resolved": {"sm": 1500}}).encode(),
    "no keys": b"{}",
    "bool pid": json.dumps({"pid": True, "uuid": "U"}).encode(),
    "resolved not a dict": json.dumps({"pid": 1, "uuid": "U", "resolved": [1500]}).encode(),
    "invalid json": b'{"pid": 12',
    "empty": b"",
    "not utf-8": b'{"pid": 1, "uuid": "\xff\xfe"}',
    "deep nesting": b"[" * 200_000,
}


def _uuid(fake, index=0):
    return fake.state["devices"][index]["uuid"]


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _sitsprof(*args, timeout=30):
    return subprocess.run([sys.executable, str(RUNNER), *args], capture_output=True, text=True,
                          timeout=timeout, env=os.environ.copy())


def _locked(fake_state_path):
    return fake_nvml.read_state(fake_state_path)["devices"][0]["locked_gpu"]


@pytest.mark.parametrize("name", list(DAMAGED))
def test_damaged_state_file_is_reported_refused_and_removed_by_reset(fake_gpu, cli, name):
    """12.2: `[]`, `42`, `null`, a string pid, 2**40, pid 0, no pid, missing keys, invalid JSON,
    non-UTF-8: never a crash; reported by the warning and `clocks show`, refused with the fix
    named, and removed by `clocks reset` (which says so and resets that GPU)."""
    path = lockstate.state_path(_uuid(fake_gpu))
    path.parent.mkdir(parents=True)
    path.write_bytes(DAMAGED[name])
    (entry,) = lockstate.lock_records()
    assert entry["state"] == lockstate.DAMAGED and entry["problem"]
    warning = lockstate.stale_lock_warning()
    assert str(path) in warning and "damaged" in warning and "`sitsprof clocks reset` removes it" in warning

    with pytest.raises(PmuError, match=r"damaged .*run `sitsprof clocks reset` to remove it") as info:
        with clocks.locked_clocks(0, sm="max"):
            pytest.fail("must not lock over a damaged state file")
    assert info.value.exit_code == 2 and "\n" not in str(info.value)
    assert fake_gpu.state["devices"][0]["locked_gpu"] is None

    code, out, err = cli("clocks", "show")
    assert code == 0, err
    assert "DAMAGED" in out and "`sitsprof clocks reset` removes it" in out

    code, out, err = cli("clocks", "reset")
    assert code == 0, err
    assert "internal error" not in err
    assert f"GPU 0 ({_uuid(fake_gpu)}): clocks reset to the driver default (removed its damaged lock record" in out
    assert not path.exists()
    assert lockstate.lock_records() == [] and lockstate.stale_lock_warning() is None


def test_damaged_file_naming_no_gpu_is_removed(fake_gpu, cli):
    """12.2: a damaged file whose name matches no GPU is still removed, and reset says so."""
    path = lockstate.state_dir() / "clocks-garbage.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00\x01")
    code, out, err = cli("clocks", "reset")
    assert code == 0, err
    assert f"removed damaged lock record {path}" in out and "names no GPU on this node" in out
    assert not path.exists()
    assert fake_gpu.calls.get("nvmlDeviceResetGpuLockedClocks", 0) == 0  # no GPU of ours touched


def _write(fake, **fields) -> Path:
    uuid = fields.pop("uuid", None) or _uuid(fake)
    record = lockstate.new_record(0, uuid, {"sm": 1500, "memory": None}, {}, persistent=fields.pop("persistent", False))
    record.update(fields)
    path = lockstate.state_path(uuid)
    lockstate.write_state(path, record)
    return path


def test_record_names_boot_and_process_start(fake_gpu):
    """12.2: a record carries the boot id and the process start time (/proc/<pid>/stat field 22)."""
    path = _write(fake_gpu)
    record = json.loads(path.read_text())
    assert record["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    start = Path(f"/proc/{os.getpid()}/stat").read_text().rpartition(")")[2].split()[19]
    assert record["pid_start"] == int(start)
    assert lockstate.read_entry(path)["state"] == lockstate.HELD  # this very process, alive


def test_reused_pid_and_reboot_are_not_a_live_holder(fake_gpu):
    """12.2: a live pid is not enough: another start time (pid reused) makes the record stale,
    another boot id (rebooted: locked clocks are gone) makes it dropped; both let a run lock."""
    path = _write(fake_gpu, pid_start=lockstate.process_start(os.getpid()) + 12345)
    entry = lockstate.read_entry(path)
    assert entry["state"] == lockstate.STALE and entry["stale"]
    assert "may still be locked" in lockstate.stale_lock_warning()

    path = _write(fake_gpu, boot_id="00000000-0000-0000-0000-000000000000")
    entry = lockstate.read_entry(path)
    assert entry["state"] == lockstate.DROPPED and "rebooted" in entry["problem"]
    assert "no longer holds" in lockstate.stale_lock_warning()
    with clocks.locked_clocks(0, sm="max") as session:
        assert fake_gpu.state["devices"][0]["locked_gpu"] == [1980, 1980]
    assert session.restored and not session.reset_by_other and not path.exists()


def test_absent_gpu_record_is_shown_and_cleared(fake_gpu, cli):
    """12.2: a record of a GPU that is not on this node: warned about, listed by `clocks show`,
    and removed by `clocks reset`, which says it could not restore that GPU."""
    path = _write(fake_gpu, uuid="GPU-gone-0000", pid=_dead_pid())
    assert "GPU 0 (GPU-gone-0000)" in lockstate.stale_lock_warning()
    code, out, _ = cli("clocks", "show")
    assert code == 0 and "is for GPU GPU-gone-0000, which is not on this node" in out
    code, out, err = cli("clocks", "reset")
    assert code == 0, err
    assert f"GPU GPU-gone-0000 is not on this node: could not restore its clocks; removed its lock record {path}" in out
    assert not path.exists() and lockstate.stale_lock_warning() is None
    assert fake_gpu.calls.get("nvmlDeviceResetGpuLockedClocks", 0) == 0


def test_reset_refuses_a_live_run_unless_forced(fake_gpu, cli):
    """12.2: `clocks reset` under a live run refuses, naming the holder; --force resets and marks
    the run's record, which the run reads back when it releases."""
    holder = subprocess.Popen(["sleep", "30"])
    try:
        path = _write(fake_gpu, pid=holder.pid, pid_start=lockstate.process_start(holder.pid),
                      command_line="sitsprof run --clocks lock -- ./bench")
        clocks.apply_clocks(0, {"sm": 1500, "memory": None})
        code, out, err = cli("clocks", "reset")
        assert code == 2
        assert (f"GPU 0's clocks are held by a running sitsprof run (pid {holder.pid} on " in err
                and "`sitsprof run --clocks lock -- ./bench`, since 20" in err and "--force" in err)
        assert err.count("\n") == 1 and fake_gpu.state["devices"][0]["locked_gpu"] == [1500, 1500]

        code, out, err = cli("clocks", "reset", "--force")
        assert code == 0, err
        assert f"held by a running sitsprof run, pid {holder.pid}" in out
        assert "will record that its lock was reset" in out
        assert fake_gpu.state["devices"][0]["locked_gpu"] is None
        record = json.loads(path.read_text())
        assert record["reset_by"]["pid"] == os.getpid()
        assert lockstate.release(path, record["lock_id"]) == record["reset_by"]
        assert not path.exists()
    finally:
        holder.kill()
        holder.wait()


def test_forced_reset_is_recorded_in_the_runs_meta(fake_gpu, tmp_path):
    """12.2: a run whose lock `clocks reset --force` took over says so in meta.json
    (`clocks.reset_by_other`), instead of claiming it held the clocks throughout."""
    state = os.environ[fake_nvml.ENV]
    child = subprocess.Popen(
        [sys.executable, str(RUNNER), "record", "--out", str(tmp_path / "runs"), "--name", "r", "--clocks", "lock",
         "--sm", "1500", "--no-gpm", "--interval", "20ms", "--", "sleep", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert "recording into" in child.stderr.readline()
        assert _locked(state) == [1500, 1500]
        refused = _sitsprof("clocks", "reset")
        assert refused.returncode == 2 and f"(pid {child.pid} on " in refused.stderr
        assert _locked(state) == [1500, 1500]
        forced = _sitsprof("clocks", "reset", "--force")
        assert forced.returncode == 0, forced.stderr
        assert _locked(state) is None
        child.send_signal(signal.SIGINT)
        child.wait(timeout=15)
    finally:
        if child.poll() is None:
            child.kill()
    meta = open_run(tmp_path / "runs" / "r").meta
    assert meta["clocks"]["reset_by_other"] is True
    assert meta["clocks"]["reset_by"]["command_line"].endswith("clocks reset --force")
    assert not list((tmp_path / "state").glob("clocks-*.json"))


def test_run_meta_says_not_reset_by_other_normally(fake_gpu):
    with clocks.locked_clocks(0, sm="max") as session:
        pass
    assert session.to_dict()["reset_by_other"] is False and session.to_dict()["persistence_mode"] is True


# -- issue 10 item 13: what locking does on this card ------------------------------------
def test_lock_behaviour_persistence_on_and_off(fake_gpu):
    """10.13: persistence on -> a lock survives the process; off -> it does not; both said."""
    on = clocks.lock_behaviour(0)
    assert on["supported"] is True and on["persistence_mode"] is True and on["lock_survives_process"] is True
    assert on["mig_enabled"] is False and "persistence mode is on" in on["summary"]
    fake_gpu.state["devices"][0]["persistence_mode"] = 0
    off = clocks.lock_behaviour(0)
    assert off["lock_survives_process"] is False and "driver drops a lock when the last process" in off["summary"]
    fake_gpu.state["devices"][0]["mig_supported"] = False  # NVML_ERROR_NOT_SUPPORTED: unknown, not a crash
    assert clocks.lock_behaviour(0)["mig_enabled"] is None


def test_mig_enabled_refuses_locking(fake_gpu, tmp_path):
    """10.13: with MIG enabled the clocks are every instance's: no lock, no state file, one line."""
    fake_gpu.state["devices"][0]["mig_mode"] = [1, 1]
    assert clocks.lock_behaviour(0)["supported"] is False
    for lock in (lambda: clocks.locked_clocks(0, sm="max").__enter__(), lambda: clocks.lock_persistent(0)):
        with pytest.raises(UnsupportedError, match="MIG mode is enabled.*--clocks none") as info:
            lock()
        assert info.value.exit_code == 2
    assert "nvmlDeviceSetGpuLockedClocks" not in fake_gpu.calls
    assert not list((tmp_path / "state").glob("clocks-*.json"))


def test_devices_reports_clock_locking(fake_gpu, cli):
    """10.13: `sitsprof devices` says what locking would do on this card (JSON and table)."""
    fake_gpu.state["devices"][0]["persistence_mode"] = 0
    code, out, err = cli("devices", "--json")
    assert code == 0, err
    locking = json.loads(out)[0]["capabilities"]["clock_locking"]
    assert locking["supported"] is True and locking["lock_survives_process"] is False
    code, out, err = cli("devices")
    assert code == 0, err
    assert "clock lock on this card" in out and "persistence mode is off" in " ".join(out.split())


def test_lock_the_driver_dropped_is_reported_as_dropped(fake_gpu, cli):
    """10.13: persistence off: `clocks lock` warns; once its process has exited the driver has
    dropped the lock (the fake tears down at the last nvmlShutdown), and the record says
    "dropped by the driver" and `clocks show` finds the clocks not in effect, instead of a
    held lock; `clocks reset` removes the record."""
    state = os.environ[fake_nvml.ENV]
    devices = fake_nvml.read_state(state)
    devices["devices"][0]["persistence_mode"] = 0
    fake_nvml.write_state(state, devices)
    locked = _sitsprof("clocks", "lock", "--sm", "1500")
    assert locked.returncode == 0, locked.stderr
    assert "persistence mode is off on GPU 0: the driver drops this lock" in locked.stderr
    assert _locked(state) is None  # dropped when the last client (that process) exited
    (entry,) = lockstate.lock_records()
    assert entry["state"] == lockstate.DROPPED and "persistence mode was off" in entry["problem"]
    shown = _sitsprof("clocks", "show")
    assert shown.returncode == 0, shown.stderr
    assert "DROPPED by the driver" in shown.stdout and "the lock is not in effect" in shown.stdout
    reset = _sitsprof("clocks", "reset")
    assert reset.returncode == 0 and "which no longer held" in reset.stdout
    assert lockstate.lock_records() == []


def test_killed_run_with_persistence_off_is_dropped_not_stale(fake_gpu):
    """10.13: a run killed with persistence mode off left a record; it is reported as dropped by
    the driver, not as clocks that may still be locked."""
    _write(fake_gpu, pid=_dead_pid(), persistence_mode=False)
    (entry,) = lockstate.lock_records()
    assert entry["state"] == lockstate.DROPPED and not entry["stale"]
    assert "may still be locked" not in lockstate.stale_lock_warning()


def test_clocks_show_compares_the_record_with_nvml(fake_gpu, cli):
    """10.13: `clocks show` checks a recorded lock against the clocks NVML reports now."""
    clocks.lock_persistent(0, sm=1500)
    status = clocks.clock_status(0)
    assert status["locks"][0]["in_effect"] is True
    fake_gpu.state["devices"][0]["locked_gpu"] = None  # reset behind sitsprof's back (nvidia-smi -rgc)
    status = clocks.clock_status(0)
    assert status["locks"][0]["in_effect"] is False
    code, out, _ = cli("clocks", "show")
    assert code == 0 and "NVML shows other clocks now, so the lock is not in effect" in out


def test_reset_clears_a_record_on_a_gpu_without_lock_support(fake_gpu, cli):
    """NVML_ERROR_NOT_SUPPORTED from the reset: the record is still removed, and reset says why."""
    path = _write(fake_gpu, pid=_dead_pid())
    fake_gpu.state["devices"][0]["gpu_lock_supported"] = False
    code, out, err = cli("clocks", "reset")
    assert code == 0, err
    assert "nothing to restore" in out and "NOT_SUPPORTED" in out
    assert not path.exists()


def test_state_folder_not_writable_is_one_line(fake_gpu, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SITSPROF_STATE_DIR", str(blocker / "state"))
    with pytest.raises(PmuError, match="cannot use the clock-lock state folder .*SITSPROF_STATE_DIR") as info:
        with clocks.locked_clocks(0, sm="max"):
            pass
    assert info.value.exit_code == 2
    assert fake_gpu.state["devices"][0]["locked_gpu"] is None


def test_lock_file_held_too_long_is_one_line(fake_gpu):
    import fcntl

    path = lockstate.state_path(_uuid(fake_gpu))
    path.parent.mkdir(parents=True)
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        started = time.monotonic()
        with pytest.raises(PmuError, match="has held .* for over 0.2 s"):
            with lockstate.exclusive(path, wait_s=0.2):
                pass
        assert time.monotonic() - started < 2
    finally:
        os.close(fd)


def test_reset_without_root_removes_damaged_records_but_keeps_a_lock_that_may_hold(fake_gpu, cli):
    """12.2: without root a damaged (or dropped) record is still removable; a stale one, whose
    lock may still hold, stays until root resets the clocks (the error says so)."""
    fake_gpu.state["root"] = False
    path = lockstate.state_path(_uuid(fake_gpu))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"null")
    code, out, err = cli("clocks", "reset")
    assert code == 0, err
    assert "its clocks were not reset" in out and "needs root" in out and not path.exists()
    _write(fake_gpu, pid=_dead_pid())
    code, out, err = cli("clocks", "reset")
    assert code == 2 and "needs root" in err and path.exists()


def test_memory_lock_not_supported_is_one_line_and_leaves_nothing(fake_gpu, tmp_path):
    """10.13 (NOT_SUPPORTED checked): nvmlDeviceSetMemoryLockedClocks answering NVML_ERROR_NOT_SUPPORTED is
    one line and leaves no record (the mapping existed; the fake now answers it, so it is pinned)."""
    fake_gpu.state["devices"][0]["mem_lock_supported"] = False
    with pytest.raises(UnsupportedError, match="locking the memory clock: not supported .*NVML_ERROR_NOT_SUPPORTED"):
        with clocks.locked_clocks(0, sm="max", memory="max"):
            pytest.fail("must not run unlocked as if locked")
    assert fake_gpu.state["devices"][0]["locked_gpu"] is None
    assert not list((tmp_path / "state").glob("clocks-*.json"))


# -- issue 22 item 5 -----------------------------------------------------------------------------
def test_two_clocks_locks_second_refused(fake_gpu):
    """22.5: `clocks lock` takes the same check-and-write as a locked run: two concurrent
    `clocks lock` commands, exactly one succeeds and the other is refused naming the first."""
    state = os.environ[fake_nvml.ENV]
    first = subprocess.Popen([sys.executable, str(RUNNER), "clocks", "lock", "--sm", "1500"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    second = subprocess.Popen([sys.executable, str(RUNNER), "clocks", "lock", "--sm", "max"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    results = [(p.wait(timeout=60), *p.communicate()) for p in (first, second)]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, _, err in results if code == 2)
    assert "already locked by `sitsprof clocks lock`" in refused and "--replace" in refused
    assert len(refused.strip().splitlines()) == 1
    (entry,) = lockstate.lock_records()
    assert _locked(state) == [entry["resolved"]["sm"]] * 2  # the record says what is in effect


def test_clocks_lock_while_a_run_holds_the_lock_is_refused_with_its_own_fix(fake_gpu, cli):
    """22.5: `clocks lock` while a locked run holds the GPU is refused like that run's
    lock, with a fix `clocks lock` has: it has no --clocks none, which the line offered."""
    holder = subprocess.Popen(["sleep", "30"])
    try:
        _write(fake_gpu, pid=holder.pid, pid_start=lockstate.process_start(holder.pid), command_line="sleep 30")
        code, out, err = cli("clocks", "lock", "--sm", "1500")
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "held by another sitsprof run" in err and "wait for it to finish" in err
        assert "--clocks none" not in err
    finally:
        holder.kill()
        holder.wait()


def test_record_without_pid_start_and_a_reused_pid_is_stale(fake_gpu):
    """22.5: a record without pid_start whose pid now belongs to an unrelated process (started
    after the record was written) does not hold the lock: stale, and `clocks reset` removes it."""
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        path = _write(fake_gpu, pid=sleeper.pid, pid_start=None, locked_at="2020-01-01T00:00:00+00:00")
        entry = lockstate.read_entry(path)
        assert entry["state"] == lockstate.STALE
        done = clocks.reset_clocks()
        assert not path.exists() and done[0]["record"]["state"] == lockstate.STALE
        # the same live pid, with a record written after it started, running the record's
        # command, still holds it
        path = _write(fake_gpu, pid=sleeper.pid, pid_start=None, command_line="sleep 30")
        assert lockstate.read_entry(path)["state"] == lockstate.HELD
        path.unlink()
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("command_line,held", [
    ("sleep 31", True), ("/usr/bin/sleep.py 31", True),  # argv[0] as the writer saw it: a script's path
    ("sitsprof record --clocks lock -- x", False), ("sleep 30", False), ("sitsprof run", False)])
def test_record_without_pid_start_or_locked_at_is_held_only_by_its_command(fake_gpu, cli, command_line, held):
    """22.7: a record with neither pid_start nor locked_at (hand-made) whose pid is a live,
    unrelated process blocked `clocks reset` and every locked run, and `--force` left it
    behind; a process that runs another command than the record's is not its writer."""
    sleeper = subprocess.Popen(["sleep", "31"])
    try:
        path = _write(fake_gpu, pid=sleeper.pid, pid_start=None, locked_at=None, command_line=command_line)
        assert lockstate.read_entry(path)["state"] == (lockstate.HELD if held else lockstate.STALE)
        code, out, err = cli("clocks", "reset")
        assert (code, path.exists()) == ((2, True) if held else (0, False)), (out, err)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_state_and_lock_files_that_are_folders_are_recovered(fake_gpu, cli):
    """22.5: a state file or a lock file that is a folder is damage `clocks reset` removes, and a
    later lock works."""
    path = lockstate.state_path(_uuid(fake_gpu))
    path.mkdir(parents=True)
    (path / "x").write_text("x")
    path.with_suffix(".lock").mkdir()
    (entry,) = lockstate.lock_records()
    assert entry["state"] == lockstate.DAMAGED
    code, out, err = cli("clocks", "reset")
    assert code == 0, err
    assert not path.exists() and not path.with_suffix(".lock").is_dir()
    code, out, err = cli("clocks", "lock", "--sm", "1500")
    assert code == 0, err
    assert cli("clocks", "reset")[0] == 0


def test_another_hosts_record_is_reported(fake_gpu, cli):
    """22.5: a record another host wrote (a shared home folder, or this machine under another
    name) is shown by `clocks show`, not silently skipped."""
    path = _write(fake_gpu, host="elsewhere-node", pid=_dead_pid())
    assert lockstate.read_entry(path) is None  # still not this host's lock
    (other,) = lockstate.other_host_records()
    assert other["host"] == "elsewhere-node"
    code, out, err = cli("clocks", "show")
    assert code == 0, err
    assert "written on host elsewhere-node" in out
