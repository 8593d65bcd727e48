"""`sitsprof demo`: the embedded default, with no download and no GPU.

Wiring only: the workload, its replays and result files are `sitsprof.policies.demo`; the
calibration and the HTML report `sitsprof.reports.demo`, which prices the replays through
`policies.demo.policy_results`, handed to it here (the two packages never import each other).
"""
from __future__ import annotations

import time

import click

from .console import cost_table, cost_title, progress_bar, results_table, stdout_console
from .options import DURATION

__all__ = ["COMMANDS", "demo", "what_was_written"]


@click.command("demo")
@click.option("--out", "out_dir", default="sitsprof-demo", show_default=True,
              type=click.Path(file_okay=False, writable=True), help="Folder for the results.")
@click.option("--seed", default=0, show_default=True, help="Workload seed.")
@click.option("--duration", "duration_s", default="30m", show_default=True, type=DURATION,
              help="Trace time of generated traffic (1800, 30m, 1h).")
@click.option("--policy", "-p", "policy_text", default="all", show_default=True,
              help="Comma-separated policy names, or 'all'.")
@click.option("--synthetic-gpu/--no-synthetic-gpu", "gpu_half", default=True, show_default=True,
              help="With no measured run bundled, show the GPU half of the report from a generated run "
                   "(labelled SYNTHETIC everywhere; written to OUT/synthetic-run).")
def demo(out_dir, seed, duration_s, policy_text, gpu_half) -> None:
    """Generate the three-stack workload, replay it through every policy, write the results.

    What it writes, and what each file is for, is printed at the end."""
    from sitsprof.common.atomic import make_folder
    from sitsprof.policies import demo as policy_demo
    from sitsprof.policies.registry import select_policies
    from sitsprof.reports.demo import demo_report  # calibration -> policy costs -> one HTML report

    console = stdout_console()
    workload = policy_demo.demo_workload(seed, duration_s, select_policies(policy_text))
    trace = workload.trace
    console.print(
        f"three-stack workload (seed {seed}): {len(workload.requests):,} requests, {len(trace):,} block "
        f"references, {trace.n_blocks:,} distinct blocks; {len(workload.policies)} policies x "
        f"{len(workload.capacities)} capacities"
    )
    with progress_bar(workload.policies, workload.capacities[:1], True, prefix="warm-up: ") as progress:
        policy_demo.warm_up(workload, progress=progress)
    with progress_bar(workload.policies, workload.capacities, True) as progress:
        results = policy_demo.replay(workload, progress=progress, warm=True)
    console.print(results_table(results, title="hit ratios (blocks of 512 tokens); time: the replay alone, "
                                               "kernels compiled beforehand"))
    console.print(cost_table(results, title=cost_title(results)))

    out = make_folder(out_dir)  # a folder that cannot be made: one line, exit 2
    document, paths = policy_demo.write_results(out, workload, results)
    console.print(f"wrote {paths[0]}, {paths[1]} and {paths[2]} in {time.perf_counter() - workload.started:.1f} s")
    report = demo_report(out, lambda calibration: policy_demo.policy_results(trace, results, calibration), document,
                         gpu_half=gpu_half)
    console.print(f"report: {report.resolve()}")
    console.print(what_was_written(out), markup=False, highlight=False, soft_wrap=True)


def what_was_written(out) -> str:
    """The files of the demo's folder, what each one is and what to do with it."""
    import json

    from sitsprof.reports.demo import SYNTHETIC_RUN

    d = str(out).rstrip("/") + "/"
    try:
        cal = json.loads((out / "calibration.json").read_text(encoding="utf-8"))
        which = f"{cal.get('name', '?')}: {'measured' if cal.get('measured') else 'not measured'}"
    except (OSError, ValueError, AttributeError):
        which = "?"
    pad = " " * 23
    lines = [
        f"in {d}:",
        "  report.html          open it in a browser (one self-contained file, nothing fetched)",
        "  results.json, .csv   every policy at every capacity: hit ratios, evictions (docs/policy-results.md)",
        f"  workload.jsonl       the generated trace (Mooncake format): sitsprof policy simulate {d}workload.jsonl",
        f"  calibration.json     the GPU figures the costs were priced on ({which}); price any trace on it:",
        f"{pad}sitsprof policy simulate TRACE --calibration {d}calibration.json",
        "  policy-results.json  the replays priced, with the SITS decisions, to show beside a GPU run's report:",
        f"{pad}sitsprof report RUN --policy-results {d}policy-results.json",
    ]
    if (out / SYNTHETIC_RUN).is_dir():
        lines += [f"  {SYNTHETIC_RUN}/       a SYNTHETIC run (generated, not measured) to try GPU-side commands on:",
                  f"{pad}sitsprof report {d}{SYNTHETIC_RUN} --policy-results {d}policy-results.json"]
    return "\n".join(lines)


COMMANDS = [demo]
