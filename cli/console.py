"""What the policy commands (`policy ...`, `demo`) show on the terminal: tables, a progress bar,
trace-reading warnings.

Shared by cli/policy.py, cli/sits.py and cli/demo.py, which import it and not each other.
Heavy imports (rich, the policy engine) happen inside the functions.
"""
from __future__ import annotations

from contextlib import contextmanager

import click

from sitsprof.common import jsonout

__all__ = [
    "CALIBRATION_LABELS",
    "COST_COLUMNS",
    "TOKENS_COLUMN",
    "TRACE_READ_KEY",
    "calibration_label",
    "cost_table",
    "cost_title",
    "emit_json",
    "load_trace",
    "progress_bar",
    "results_table",
    "run_with_progress",
    "stdout_console",
]

#: "tok/s, 1 stream": output tokens per second of one request stream served back to back (no
#: batching, no queueing), the cost model's figure until a serving replay gives the real one.
TOKENS_COLUMN = "tok/s, 1 stream"
COST_COLUMNS = ("policy", "capacity", "block hit", "TTFT P50 ms", "P95 ms", "P99 ms", TOKENS_COLUMN, "CTCCI", "notes")
#: What each calibration provenance says beside its name, so a synthetic one is never read as measured.
CALIBRATION_LABELS = {"measured": "measured", "published": "published figures, not measured",
                      "synthetic": "SYNTHETIC: from a generated run, not a measurement"}


#: ctx.meta key of the trace-reading options (--block-tokens, --time-unit, --sort-by-time) the
#: policy commands take; load_trace passes them to read_trace.
TRACE_READ_KEY = "sitsprof.trace_read"


def load_trace(path: str, fmt: str | None, skip_bad_lines: bool):
    """Read the trace (with the command's trace-reading options) and say on stderr what bad
    lines were skipped and what the reader warned of (time unit guessed, out of order)."""
    import warnings

    from sitsprof.policies.traces.detect import detect_format, read_trace
    from sitsprof.policies.traces.timing import TraceWarning

    ctx = click.get_current_context(silent=True)
    options = dict(ctx.meta.get(TRACE_READ_KEY, {})) if ctx is not None else {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceWarning)
        trace = read_trace(path, format=fmt, skip_bad_lines=skip_bad_lines, **options)
    for warning in caught:
        if issubclass(warning.category, TraceWarning):
            click.echo(f"sitsprof: warning: {warning.message}", err=True)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    if trace.skipped_lines:
        first = trace.skipped_examples[0] if trace.skipped_examples else ""
        click.echo(f"sitsprof: warning: skipped {trace.skipped_lines} bad line(s); first: {first}", err=True)
    return trace, (fmt or detect_format(path))


def stdout_console():
    """Console for tables: the terminal's width, or 120 columns when piped (no truncation)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=120)


def emit_json(document) -> None:
    click.echo(jsonout.dumps(document, indent=2))


@contextmanager
def progress_bar(policies: list[str], capacities: list[int], show: bool, console=None, prefix: str = ""):
    """A `progress(done, total, label)` callback: a rich bar on stderr when `show`, stderr is a
    terminal and there are two runs or more, else a callback that only follows the sweep.

    Either way a first run says why it is slow: while numba compiles a policy's kernels (a
    cache miss: first run, edited source) the bar reads "compiling kernels (first run only):
    POLICY (i of n policies)", or, with no bar, one stderr line per policy compiled; a last
    line says how many kernels were compiled, in how long."""
    from rich.console import Console

    from sitsprof.policies.engine.compiling import FIRST_RUN_NOTE, watch_compiles

    console = console or Console(stderr=True)
    total = len(policies) * len(capacities)
    per_policy = max(1, len(capacities))
    done = [0]
    noted: set[str] = set()
    by_module = _policy_modules(policies)

    def compiling(name: str = "") -> tuple[str, str]:
        """The note for a compile of `name` (module.function): the policy whose module it is in,
        else the one the sweep is at (shared helpers compile with the first policy using them)."""
        i = by_module.get(name.split(".", 1)[0])
        if i is None:
            i = min(done[0] // per_policy, max(0, len(policies) - 1))
        policy = policies[i] if policies else "the engine"
        return f"{FIRST_RUN_NOTE}: {policy} ({i + 1} of {len(policies)} policies)", policy

    def say(text: str) -> None:
        console.print(f"sitsprof: {text}", markup=False, highlight=False, soft_wrap=True)

    if not show or not console.is_terminal or total < 2:
        def on_start(name: str) -> None:
            text, policy = compiling(name)
            if policy not in noted:
                noted.add(policy)
                say(text)

        def follow(done_: int, total_: int, label: str) -> None:
            done[0] = done_

        with watch_compiles(on_start) as stats:
            yield follow
        if stats["count"]:
            say(_compiled_line(stats))
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # a bar only

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(f"{prefix}{policies[0]} @ {capacities[0]:,}", total=total)

        def on_start(name: str) -> None:
            progress.update(task, description=f"{compiling(name)[0]}, {name}", refresh=True)

        def advance(done_: int, total_: int, label: str) -> None:
            done[0] = done_
            progress.update(task, completed=done_, description=f"{prefix}done {label}")

        with watch_compiles(on_start) as stats:
            yield advance
    if stats["count"]:
        say(_compiled_line(stats))


def _policy_modules(policies) -> dict[str, int]:
    """Short module name (`lirs`, `semantic_shard`) -> index of the policy it implements."""
    from sitsprof.policies.registry import get_policy

    found = {}
    for i, name in enumerate(policies):
        try:
            found.setdefault(get_policy(str(name)).__name__.rsplit(".", 1)[-1], i)
        except Exception:  # noqa: BLE001 - a name the sweep itself will refuse, in its own words
            continue
    return found


def _compiled_line(stats: dict) -> str:
    import os

    folder = os.environ.get("NUMBA_CACHE_DIR")  # set by sitsprof.common.numba_cache
    where = f"in {folder}" if folder else "beside the modules"
    return (f"compiled {stats['count']} kernel(s) in {stats['seconds']:.1f} s (first run only: numba caches "
            f"them {where}, later runs load them; `sitsprof compile` compiles them all at once)")


def run_with_progress(trace, policies: list[str], capacities: list[int], show: bool, console=None,
                      simulate=None, **kwargs):
    """`simulate(trace, policies, capacities, progress=..., **kwargs)` (default sweep.simulate_many)
    under `progress_bar`."""
    if simulate is None:
        from sitsprof.policies.sweep import simulate_many as simulate

    with progress_bar(policies, capacities, show, console) as progress:
        return simulate(trace, policies, capacities, progress=progress, **kwargs)


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


def _notes(result) -> str:
    extra = result.extra or {}
    if "behaviour_share" in extra:
        share = extra["behaviour_share"]
        n = extra["switches"]
        return f"{n} switch{'' if n == 1 else 'es'}; recency {share['recency']:.0%}"
    if "shard_expirations" in extra:
        return f"{sum(extra['shard_expirations']):,} expired; {extra['shard_eviction_rate']:.1f} evict/s"
    return ""


def cost_table(results, title: str | None = None):
    """Rich table: hit ratio and the cost model's TTFT percentiles per result."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for name in COST_COLUMNS:
        table.add_column(name, justify="left" if name in ("policy", "notes") else "right", no_wrap=name != "notes")
    for r in results:
        cost = r.extra.get("cost") or {}
        tenancy = r.extra.get("tenancy") or {}
        tps = cost.get("tokens_per_s")
        table.add_row(
            r.policy, f"{r.capacity:,}", f"{r.block_hit_ratio:.4f}", f"{cost.get('ttft_p50_ms', 0):,.1f}",
            f"{cost.get('ttft_p95_ms', 0):,.1f}", f"{cost.get('ttft_p99_ms', 0):,.1f}",
            "-" if tps is None else f"{tps:,.1f}",
            f"{tenancy.get('ctcci', 0):.3f} {tenancy.get('level', '')}" if tenancy.get("tenants", 0) > 1 else "-",
            _notes(r),
        )
    return table


def calibration_label(cost: dict) -> str:
    """The calibration's name with what it is: `hopper-published (published figures, not
    measured)`, `measured-x (SYNTHETIC: ...)`."""
    kind = cost.get("calibration_kind")
    label = CALIBRATION_LABELS.get(kind, kind)
    return f"{cost.get('calibration', '?')}" + (f" ({label})" if label else "")


def cost_title(results) -> str:
    cost = next((r.extra.get("cost") for r in results if r.extra.get("cost")), None) or {}
    return (f"cost model: calibration {calibration_label(cost)}, model {cost.get('model', '?')}, "
            f"miss = {cost.get('miss', '?')} (service time, no queueing; {TOKENS_COLUMN}: one request stream "
            "back to back)")
