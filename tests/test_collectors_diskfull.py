"""Issue 12 item 3: recording onto a full (or failing) disk.

A full disk is one line and exit status 2; the writer thread survives failed writes, keeps
the rows it could not write for the next flush, and counts the ones it had to give up, so
meta.json's row counts are what is on disk; meta.json never stays `running` (room for the
last one is set aside at the start); a disk full before the run starts leaves no directory.

Two ways to fill a disk: a real 1 MiB tmpfs (needs root and `mount`, skipped with the reason
otherwise) and an injected OSError(ENOSPC), which runs everywhere.
"""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sitsprof.collectors import rundir as rundir_module
from sitsprof.collectors.errors import DiskFullError
from sitsprof.collectors.record import record
from sitsprof.collectors.rundir import RESERVE, RunDirectory, open_run

RUNNER = Path(__file__).resolve().parent / "fakenvml" / "run_sitsprof.py"


@pytest.fixture
def tiny_fs(tmp_path):
    """A 1 MiB tmpfs (skips where it cannot be mounted)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {made.stderr.strip() or made.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _fill(folder: Path, name: str = "filler") -> Path:
    """Write zeros into `folder/name` until the file system is full."""
    path = folder / name
    block = bytes(4096)
    with open(path, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return path


def _start_record(out: Path, seconds: float, until: Path | None = None):
    """`record` of `sleep seconds`, or with `until` of a workload that ends once that file exists
    (a run whose end the test chooses: on a loaded machine the first flush can come late)."""
    workload = (["sleep", str(seconds)] if until is None else
                ["bash", "-c", f"while [ ! -e '{until}' ]; do sleep 0.05; done"])
    child = subprocess.Popen(
        [sys.executable, str(RUNNER), "record", "--out", str(out), "--name", "r", "--no-gpm", "--interval", "1ms",
         "--", *workload],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    line = child.stderr.readline()
    assert "recording into" in line, line + child.stderr.read()
    return child


def _wait_for_part(run: Path, timeout: float = 10.0) -> None:
    parts = run / "samplers" / "nvml.parts"
    deadline = time.monotonic() + timeout
    while not list(parts.glob("part-*.parquet")):
        assert time.monotonic() < deadline, "no part flushed"
        time.sleep(0.05)


def _rows_on_disk(run) -> int:
    return len(run.read_table("nvml", "sampler"))


def test_disk_filling_mid_run_is_one_line_and_counts_what_was_kept(fake_gpu, tiny_fs, tmp_path):
    """12.3: the disk fills after the first flush: exit 2, one line naming the path and the fix,
    no traceback; the run says failed (not running) with the rows on disk counted exactly."""
    done = tmp_path / "workload-may-end"
    child = _start_record(tiny_fs, 3, until=done)
    try:
        _wait_for_part(tiny_fs / "r")
        _fill(tiny_fs)
        time.sleep(1.2)  # at least one flush fails, and the run ends with the disk still full
        done.touch()
        _, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    assert lines[0].startswith("sitsprof: error: ") and "no space left on device" in lines[0]
    assert "free space or choose another --out" in lines[0] and str(tiny_fs / "r") in lines[0]
    run = open_run(tiny_fs / "r")
    meta = run.meta
    assert meta["status"] == "failed" and meta["complete"] is False and meta["ended_at"]
    assert "no space left on device" in meta["error"]
    kept = _rows_on_disk(run)
    assert kept > 0 and meta["tables"]["samplers"]["nvml"]["rows"] == kept
    lost = meta["sampler_rows_lost"]["nvml"]
    assert lost > 0 and kept + lost == meta["samplers"]["nvml"]["samples"]
    assert not (tiny_fs / "r" / RESERVE).exists()


def test_disk_full_for_a_while_loses_nothing(fake_gpu, tiny_fs, tmp_path):
    """12.3: the writer thread does not die at its first failure: once space is back, the rows
    it held are written and the run completes with every sample."""
    done = tmp_path / "workload-may-end"
    child = _start_record(tiny_fs, 3, until=done)
    try:
        _wait_for_part(tiny_fs / "r")
        filler = _fill(tiny_fs)
        time.sleep(1.2)  # at least one flush fails
        filler.unlink()
        time.sleep(1.2)  # a flush with space back, before the run ends
        done.touch()
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    meta = open_run(tiny_fs / "r").meta
    assert meta["status"] == "complete" and meta["sampler_write_errors"]
    assert any("no space left on device" in e for e in meta["sampler_write_errors"])
    assert sum(meta["sampler_rows_lost"].values()) == 0
    assert _rows_on_disk(open_run(tiny_fs / "r")) == meta["samplers"]["nvml"]["samples"]


@pytest.mark.parametrize("out", ["runs-here", "new/deeper"])
def test_disk_full_before_the_run_leaves_nothing(fake_gpu, tiny_fs, out, cli):
    """12.3: nothing fits: one line, exit 2, and no (empty) directory left behind."""
    _fill(tiny_fs)
    before = sorted(p.name for p in tiny_fs.iterdir())
    code, _, err = cli("record", "--out", str(tiny_fs / out), "--name", "r", "--no-gpm", "--", "true")
    assert code == 2 and err.count("\n") == 1, err
    assert "no space left on device" in err and "free space or choose another --out" in err
    assert sorted(p.name for p in tiny_fs.iterdir()) == before


def test_last_meta_json_fits_on_a_full_disk(tiny_fs):
    """12.3: the reserve set aside at create() leaves room for the run to say how it ended."""
    run = RunDirectory.create(tiny_fs, "r")
    assert (tiny_fs / "r" / RESERVE).stat().st_size > 0
    run.append_table("nvml", {"t_ns": list(range(100))})
    _fill(tiny_fs)
    run.finish("interrupted", error="stopped")
    back = open_run(tiny_fs / "r")
    assert back.meta["status"] == "interrupted" and back.meta["ended_at"]
    assert back.read_table("nvml", "sampler")["t_ns"].tolist() == list(range(100))
    assert not (tiny_fs / "r" / RESERVE).exists()


# -- injected ENOSPC: the same guarantees where no tmpfs can be mounted ---------------------------

class _Disk:
    """Stands in for `atomic_write` in the run directory: full while `full` is set, except for
    a meta.json once its run's reserve file is deleted (the room that frees)."""

    def __init__(self, real):
        self.real, self.full, self.refused = real, False, 0

    def __call__(self, path, write):
        path = Path(path)
        freed = path.name == "meta.json" and not (path.parent / RESERVE).exists()
        if self.full and not freed:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return self.real(path, write)


@pytest.fixture
def disk(monkeypatch):
    fake = _Disk(rundir_module.atomic_write)
    monkeypatch.setattr(rundir_module, "atomic_write", fake)
    return fake


def _workload_filling(disk, full_from: float, full_until: float | None):
    """A Python workload; the disk is 'full' from `full_from` s to `full_until` s into it."""
    import threading

    def toggle():
        time.sleep(full_from)
        disk.full = True
        if full_until is not None:
            time.sleep(full_until - full_from)
            disk.full = False

    threading.Thread(target=toggle, daemon=True).start()


def test_injected_enospc_marks_failed_with_exact_counts(fake_gpu, tmp_path, disk):
    """12.3 (portable): writes fail from 0.25 s on; record raises DiskFullError (exit 2) after
    the run is marked failed; rows on disk are counted exactly and the rest counted lost."""
    _workload_filling(disk, 0.25, None)
    with pytest.raises(DiskFullError, match="no space left on device") as caught:
        record(["sleep", "0.8"], parent=tmp_path, name="r", gpm=False, nvml_interval_s=0.002, flush_every_s=0.05)
    assert caught.value.exit_code == 2 and "free space or choose another --out" in str(caught.value)
    assert disk.refused > 1  # the writer kept trying after the first failure
    run = open_run(tmp_path / "r")
    meta = run.meta
    assert meta["status"] == "failed" and not meta["complete"] and meta["ended_at"]
    assert meta["error"] == str(caught.value) and meta["workload"]["exit_code"] == 0
    rows = meta["tables"]["samplers"]["nvml"]["rows"]
    assert rows == _rows_on_disk(run) > 0
    assert rows + meta["sampler_rows_lost"]["nvml"] == meta["samplers"]["nvml"]["samples"]


def test_injected_enospc_then_space_back_completes(fake_gpu, tmp_path, disk):
    """12.3 (portable): a disk full for a while: the held rows are written when space is back."""
    _workload_filling(disk, 0.2, 0.5)
    run, result = record(["sleep", "0.8"], parent=tmp_path, name="r", gpm=False, nvml_interval_s=0.002,
                         flush_every_s=0.05)
    back = open_run(tmp_path / "r")
    assert disk.refused > 1 and back.complete
    assert sum(back.meta["sampler_rows_lost"].values()) == 0 and back.meta["sampler_write_errors"]
    rows = back.meta["tables"]["samplers"]["nvml"]["rows"]
    assert _rows_on_disk(back) == back.meta["samplers"]["nvml"]["samples"] == rows


def test_injected_enospc_at_create_leaves_no_directory(tmp_path, monkeypatch):
    """12.3 (portable): meta.json does not fit at the start: DiskFullError, no directory left."""
    def full(path, write):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(rundir_module, "atomic_write", full)
    with pytest.raises(DiskFullError, match="no space left on device"):
        RunDirectory.create(tmp_path / "parent" / "deeper", "r")
    assert list(tmp_path.iterdir()) == []


def test_writer_thread_survives_meta_json_failures(tmp_path, disk):
    """12.3: a failing meta.json write in the writer thread is recorded, not a dead thread."""
    from sitsprof.collectors.recorder import Recorder
    from sitsprof.collectors.sampler import PeriodicSampler

    class Counter(PeriodicSampler):
        name = "counter"

        def read(self):
            return {"v": 1}

    run = RunDirectory.create(tmp_path, "r")
    recorder = Recorder(run, [Counter(0.002)], flush_every_s=0.05)
    recorder.start()
    disk.full = True
    time.sleep(0.3)
    assert recorder._writer.is_alive()
    disk.full = False
    stats = recorder.stop()
    run.finish()
    back = open_run(tmp_path / "r")
    assert back.complete and _rows_on_disk_named(back, "counter") == stats["counter"]["samples"]
    assert back.meta["tables"]["samplers"]["counter"]["rows"] == stats["counter"]["samples"]


def _rows_on_disk_named(run, name):
    return len(run.read_table(name, "sampler"))
