"""Issue 12 item 3: every command that writes files (`report`, `calibrate`, `policy generate`,
`demo --out`) onto a read-only or full file system, or to a path under a file, prints one line
naming the path and the fix and exits 2, never "internal error" exit 1.

All their writes go through `sitsprof.common.atomic` (atomic_write, make_folder), which turns
an OSError into `common.errors.OutputError`. The full disk is a real tmpfs where one can be
mounted (root) and an injected ENOSPC everywhere; the read-only folder a read-only tmpfs
(root) or a folder without write permission (not root).
"""
from __future__ import annotations

import errno
import os
import subprocess
import types

import pytest

from sitsprof.common import atomic
from sitsprof.common.errors import OutputError
from sitsprof.reports.synthetic import make_synthetic_run


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory):
    """A run directory `report` and `calibrate` accept."""
    return make_synthetic_run(tmp_path_factory.mktemp("runs"), "node", samples=20_000).path


def _commands(run, target):
    """Each writing command with its output at `target` (a file path; demo gets it as its folder)."""
    return {
        "report": ["report", str(run), "-o", str(target)],
        "calibrate": ["calibrate", str(run), "-o", str(target)],
        "policy generate": ["policy", "generate", "--duration", "5", str(target)],
        "demo": ["demo", "--duration", "20", "--policy", "lru", "--out", str(target)],
    }


COMMANDS = ["report", "calibrate", "policy generate", "demo"]


def _mount(folder, options):
    folder.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                          capture_output=True, text=True)
    return made.returncode == 0, made.stderr.strip()


@pytest.fixture
def readonly_dir(tmp_path):
    """A folder nobody may write into: a read-only tmpfs as root, a mode 0555 folder otherwise."""
    folder = tmp_path / "ro"
    if os.geteuid() != 0:
        folder.mkdir()
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mounted, why = _mount(folder, "size=64k,ro")
    if not mounted:
        pytest.skip(f"cannot mount a read-only tmpfs: {why}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.fixture
def full_dir(tmp_path):
    """A full 256 KiB tmpfs (skipped where it cannot be mounted)."""
    folder = tmp_path / "full"
    mounted, why = _mount(folder, "size=256k")
    if not mounted:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {why}")
    with open(folder / "filler", "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(bytes(4096))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _one_line(code, err, *expected):
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("sitsprof: error: cannot "), err
    assert "internal error" not in err and "Traceback" not in err
    for text in expected:
        assert text in err, err


@pytest.mark.parametrize("command", COMMANDS)
def test_output_under_a_file(cli, probe_run, tmp_path, command):
    """12.3: an output path whose folder is a file."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, _, err = cli(*_commands(probe_run, blocker / "out")[command])
    _one_line(code, err, str(blocker), "is a file, not a folder")


@pytest.mark.parametrize("command", COMMANDS)
def test_output_on_a_read_only_folder(cli, probe_run, readonly_dir, command):
    """12.3: a read-only file system (or, not as root, a folder without write permission)."""
    code, _, err = cli(*_commands(probe_run, readonly_dir / "out")[command])
    _one_line(code, err, str(readonly_dir / "out"), "write elsewhere")


def test_demo_out_is_a_read_only_folder(cli, readonly_dir):
    """12.3: `demo --out` naming the read-only folder itself: one line, exit 2 (was exit 1)."""
    code, _, err = cli("demo", "--duration", "20", "--policy", "lru", "--out", str(readonly_dir))
    assert code == 2 and err.count("\n") == 1 and "internal error" not in err, err
    assert str(readonly_dir) in err


@pytest.mark.parametrize("command", COMMANDS)
def test_output_on_a_full_tmpfs(cli, probe_run, full_dir, command):
    """12.3: a real full file system."""
    code, _, err = cli(*_commands(probe_run, full_dir / "out")[command])
    _one_line(code, err, str(full_dir / "out"), "No space left on device", "free space or write elsewhere")


@pytest.mark.parametrize("command", COMMANDS)
def test_output_with_injected_enospc(cli, probe_run, tmp_path, monkeypatch, command):
    """12.3, portable: every rename onto the target fails with ENOSPC, as on a full disk."""
    def replace(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))

    monkeypatch.setattr(atomic, "os", types.SimpleNamespace(**{**vars(os), "replace": replace}))
    code, _, err = cli(*_commands(probe_run, tmp_path / "out")[command])
    _one_line(code, err, str(tmp_path / "out"), "No space left on device", "free space or write elsewhere")
    assert not [p for p in tmp_path.rglob(".*.tmp-*")]  # no temporary file left behind


def test_output_error_is_an_oserror_with_its_errno():
    """Callers that catch OSError keep working; the text is one line with the fix."""
    error = OutputError.from_os_error("/x/y", OSError(errno.EROFS, "Read-only file system"))
    assert isinstance(error, OSError) and error.errno == errno.EROFS and error.exit_code == 2
    assert str(error) == "cannot write /x/y: Read-only file system (the file system is read-only: write elsewhere)"


def test_demo_on_a_full_disk_marks_its_run_failed(tmp_path, cli):
    """22.5: `demo` onto a disk that fills while it writes its synthetic run: the run says
    "failed" with the reason (it said "running" forever), and its reserve file is gone."""
    import json

    folder = tmp_path / "small"
    mounted, why = _mount(folder, "size=512k")
    if not mounted:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {why}")
    try:
        code, out, err = cli("demo", "--duration", "20", "--policy", "lru", "--out", str(folder / "demo"))
        assert code == 2 and "internal error" not in err, err
        run = folder / "demo" / "synthetic-run"
        meta = json.loads((run / "meta.json").read_text())
        assert meta["status"] == "failed" and "no space left" in meta["error"].lower(), meta
        assert not (run / ".sitsprof-reserve").exists()
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
