"""Root of the `sitsprof` command: global flags, error handling, sub-command registry.

Errors meant for the user are exceptions that carry an integer `exit_code` attribute
(each package defines its own in its `errors` module); they print as one line.
Anything else is a bug: one line too, with a hint to rerun with --debug for the traceback.

`--debug` is a global flag accepted anywhere among sitsprof's own options: before the
sub-command (`sitsprof --debug policy simulate ...`) or after it (`sitsprof policy simulate
... --debug`). Every command gets it as a hidden option; what follows `--` (a workload's
arguments, `record -- python train.py --debug`) is never read as it.
"""
from __future__ import annotations

import importlib
import sys

import click

__all__ = ["COMMAND_MODULES", "cli", "main"]

# Each module listed here exposes COMMANDS, a list of click commands or groups.
COMMAND_MODULES: list[str] = [
    "sitsprof.cli.policy",
    "sitsprof.cli.sits",
    "sitsprof.cli.demo",
    "sitsprof.cli.compile",
    "sitsprof.cli.devices",
    "sitsprof.cli.clocks",
    "sitsprof.cli.record",
    "sitsprof.cli.export",
    "sitsprof.cli.report",
    "sitsprof.cli.probe",
]


_DEBUG = {"on": False}


def _set_debug(ctx: click.Context, _param, value: bool) -> None:
    if value:
        _DEBUG["on"] = True


def _debug_option(hidden: bool) -> click.Option:
    return click.Option(["--debug"], is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
                        hidden=hidden, help="Show full tracebacks instead of one-line errors (anywhere on the line).")


def _add_debug_everywhere(command: click.Command) -> None:
    """Give `command` and every sub-command a hidden --debug (once), so the flag works after
    the sub-command too; commands added later (tests) get it on the next `main`."""
    if not any(isinstance(p, click.Option) and "--debug" in p.opts for p in command.params):
        command.params.append(_debug_option(hidden=True))
    for sub in getattr(command, "commands", {}).values():
        _add_debug_everywhere(sub)


def _show_version(ctx: click.Context, _param, value: bool) -> None:
    """--version, resolved only when asked: importlib.metadata costs ~50 ms of every start-up."""
    if not value or ctx.resilient_parsing:
        return
    from sitsprof.collectors.rundir import tool_version

    click.echo(f"sitsprof, version {tool_version()}")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_show_version,
              help="Show the version and exit.")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Profile NVIDIA Hopper memory behaviour and replay KV-cache traces through the SITS policies."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = _DEBUG["on"]
    if ctx.invoked_subcommand != "clocks":  # `clocks show/reset` report stale locks themselves
        from sitsprof.pmu.lockstate import warn_stale_locks  # reads a state file only, no NVML

        warn_stale_locks()


cli.params.append(_debug_option(hidden=False))
for _name in COMMAND_MODULES:
    for _command in importlib.import_module(_name).COMMANDS:
        cli.add_command(_command)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the command, map errors to one line and an exit status. Standard output
    is checked (`common.stdio`): results that cannot be written are an error, never lost in silence."""
    from sitsprof.common import stdio

    with stdio.checked_stdout():
        code = _main(argv)
        try:
            stdio.finish()
        except BrokenPipeError:
            pass
        except stdio.StdoutError as exc:
            click.echo(f"sitsprof: error: {exc}", err=True)
            code = code or exc.exit_code
    if argv is None and code in _INTERRUPTED:
        _exit_now(code)
    return code


#: Exit statuses of a run stopped by Ctrl-C (130), SIGTERM (143) or SIGHUP (129).
_INTERRUPTED = (130, 143, 129)


def _exit_now(code: int) -> None:
    """Leave at once after a signal: the cleanup already ran (finally blocks on the way out,
    here the atexit handlers: the stdin copy), and the interpreter's own teardown, freeing a
    replay's arrays, took a second more (measured: exit 1.1 s after SIGINT, 0.1 s with this).
    Only for the console script (`main()` with no argv); in-process callers get the status."""
    import atexit
    import os

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _main(argv: list[str] | None) -> int:
    from sitsprof.common import stdio

    args = list(sys.argv[1:] if argv is None else argv)
    _DEBUG["on"] = False
    _add_debug_everywhere(cli)
    from sitsprof.common.signals import Terminated, terminate_raises

    try:
        # SIGTERM/SIGHUP unwind like Ctrl-C (finally blocks, atexit: the stdin copy, workers), exit 128+N
        with terminate_raises():
            try:
                cli.main(args=args, prog_name="sitsprof", standalone_mode=False)
            except SystemError as exc:
                # A signal whose handler raised while a C function ran (a numba dispatcher loading
                # its kernel): Python reports "<f> returned a result with an exception set", the
                # signal's exception as the cause. It is that signal, handled below as one.
                if isinstance(exc.__cause__, (KeyboardInterrupt, Terminated)):
                    raise exc.__cause__ from None
                raise
    except click.exceptions.Abort:
        click.echo("sitsprof: aborted", err=True)
        return 130
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        # One line, like every other error: what was wrong and where to read the usage.
        command = exc.ctx.command_path if exc.ctx is not None else "sitsprof"
        click.echo(f"sitsprof: error: {exc.format_message()} (see '{command} --help')", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"sitsprof: error: {exc.format_message()}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("sitsprof: interrupted", err=True)
        return 130
    except Terminated as exc:
        click.echo(f"sitsprof: {exc}", err=True)
        return int(exc.code)
    except BrokenPipeError:
        stdio.discard_buffered()
        return 0
    except Exception as exc:  # noqa: BLE001 - the one place that turns errors into lines
        if _DEBUG["on"]:
            raise
        if isinstance(exc, stdio.StdoutError):  # nothing more can reach it; the exit flush must not fail again
            stdio.discard_buffered()
        code = getattr(exc, "exit_code", None)
        if isinstance(code, int) and not isinstance(code, bool):
            click.echo(f"sitsprof: error: {exc}", err=True)
            return code
        click.echo(
            f"sitsprof: internal error: {type(exc).__name__}: {exc} "
            "(rerun with --debug for the traceback, and please report it)",
            err=True,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
