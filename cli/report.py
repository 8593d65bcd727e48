"""`sitsprof calibrate` and `sitsprof report`: wiring only (the work is in sitsprof.reports)."""
from __future__ import annotations

import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import click

__all__ = ["COMMANDS", "STDOUT", "calibrate_cmd", "report_cmd"]

#: `-o -`: the file goes to standard output (as `policy simulate --json -` users expect)
STDOUT = Path("-")


@contextmanager
def _output(output: Path, name: str):
    """The path to write: `output`, or for `-` a temporary file whose bytes are then copied to
    standard output (checked like any result: a full disk is one line, exit 2); the summary line
    goes to stderr then, so stdout holds the document alone."""
    if output != STDOUT:
        yield output, False
        return
    with tempfile.TemporaryDirectory(prefix="sitsprof-out-") as folder:
        path = Path(folder) / name
        yield path, True
        with path.open(encoding="utf-8") as src:  # text through sys.stdout: its writes are the checked ones
            shutil.copyfileobj(src, sys.stdout)
        sys.stdout.flush()


@click.command("calibrate")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("calibration.json"), show_default=True,
              help="Calibration file to write (schema v1); - for standard output.")
@click.option("--allow-incomplete", is_flag=True,
              help="Write what an unfinished or partial run has (the missing parts are recorded in the file).")
@click.option("--name", default=None,
              help="Calibration name (default: measured-HOST-RUN; synthetic-HOST-RUN for a generated run).")
def calibrate_cmd(run_dir: Path, output: Path, allow_incomplete: bool, name: str | None) -> None:
    """Fill a calibration file from a measured RUN_DIR (refuses incomplete runs unless told)."""
    from sitsprof.reports.fromrun import calibrate

    with _output(output, "calibration.json") as (target, to_stdout):
        path, cal = calibrate(run_dir, target, allow_incomplete=allow_incomplete, name=name)
    hbm = cal["latency"]["hbm"]["quantiles"]
    click.echo(f"wrote {'standard output' if to_stdout else path} ({cal['name']}: HBM p50 {hbm['p50']:.0f} cycles "
               f"at {cal['clocks']['sm_mhz']:.0f} MHz, HBM read {cal['bandwidth']['hbm_read_gbs']:.0f} GB/s)",
               err=to_stdout)
    if cal.get("synthetic"):
        click.echo(f"  {cal['label']} (provenance.kind synthetic, measured: false)", err=True)
    for part in cal["provenance"].get("incomplete", []):
        click.echo(f"  missing: {part}", err=True)


@click.command("report")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("report.html"), show_default=True,
              help="HTML file to write (self-contained); - for standard output.")
@click.option("--policy-results", type=click.Path(dir_okay=False, exists=True, path_type=Path), multiple=True,
              help="JSON from the policy engine (`policy simulate/mrc/replay --json`) to add; repeat it for "
                   "several files, each its own section.")
@click.option("--detail", "detail_limit", type=click.IntRange(1, 64), default=4, show_default=True,
              help="With several runs, how many get full detail sections (outliers first).")
def report_cmd(run_dirs: tuple[Path, ...], output: Path, policy_results: tuple[Path, ...], detail_limit: int) -> None:
    """Write one self-contained HTML report for RUN_DIR... (several runs: a fleet comparison)."""
    from sitsprof.reports.report import write_report

    with _output(output, "report.html") as (target, to_stdout):
        path = write_report(run_dirs, target, policy_results_path=policy_results or None, detail_limit=detail_limit)
        size = path.stat().st_size / 1e6
    click.echo(f"wrote {'standard output' if to_stdout else path} ({size:.1f} MB, {len(run_dirs)} "
               f"run{'s' if len(run_dirs) > 1 else ''})", err=to_stdout)


COMMANDS = [calibrate_cmd, report_cmd]
