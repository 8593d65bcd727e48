"""`sitsprof probe latency|tlb|bandwidth|loaded` and `sitsprof run`: the probe suites.

Wiring only: plans come from `sitsprof.probes.suite`, launches from `sitsprof.probes.gpu`,
the run directory, clock lock and samplers from `sitsprof.collectors.recording`.
Plans are validated against the device before the run directory is made or anything runs;
`--dry-run` prints the plan (against `probes.assumed`'s H200 when no GPU is visible) and launches nothing.
"""
from __future__ import annotations

import sys

import click

__all__ = ["COMMANDS", "execute", "figures", "probe", "run"]

_DEVICE_OPTS = [
    click.option("--device", "index", type=click.IntRange(min=0), default=0, show_default=True,
                 help="CUDA device index (NVML's order may differ: see cuda_index in `sitsprof devices --json`)."),
    click.option("--out", "parent", default="runs", show_default=True, type=click.Path(file_okay=False),
                 help="Folder for run directories."),
    click.option("--name", default=None, help="Run directory name (default: run-<UTC time>-<random>)."),
    click.option("--dry-run", is_flag=True, help="Print the plan and the checks; launch nothing."),
    click.option("--gpm", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
                 help="GPM sampler (Hopper-only counters): auto skips it where unsupported, on requires it."),
]


def _device_options(fn):
    for opt in reversed(_DEVICE_OPTS):
        fn = opt(fn)
    return fn


def _print_plan(console, plan, limits, dry_run: bool) -> None:
    from sitsprof.common.sizes import format_size

    console.print(f"[bold]{plan.name} suite[/] on {limits.describe()}: {limits.sm_count} SMs, "
                  f"L2 {format_size(limits.l2_bytes or 0)}, {format_size(limits.free_bytes)} free")
    for line in plan.describe():
        part = line.split(":", 1)[0]
        if part in plan.parts:
            console.print(f"  {line}")
    if dry_run:
        console.print(f"  planner's estimate: about {plan.estimate_total_seconds():.0f} s "
                      "(nominal latencies; not a measurement)")


def execute(parts, suite: str, index: int, parent: str, name: str | None, clocks: str, dry_run: bool,
            gpm: str, overrides: dict | None = None) -> None:
    """Plan, validate, then (unless dry-run) lock clocks, sample, probe, and write one run directory."""
    from rich.console import Console

    from sitsprof.probes.suite import dry_run_line, prepare_suite

    console = Console(stderr=True, soft_wrap=True)
    # PlanError here: nothing made, nothing launched
    plan, limits = prepare_suite(suite, parts, index, overrides, dry_run,
                                 hopper_only="the GPM counters (--gpm on)" if gpm == "on" else None)
    _print_plan(console, plan, limits, dry_run)
    if dry_run:
        console.print(dry_run_line(limits))
        return
    run = _run(plan, index, parent, name, clocks, gpm, console)
    click.echo(f"run directory: {run.path} ({run.status})")


def _run(plan, index, parent, name, clocks, gpm, console):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from sitsprof.collectors.recording import recording
    from sitsprof.probes.suite import run_suite

    meta = {"suite": plan.name, "parts": list(plan.parts), "command_line": sys.argv}
    mode = "none" if clocks == "none" else "lock"
    with recording(parent, name, "probe", meta, index, clocks=mode, sm=None if mode == "none" else clocks,
                   gpm=gpm != "off", optional=() if gpm == "on" else ("gpm",)) as rec:
        tasks: dict = {}
        with Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console) as bar:
            def progress(part, advance, total):
                if part not in tasks:
                    tasks[part] = bar.add_task(part, total=total)
                bar.advance(tasks[part], advance)

            run_suite(rec.run, plan, index, progress)
    return rec.run


# `run` and every `probe <part>` take these with one definition, so their defaults cannot drift apart.
_SUITE_OPT = click.option("--suite", type=click.Choice(["quick", "full"]), default="quick", show_default=True,
                          help="quick is sized for under 3 minutes on an H200 (planned, not yet timed on one); "
                               "full: more footprints and samples.")
_CLOCKS_OPT = click.option("--clocks", type=click.Choice(["max", "base", "none"]), default="none",
                           show_default=True, help="Lock the SM clock for the run (root; restored after) "
                                                   "or leave it and record its drift.")


def _shared_options(fn):
    """--suite, --clocks and the device options, as `run` and `probe <part>` both take them."""
    fn = _device_options(fn)
    for opt in (_CLOCKS_OPT, _SUITE_OPT):
        fn = opt(fn)
    return fn


@click.group("probe")
def probe() -> None:
    """Run one probe (latency ladder, TLB sweep, bandwidth, loaded latency) into a run directory."""


def _probe_command(part: str, doc: str, options: list):
    """`sitsprof probe <part>`: one part of the suite with its own overrides."""

    def command(suite, quick, clocks, index, parent, name, dry_run, gpm, **overrides):
        execute((part,), "quick" if quick else suite, index, parent, name, clocks, dry_run, gpm, overrides)

    command.__doc__ = doc
    for opt in reversed([*options, click.option("--quick", is_flag=True, hidden=True,
                                                help="Same as --suite quick (the default; kept for old scripts).")]):
        command = opt(command)
    return probe.command(part)(_shared_options(command))


_probe_command("latency", "Pointer-chase latency ladder over 128 B lines, tiers by change-point detection.", [
    click.option("--min-footprint", default=None, help="Smallest footprint (default 16KiB)."),
    click.option("--max-footprint", default=None, help="Largest footprint (default 1GiB quick, 4GiB full)."),
    click.option("--per-octave", type=int, default=None, help="Footprints per doubling (default 2 quick, 4 full)."),
    click.option("--samples", type=int, default=None, help="Timed accesses per footprint."),
])
_probe_command("tlb", "Chase with page-sized strides over growing footprints; latency steps = TLB reach.", [
    click.option("--strides", default=None, help="Comma-separated strides (default 2MiB,32MiB[,512MiB])."),
    click.option("--max-footprint", default=None, help="Largest footprint (default 4GiB quick, 16GiB full)."),
])
_probe_command("bandwidth", "Read, write and copy kernels at several intensities, against cudaMemcpy D2D.", [
    click.option("--sms", type=int, default=None, help="Active SMs (one setting instead of the sweep)."),
    click.option("--blocks-per-sm", type=int, default=None,
                 help="Blocks per SM (512 threads each, fewer above 4 blocks so they fit an SM)."),
    click.option("--throttle-ns", type=int, default=None, help="Sleep per iteration, ns (with --sms)."),
    click.option("--buffer", default=None, help="Buffer size (default 1GiB quick, 4GiB full)."),
])
_probe_command("loaded", "Latency on one SM while a saturator streams on the others, idle to peak; "
               "replacement delay.", [
    click.option("--levels", type=int, default=None, help="Load levels including idle (default 9 quick, 17 full)."),
    click.option("--retouch", default=None, help="Re-touch ring, fresh lines each round (default 4MiB)."),
    click.option("--max-footprint", default=None, help="HBM chase footprint."),
    click.option("--sms", type=int, default=None, help="Saturator SMs (default all; the probe's SM is left free)."),
    click.option("--saturator", type=click.Choice(["read", "copy"]), default=None,
                 help="Saturator traffic: read (default) or copy (reads and writes)."),
])


@probe.command("figures")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
def figures(run_dir: str) -> None:
    """The figures a probe run must show: tiers vs published plateaus, copy vs memcpy, load levels."""
    from sitsprof.reports.figures import figures_report

    for line in figures_report(run_dir):
        click.echo(line)


@click.command("run")
@click.option("--parts", default="latency,tlb,bandwidth,loaded", show_default=True,
              help="Comma-separated probes to run.")
@_shared_options
def run(suite, clocks, parts, index, parent, name, dry_run, gpm):
    """Lock clocks, start the samplers, run the probe suite, write one run directory."""
    from sitsprof.probes.suite import parse_parts

    execute(parse_parts(parts), suite, index, parent, name, clocks, dry_run, gpm)


COMMANDS = [probe, run]
