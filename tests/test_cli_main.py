"""The root command: version, help, and the one-line error contract (exit 2 for the user's
mistakes, exit 1 with a --debug hint for bugs, tracebacks only with --debug)."""
from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import click
import pytest

from sitsprof.cli import main as main_module


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sitsprof.cli.main", *args], capture_output=True, text=True, timeout=60
    )


def test_version_and_help():
    done = run_cli("--version")
    assert done.returncode == 0
    assert version("sitsprof") in done.stdout
    helped = run_cli("--help")
    assert helped.returncode == 0
    for command in ("policy", "demo", "devices", "clocks", "probe", "run", "report", "calibrate"):
        assert command in helped.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (["no-such-command"], "No such command"),
        (["policy", "simulate", "trace.jsonl", "--format", "parquet"], "--format"),
    ],
)
def test_usage_errors_are_one_line_with_status_2(args, needle):
    done = run_cli(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("sitsprof: error: ") and needle in lines[0]
    assert "--help" in lines[0]


def test_user_error_is_one_line(tmp_path):
    missing = tmp_path / "absent.jsonl"
    done = run_cli("policy", "simulate", str(missing))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert str(missing) in done.stderr and "Traceback" not in done.stderr


def _add_failing_command(exc: Exception) -> None:
    @click.command("boom")
    def boom() -> None:
        raise exc

    main_module.cli.add_command(boom)


def test_bug_is_one_line_with_debug_hint_and_traceback_under_debug(capsys):
    _add_failing_command(KeyError("oops"))
    try:
        assert main_module.main(["boom"]) == 1
        err = capsys.readouterr().err
        assert "internal error: KeyError" in err and "--debug" in err
        with pytest.raises(KeyError):
            main_module.main(["--debug", "boom"])
    finally:
        main_module.cli.commands.pop("boom")


def test_error_with_exit_code_attribute_sets_status(capsys):
    class Refused(RuntimeError):
        exit_code = 2

    _add_failing_command(Refused("no permission to lock clocks; run as root or use --clocks none"))
    try:
        assert main_module.main(["boom"]) == 2
        assert capsys.readouterr().err.strip() == (
            "sitsprof: error: no permission to lock clocks; run as root or use --clocks none"
        )
    finally:
        main_module.cli.commands.pop("boom")
