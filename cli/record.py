"""`sitsprof record -- COMMAND` (sample a workload into a run directory) and `sitsprof inspect RUN`."""
from __future__ import annotations

import click

from sitsprof.common import jsonout

from .options import DURATION

__all__ = ["COMMANDS", "inspect", "record"]


@click.command("record", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--duration", default=None, type=DURATION,
              help="Stop after this long (10s, 500ms, 2m); the command and its children get SIGTERM "
                   "(SIGKILL 5 s later).")
@click.option("--out", "parent", default="runs", show_default=True, type=click.Path(file_okay=False),
              help="Folder for run directories.")
@click.option("--name", default=None, help="Run directory name (default: run-<UTC time>-<random>).")
@click.option("--device", type=int, default=0, show_default=True,
              help="CUDA device index (NVML's order may differ: see cuda_index in `sitsprof devices --json`).")
@click.option("--clocks", "clock_mode", type=click.Choice(["none", "lock"]), default="none", show_default=True,
              help="lock: pin clocks for the run and restore them after (root); none: record their drift.")
@click.option("--sm", default="max", show_default=True, help="SM clock with --clocks lock: max, base, tdp or MHz.")
@click.option("--memory", default=None, help="Memory clock with --clocks lock: max, base or MHz.")
@click.option("--interval", default="10ms", show_default=True, type=DURATION, help="NVML sampling interval (>= 1ms).")
@click.option("--nvml-groups", default=None,
              help="NVML counter groups, comma separated (default: clocks,power,temperature,utilization,"
                   "event_reasons,memory; also: fields). Fewer groups, faster reads.")
@click.option("--gpm/--no-gpm", default=True, show_default=True,
              help="GPM sampler (Hopper+; skipped if unsupported).")
@click.option("--gpm-interval", default="200ms", show_default=True, type=DURATION,
              help="GPM sampling interval (100ms or more: NVML needs more than 100 ms between GPM samples).")
@click.option("--cupti/--no-cupti", default=False, show_default=True,
              help="CUPTI PM sampler (L2, DRAM; needs cupti-python>=13.3).")
@click.option("--cupti-interval", default="100us", show_default=True, type=DURATION,
              help="CUPTI PM sampling interval (10us works for short windows; its overflow is reported).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def record(duration, parent, name, device, clock_mode, sm, memory, interval, nvml_groups, gpm, gpm_interval, cupti,
           cupti_interval, command):
    """Run COMMAND under the samplers and write a run directory (sitsprof record --duration 10s -- python train.py)."""
    from sitsprof.collectors.gpm_sampler import check_interval
    from sitsprof.collectors.record import check_workload
    from sitsprof.collectors.record import record as do_record

    gpm_interval_s = check_interval(gpm_interval)  # refused before anything is made; durations are seconds (DURATION)

    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    run, result = do_record(
        command, duration, parent=parent, name=name,
        device_index=device, clocks=clock_mode, sm=sm, memory=memory,
        nvml_interval_s=interval,
        nvml_groups=nvml_groups.split(",") if nvml_groups else None,
        gpm=gpm, gpm_interval_s=gpm_interval_s, cupti=cupti,
        cupti_interval_ns=int(round(cupti_interval * 1e9)),
        require=("cupti_pm",) if cupti else (),
        on_start=lambda r: click.echo(f"sitsprof: recording into {r.path}", err=True),
    )
    try:
        _print_summary(run)
    except BrokenPipeError:  # stdout closed (`| head`): the workload's exit status still decides ours
        from sitsprof.common.stdio import discard_buffered

        discard_buffered()
    check_workload(command, result)


def _print_summary(run) -> None:
    for name, stats in (run.meta.get("samplers") or {}).items():
        click.echo(f"{name}: {stats['samples']} samples, {stats['achieved_hz']:.1f} Hz achieved of "
                   f"{stats['requested_hz']:.1f}, {stats['dropped']} dropped"
                   + (", OVERFLOW" if stats.get("overflow") else ""))
    for name, reason in (run.meta.get("samplers_skipped") or {}).items():
        click.echo(f"{name}: skipped: {reason}")
    click.echo(f"run directory: {run.path} ({run.status})")


@click.command("inspect")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def inspect(run_dir: str, as_json: bool) -> None:
    """Status, completeness and tables of a run directory (flags runs that did not finish)."""
    from sitsprof.collectors.rundir import inspect_run

    summary = inspect_run(run_dir)
    if as_json:
        click.echo(jsonout.dumps(summary, indent=2))
        return
    flag = "complete" if summary["complete"] else f"INCOMPLETE (status: {summary['status']})"
    if summary.get("damaged"):
        flag = (f"DAMAGED ({len(summary['damaged'])} unreadable: {', '.join(summary['damaged'])}; "
                f"status: {summary['status']})")
    click.echo(f"{summary['path']}: {flag}")
    click.echo(f"  started {summary['started_at']}, ended {summary['ended_at'] or '-'}")
    if summary["error"]:
        click.echo(f"  error: {summary['error']}")
    for table, rows in summary["tables"].items():
        click.echo(f"  {table}: {rows}" if isinstance(rows, str) else f"  {table}: {rows} rows")
    for what, why in summary.get("damaged", {}).items():
        if what not in summary["tables"]:
            click.echo(f"  {what}: {why}")


COMMANDS = [record, inspect]
