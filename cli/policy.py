"""`sitsprof policy ...`: replay KV-cache block traces through the replacement policies.

Wiring only: traces come from `sitsprof.policies.traces`, replays from
`sitsprof.policies.engine`, curves from `sitsprof.policies.mrc`. Heavy imports (numba via the
policy kernels, pandas) happen inside the commands.
"""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import click

FORMAT_CHOICES = ["mooncake", "oracle", "csv", "requests"]
DEFAULT_CAPACITIES = "1%,10%,50%"

_CAPACITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM%]?)\s*$")


def parse_capacities(text: str, n_blocks: int) -> list[int]:
    """`1000,10k,2M,5%` -> block counts; a percentage is of the trace's distinct blocks."""
    from sitsprof.policies.engine import check_capacity
    from sitsprof.policies.errors import CapacityError

    caps: list[int] = []
    for item in str(text).split(","):
        if not item.strip():
            continue
        match = _CAPACITY.match(item)
        if match is None:
            raise CapacityError(
                f"capacity {item.strip()!r} is not a block count; give integers such as 1000 or 10k, "
                "or a percentage of the trace's distinct blocks such as 5%"
            )
        value, unit = float(match.group(1)), match.group(2).lower()
        if unit == "%":
            value = max(1.0, round(n_blocks * value / 100.0))
        else:
            value *= {"": 1, "k": 1_000, "m": 1_000_000}[unit]
        caps.append(check_capacity(int(value) if float(value).is_integer() else value))
    if not caps:
        raise CapacityError("no capacity given; pass --capacity 1000,10000 (or percentages like 5%)")
    return list(dict.fromkeys(caps))  # keep order, drop repeats


def fraction_capacities(n_blocks: int, fractions) -> list[int]:
    """Capacities at these fractions of the trace's distinct blocks, at least 1, sorted, no repeats."""
    return sorted({max(1, round(f * n_blocks)) for f in fractions})


def parse_policies(text: str) -> list[str]:
    """`lru,arc` or `all` -> registered policy names (UnknownPolicyError names the choices)."""
    from sitsprof.policies.registry import get_policy, policy_names

    names = [p.strip() for p in str(text).split(",") if p.strip()]
    if not names or names == ["all"]:
        return policy_names()
    return list(dict.fromkeys(get_policy(name).NAME for name in names))


def trace_summary(trace, path=None, fmt=None) -> dict:
    """What a reader made of a trace file, for output headers and JSON documents."""
    return {
        "path": str(path) if path is not None else trace.source,
        "format": fmt,
        "references": int(len(trace)),
        "requests": int(trace.n_requests),
        "distinct_blocks": int(trace.n_blocks),
        "tenants": list(trace.tenant_names),
        "skipped_lines": int(trace.skipped_lines),
        "skipped_examples": list(trace.skipped_examples),
    }


def load_trace(path: str, fmt: str | None, skip_bad_lines: bool):
    """Read the trace and say on stderr what bad lines were skipped."""
    from sitsprof.policies.traces.detect import detect_format, read_trace

    trace = read_trace(path, format=fmt, skip_bad_lines=skip_bad_lines)
    if trace.skipped_lines:
        first = trace.skipped_examples[0] if trace.skipped_examples else ""
        click.echo(f"sitsprof: warning: skipped {trace.skipped_lines} bad line(s); first: {first}", err=True)
    return trace, (fmt or detect_format(path))


def result_rows(results, trace=None) -> list[dict]:
    """Flat rows (one per result) for JSON and CSV; per-tenant hit ratios where tenants are known."""
    from sitsprof.policies.tenancy import tenant_hit_ratios

    rows = []
    for result in results:
        row = result.to_dict()
        if trace is not None:
            for name, ratio in tenant_hit_ratios(trace, result.request_hits).items():
                row[f"hit_ratio[{name}]"] = ratio
        rows.append(row)
    return rows


def rows_to_csv(rows: list[dict]) -> str:
    """CSV text of result rows (the `extra` dict flattened to JSON)."""
    buffer = io.StringIO()
    fields: list[str] = []
    for row in rows:
        fields.extend(k for k in row if k not in fields)
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in row.items()})
    return buffer.getvalue()


def results_table(results, title: str | None = None):
    """A rich Table of simulation results."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for name, justify in (
        ("policy", "left"), ("capacity", "right"), ("block hit", "right"), ("token hit", "right"),
        ("prefix hit", "right"), ("evictions", "right"), ("time (s)", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)
    for r in results:
        table.add_row(
            r.policy, f"{r.capacity:,}", f"{r.block_hit_ratio:.4f}", f"{r.token_hit_ratio:.4f}",
            f"{r.prefix_hit_ratio:.4f}", f"{r.evictions:,}", f"{r.seconds:.3f}",
        )
    return table


def run_with_progress(trace, policies: list[str], capacities: list[int], show: bool, console=None,
                      simulate=None, **kwargs):
    """`simulate(trace, policies, capacities, progress=..., **kwargs)` (default engine.simulate_many),
    with a rich progress bar on stderr when `show`, stderr is a terminal and there is more than one run."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if simulate is None:
        from sitsprof.policies.engine import simulate_many as simulate

    console = console or Console(stderr=True)
    total = len(policies) * len(capacities)
    if not show or not console.is_terminal or total < 2:
        return simulate(trace, policies, capacities, **kwargs)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(f"{policies[0]} @ {capacities[0]:,}", total=total)

        def advance(done: int, total_: int, label: str) -> None:
            progress.update(task, completed=done, description=f"done {label}")

        return simulate(trace, policies, capacities, progress=advance, **kwargs)


def stdout_console():
    """Console for tables: the terminal's width, or 120 columns when piped (no truncation)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=120)


def emit_json(document) -> None:
    click.echo(json.dumps(document, indent=2))


@click.group("policy")
def policy_group() -> None:
    """Replay KV-cache block traces through replacement policies (LRU, ARC, LIRS, ...)."""


def _trace_options(func):
    func = click.option(
        "--skip-bad-lines", is_flag=True,
        help="Drop malformed lines (reported on stderr and in --json) instead of stopping at the first.",
    )(func)
    func = click.option(
        "--format", "fmt", type=click.Choice(FORMAT_CHOICES, case_sensitive=False), default=None,
        help="Trace format (default: from the file name, else from its content).",
    )(func)
    return func


@policy_group.command("simulate")
@click.argument("trace_path", metavar="TRACE")
@click.option("--policy", "-p", "policy_text", default="all", show_default=True,
              help="Comma-separated policy names, or 'all' (see `sitsprof policy list`).")
@click.option("--capacity", "-c", "capacity_text", default=DEFAULT_CAPACITIES, show_default=True,
              help="Comma-separated capacities in blocks (1000, 10k) or % of the trace's distinct blocks.")
@_trace_options
@click.option("--calibration", default=None,
              help="Calibration JSON for the cost model (default: the shipped hopper-published reference, not measured).")
@click.option("--model", "model_name", default=None, help="Model preset for the cost model (default qwen2-72b).")
@click.option("--miss", "miss_mode", type=click.Choice(["recompute", "reload"]), default="recompute",
              show_default=True, help="Price a miss as prefill recompute or host reload.")
@click.option("--shard-key", type=click.Choice(["first-block", "tenant", "stack"]), default=None,
              help="semantic-shard: group requests by first block (default), tenant or model stack.")
@click.option("--ttl", "ttl", default=None, metavar="DURATION",
              help="semantic-shard: entry TTL in trace time, e.g. 180s (default), 5m.")
@click.option("--window", "window", default=None, metavar="DURATION",
              help="sits, semantic-shard: decision window in trace time, e.g. 60s (default).")
@click.option("--threshold", "threshold", is_flag=True, default=False,
              help="sits: serve LIRS until the dynamic threshold engine hot-switches to SITS.")
@click.option("--threshold-windows", type=click.IntRange(min=1), default=None,
              help="sits: consecutive breaching windows that fire the switch (default 3; implies --threshold).")
@click.option("--param", "-P", "param_items", multiple=True, metavar="NAME=VALUE",
              help="Any policy parameter by name, e.g. -P margin=0.001 -P hir_ratio=0.02 (repeatable); "
                   "a name no selected policy takes is an error that lists what they take.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV rows instead of a table.")
def simulate_cmd(trace_path, policy_text, capacity_text, fmt, skip_bad_lines, as_json, as_csv,
                 calibration=None, model_name=None, miss_mode="recompute", shard_key=None, ttl=None, window=None,
                 threshold=False, threshold_windows=None, param_items=()) -> None:
    """Replay TRACE (Mooncake JSONL, oracleGeneral, CSV or request JSONL) through each policy at each capacity."""
    if as_json and as_csv:
        raise click.UsageError("--json and --csv are alternatives; pick one")
    from sitsprof.policies.params import bind, parse_assignments

    policies = parse_policies(policy_text)
    given = parse_assignments(param_items)
    for name, value in (("shard_key", shard_key), ("ttl_s", ttl), ("window_s", window),
                        ("threshold", True if threshold or threshold_windows else None),
                        ("threshold_windows", threshold_windows)):
        if value is not None:
            given[name] = value
    params = bind(policies, given)
    trace, fmt = load_trace(trace_path, fmt, skip_bad_lines)
    capacities = parse_capacities(capacity_text, trace.n_blocks)
    from .sits import cost_table, cost_title, run_policies

    results = run_policies(trace, policies, capacities, show=not (as_json or as_csv), calibration=calibration,
                           model=model_name, miss=miss_mode, params=params)
    summary = trace_summary(trace, trace_path, fmt)
    if as_json:
        emit_json({"trace": summary, "results": result_rows(results, trace)})
        return
    if as_csv:
        click.echo(rows_to_csv(result_rows(results, trace)), nl=False)
        return
    title = (
        f"{trace_path}: {summary['references']:,} block references, {summary['requests']:,} requests, "
        f"{summary['distinct_blocks']:,} distinct blocks"
    )
    stdout_console().print(results_table(results, title=title))
    stdout_console().print(cost_table(results, title=cost_title(results)))


@policy_group.command("mrc")
@click.argument("trace_path", metavar="TRACE")
@click.option("--points", "-n", default=20, show_default=True, type=click.IntRange(1, 100_000),
              help="Capacities on the curve, evenly spaced up to the trace's distinct blocks.")
@_trace_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
def mrc_cmd(trace_path, points, fmt, skip_bad_lines, as_json) -> None:
    """LRU hit/miss-ratio curve of TRACE over many capacities, in one pass (stack distances)."""
    from sitsprof.policies.mrc import curve_capacities, lru_hit_ratio_curve

    trace, fmt = load_trace(trace_path, fmt, skip_bad_lines)
    caps = curve_capacities(trace.n_blocks, points)
    ratios = lru_hit_ratio_curve(trace, caps)
    if as_json:
        emit_json({
            "trace": trace_summary(trace, trace_path, fmt),
            "policy": "lru",
            "points": [
                {"capacity": int(c), "hit_ratio": float(h), "miss_ratio": float(1 - h)} for c, h in zip(caps, ratios)
            ],
        })
        return
    from rich.table import Table

    table = Table(title=f"LRU curve of {trace_path} ({len(trace):,} references, {trace.n_blocks:,} distinct blocks)",
                  title_justify="left")
    for name in ("capacity", "% of blocks", "hit ratio", "miss ratio"):
        table.add_column(name, justify="right", no_wrap=True)
    for c, h in zip(caps, ratios):
        table.add_row(f"{int(c):,}", f"{100 * c / max(trace.n_blocks, 1):.1f}", f"{h:.4f}", f"{1 - h:.4f}")
    stdout_console().print(table)


@policy_group.command("list")
def list_cmd() -> None:
    """The replacement policies the engine knows."""
    from rich.table import Table

    from sitsprof.policies.registry import POLICIES

    table = Table("policy", "what it does")
    for name, module in POLICIES.items():
        table.add_row(name, module.DESCRIPTION)
    stdout_console().print(table)


@policy_group.command("generate")
@click.argument("out", type=click.Path(dir_okay=False, writable=True))
@click.option("--seed", default=0, show_default=True, help="Seed: the same seed gives the same workload.")
@click.option("--duration", "duration_s", default=1800.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds of traffic.")
@click.option("--scale", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Multiply every stack's session rate.")
@click.option("--as", "kind", type=click.Choice(["mooncake", "requests", "oracle", "csv"]), default="mooncake",
              show_default=True, help="Mooncake JSONL, DESIGN.md request JSONL, oracleGeneral binary or CSV.")
def generate_cmd(out, seed, duration_s, scale, kind) -> None:
    """Write the seeded three-stack workload (qwen2-72b, deepseek-v2, phi-3-mini) to OUT."""
    from sitsprof.policies.traces import csvfile, generator, oracle

    requests = generator.generate_requests(seed=seed, duration_s=duration_s, scale=scale)
    trace = generator.requests_to_trace(requests)
    if kind == "mooncake":
        generator.write_mooncake_jsonl(requests, out)
    elif kind == "requests":
        generator.write_requests_jsonl(requests, out)
    elif kind == "oracle":
        oracle.write_oracle_general(out, trace.original_id, timestamps=trace.time.astype("int64"), sizes=trace.tokens)
    else:
        csvfile.write_csv(out, trace)
    click.echo(f"wrote {out}: {len(requests):,} requests, {len(trace):,} block references, "
               f"{trace.n_blocks:,} distinct blocks")


COMMANDS = [policy_group]
