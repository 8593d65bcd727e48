"""Issue 22 item 1: results written to standard output are checked. A failed write or flush
(`> /dev/full`, a full disk) is one line and a non-zero exit, never exit 0 with a truncated
document nor "internal error"; a closed pipe (`| head`) stays a quiet exit 0."""
from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys

import pytest

from sitsprof.common import stdio

SIMULATE = ["policy", "simulate", "bundled:mooncake", "-p", "lru", "-c", "1000"]


def _sitsprof(args, stdout, timeout=120):
    return subprocess.run([sys.executable, "-m", "sitsprof.cli.main", *args], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if not line.startswith("sitsprof: compil")]
    assert len(lines) == 1, stderr
    assert "internal error" not in lines[0] and "Traceback" not in stderr and "Exception ignored" not in stderr
    return lines[0]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("form", [["--json"], [], ["--stream", "--json"], ["--stream"]],
                         ids=["json", "table", "stream-json", "stream-table"])
def test_dev_full_is_one_line_and_non_zero(form):
    """`--stream` too: its reader's OSError wrapper named the full stdout "cannot read the file"."""
    with open("/dev/full", "w") as full:
        done = _sitsprof([*SIMULATE, *form], full)
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr)
    assert "standard output" in line and "No space left on device" in line


def test_full_disk_file_is_not_a_silent_truncation(tmp_path):
    """A real full file system (tmpfs, root only): the JSON does not fit, the exit says so."""
    folder = tmp_path / "full"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        with open(folder / "filler", "wb", buffering=0) as filler:
            try:
                while True:
                    filler.write(bytes(1024))
            except OSError:
                pass  # full: nothing more fits
        with open(folder / "out.json", "w") as out:
            done = _sitsprof([*SIMULATE, "--json"], out)
        assert done.returncode == 2, done.stderr
        assert "standard output" in _one_error_line(done.stderr)
        with pytest.raises(json.JSONDecodeError):  # what reached the disk is indeed incomplete
            json.loads((folder / "out.json").read_text())
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_closed_pipe_is_a_quiet_success():
    child = subprocess.Popen([sys.executable, "-m", "sitsprof.cli.main", *SIMULATE, "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child.stdout.readline()
    child.stdout.close()  # the reader leaves after one line, like `| head -1`
    stderr = child.stderr.read()
    assert child.wait(timeout=120) == 0, stderr
    assert "Error" not in stderr and "Exception" not in stderr


class _Full(io.StringIO):
    """A stream that takes `room` characters, then fails like a full disk."""

    def __init__(self, room: int):
        super().__init__()
        self.room = room

    def write(self, text):
        if self.tell() + len(text) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(text)


def test_checked_stream_turns_os_errors_into_one_output_error(monkeypatch):
    monkeypatch.setattr(sys, "stdout", _Full(10))
    with stdio.checked_stdout() as out:
        out.write("12345")
        with pytest.raises(stdio.StdoutError) as caught:
            out.write("678901")
    assert sys.stdout.__class__ is _Full  # restored
    assert caught.value.exit_code == 2 and caught.value.errno == errno.ENOSPC
    assert str(caught.value) == ("cannot write results to standard output: No space left on device "
                                 "(free space or write elsewhere)")


def test_checked_stream_keeps_broken_pipe(monkeypatch):
    class Closed(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    with stdio.checked_stdout() as out, pytest.raises(BrokenPipeError):
        out.write("x")


def test_main_reports_a_failed_flush_after_the_command(monkeypatch, capsys):
    """The write that fails is the last flush, after the command returned (the `--json` case)."""
    from sitsprof.cli import main as main_module

    class Buffered(io.StringIO):
        def flush(self):
            if self.getvalue():
                raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(sys, "stdout", Buffered())
    code = main_module.main(["--version"])
    assert code == 2
    assert capsys.readouterr().err.strip() == ("sitsprof: error: cannot write results to standard output: "
                                                "Input/output error (write elsewhere)")
