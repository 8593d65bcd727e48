"""`sitsprof demo`: the embedded default, with no download and no GPU.

Generates the seeded three-stack workload (`sitsprof.policies.traces.generator`), replays it
through every registered policy at several capacities, prints the table and writes
`results.json`, `results.csv` and the workload itself (`workload.jsonl`, Mooncake format,
so `sitsprof policy simulate <out>/workload.jsonl` replays it again) to the output folder.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import click

from .policy import (
    fraction_capacities,
    parse_policies,
    result_rows,
    results_table,
    rows_to_csv,
    stdout_console,
    trace_summary,
)

# Capacities as fractions of the workload's distinct blocks: from a cache that holds little
# more than the shared system prompts to one that holds half of everything ever seen.
DEMO_FRACTIONS = (0.01, 0.05, 0.10, 0.25, 0.50)


@click.command("demo")
@click.option("--out", "out_dir", default="sitsprof-demo", show_default=True,
              type=click.Path(file_okay=False, writable=True), help="Folder for the results.")
@click.option("--seed", default=0, show_default=True, help="Workload seed.")
@click.option("--duration", "duration_s", default=1800.0, show_default=True,
              type=click.FloatRange(min=0, min_open=True), help="Seconds of generated traffic.")
@click.option("--policy", "-p", "policy_text", default="all", show_default=True,
              help="Comma-separated policy names, or 'all'.")
def demo(out_dir, seed, duration_s, policy_text) -> None:
    """Generate the three-stack workload, replay it through every policy, write the results."""
    from sitsprof.policies.traces import generator
    console = stdout_console()
    started = time.perf_counter()
    requests = generator.generate_requests(seed=seed, duration_s=duration_s)
    trace = generator.requests_to_trace(requests, source=f"generator(seed={seed}, duration_s={duration_s:g})")
    capacities = fraction_capacities(trace.n_blocks, DEMO_FRACTIONS)
    policies = parse_policies(policy_text)
    console.print(
        f"three-stack workload (seed {seed}): {len(requests):,} requests, {len(trace):,} block "
        f"references, {trace.n_blocks:,} distinct blocks; {len(policies)} policies x "
        f"{len(capacities)} capacities"
    )
    from .sits import cost_table, cost_title, run_policies  # SITS policies need the trace (time, stacks)

    # Warm-up: one untimed replay at the smallest capacity, so every policy's numba kernels are
    # compiled (or loaded from the cache) before the timed replay; else the first row's time is
    # mostly the JIT compile (seconds on a fresh install) rather than the replay (milliseconds).
    # The whole trace, not a prefix: which kernels run depends on the controller's decisions.
    run_policies(trace, policies, capacities[:1], show=False)
    results = run_policies(trace, policies, capacities, show=True)
    console.print(results_table(results, title="hit ratios (blocks of 512 tokens); time: the replay alone, kernels compiled beforehand"))
    console.print(cost_table(results, title=cost_title(results)))

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.ClickException(f"cannot create the output folder {out}: {exc.strerror}") from None
    rows = result_rows(results, trace)
    summary = trace_summary(trace, fmt="generator")
    summary["stacks"] = {
        s.name: {"requests": sum(1 for r in requests if r.model_stack == s.name)} for s in generator.DEFAULT_STACKS
    }
    document = {
        "workload": summary,
        "seed": seed,
        "duration_s": duration_s,
        "capacities": capacities,
        "policies": policies,
        "results": rows,
        "wall_seconds": round(time.perf_counter() - started, 3),
    }
    (out / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    (out / "results.csv").write_text(rows_to_csv(rows))
    generator.write_mooncake_jsonl(requests, out / "workload.jsonl")
    console.print(
        f"wrote {out / 'results.json'}, {out / 'results.csv'} and {out / 'workload.jsonl'} "
        f"in {time.perf_counter() - started:.1f} s"
    )
    from sitsprof.reports.demo import demo_report  # calibration -> policy costs -> one HTML report

    report = demo_report(out, trace, results, document)
    console.print(f"report: {report.resolve()}")


COMMANDS = [demo]
