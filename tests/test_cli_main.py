"""The root command: version, help, and the one-line error contract (exit 2 for the user's
mistakes, exit 1 with a --debug hint for bugs, tracebacks only with --debug)."""
from __future__ import annotations

import signal
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


@pytest.mark.parametrize("cause, code", [(KeyboardInterrupt(), 130), ("terminated", 143)])
def test_a_signal_inside_a_c_call_is_that_signal_not_an_internal_error(capsys, cause, code):
    """A SIGTERM whose handler raised inside a numba dispatcher call reached main as
    "SystemError: CPUDispatcher(...) returned a result with an exception set" (its cause the
    Terminated): it exits 128 + N like any other signal (seen in a fresh-clone make test)."""
    from sitsprof.common.signals import Terminated

    if cause == "terminated":
        cause = Terminated(signal.SIGTERM)
    error = SystemError("CPUDispatcher(<function f>) returned a result with an exception set")
    error.__cause__ = cause
    _add_failing_command(error)
    try:
        assert main_module.main(["boom"]) == code
        assert "internal error" not in capsys.readouterr().err
    finally:
        main_module.cli.commands.pop("boom")
    _add_failing_command(SystemError("a real bug"))  # without a signal as its cause: still an internal error
    try:
        assert main_module.main(["boom"]) == 1
        assert "internal error: SystemError" in capsys.readouterr().err
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
