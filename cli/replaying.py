"""What `policy replay` does around the engine: options checked before the trace is read, the
SLO options, progress, a table that fits, and the verdict under it.

cli/policy.py keeps the command's wiring; this module holds the rest (issue 21), so that
file's hooks stay a few lines: `replay_extras` (a decorator adding --slo-ttft-p99,
--slo-tpot-p99 and --quiet, kept in ctx.meta like the trace-reading options), `check_early`
(every option that can be wrong, refused in one line before an 8-12 s trace load),
`followed(total, func)` (policies.serving.watch through cli/progress.py), `add_verdict(doc)` and
`show(doc)`.
"""
from __future__ import annotations

import math

import click

__all__ = ["EXTRAS_KEY", "add_verdict", "check_early", "extras", "followed", "replay_extras", "show"]

#: ctx.meta key of the options `replay_extras` adds.
EXTRAS_KEY = "sitsprof.replay_extras"


def replay_extras(func):
    """--slo-ttft-p99, --slo-tpot-p99 (ms) and --quiet, kept in ctx.meta[EXTRAS_KEY]."""
    from sitsprof.policies.serving.slo import DEFAULT_TPOT_P99_MS, DEFAULT_TTFT_P99_MS, DEFAULTS_SOURCE

    def keep(ctx, param, value):
        ctx.meta.setdefault(EXTRAS_KEY, {})[param.name] = value
        return value

    from .options import MILLISECONDS
    func = click.option("--quiet", "-q", is_flag=True, expose_value=False, callback=keep,
                        help="No progress bar or per-replay lines on stderr (warnings and errors still).")(func)
    func = click.option("--slo-tpot-p99", type=MILLISECONDS, default=None, expose_value=False, callback=keep,
                        metavar="MS",
                        help=f"TPOT P99 target for the verdict, in ms or a duration such as 100ms "
                             f"(default {DEFAULT_TPOT_P99_MS:g} ms, "
                             f"{DEFAULTS_SOURCE}).")(func)
    func = click.option("--slo-ttft-p99", type=MILLISECONDS, default=None, expose_value=False, callback=keep,
                        metavar="MS",
                        help=f"TTFT P99 target for the verdict, in ms or a duration such as 2s "
                             f"(default {DEFAULT_TTFT_P99_MS:g} ms, "
                             f"{DEFAULTS_SOURCE}).")(func)
    return func


def extras() -> dict:
    ctx = click.get_current_context(silent=True)
    return dict(ctx.meta.get(EXTRAS_KEY, {})) if ctx is not None else {}


def check_early(engine: str, policy_text: str, capacity_text: str, rate_scale: float) -> int:
    """Refuse, before the trace is read, what the replay would refuse after: an unknown policy,
    a policy --engine sglang has no form of, a capacity that is not one, a rate scale that is
    not a finite positive number (the model and the calibration are read at the edge, before
    this, by `replay_cmd` and `calibration_option`). Returns the number of replays (policies x
    capacities; a % capacity counts once)."""
    from sitsprof.policies.engine.capacity import parse_capacities
    from sitsprof.policies.errors import ServingReplayError
    from sitsprof.policies.serving.names import SERVING_POLICIES, SGLANG_POLICIES, serving_names

    names = serving_names(policy_text)
    if not names:
        raise ServingReplayError("no policy given; pass -p lru (or several: -p lru,arc; or -p all)")
    if engine == "sglang":
        other = [n for n in names if n not in SGLANG_POLICIES]
        if other:
            raise ServingReplayError(f"--engine sglang evicts radix-tree leaf nodes by SGLang's own strategies "
                                     f"({', '.join(SGLANG_POLICIES)}); -p {','.join(other)} has no radix form "
                                     "(use one of those, or --engine vllm)")
    unknown = [n for n in names if n not in SERVING_POLICIES and not (engine == "sglang" and n in SGLANG_POLICIES)]
    if unknown:
        raise ServingReplayError(f"policy {unknown[0]!r} has no incremental form for the serving replay; "
                                 f"choose from {', '.join(SERVING_POLICIES)} (or all)")
    # The grammar and the sign, with any block count for the %s (the real count comes with the trace).
    caps = [None] if capacity_text is None else parse_capacities(capacity_text, 1_000_000, block_bytes=1)
    if not math.isfinite(rate_scale):
        raise ServingReplayError(f"--rate-scale {rate_scale}: must be a finite positive number "
                                 "(2 = twice the arrival rate)")
    return len(names) * len(caps)


def followed(total: int, func, lines: bool = True):
    """`func` (replay_document, routed_document) run under the progress of its `total` replays
    (cli/progress.py), unless --quiet; `lines` False (--json: a script reads it) leaves out the
    per-replay lines a log gets, the bar on a terminal stays."""
    from functools import wraps

    from .progress import replay_progress

    @wraps(func)
    def run(*args, **kwargs):
        with replay_progress(total, quiet=bool(extras().get("quiet")), lines=lines):
            return func(*args, **kwargs)

    return run


def add_verdict(doc: dict) -> dict:
    """`doc['verdict']`: policies.serving.slo.verdict of its replay rows (routed: the aggregate
    rows) on the --slo-* targets."""
    from sitsprof.policies.serving.slo import verdict

    given = extras()
    rows = (doc.get("routing") or {}).get("aggregate") or doc.get("replay") or []
    doc["verdict"] = verdict(rows, given.get("slo_ttft_p99"), given.get("slo_tpot_p99"))
    return doc


def show(doc: dict, table) -> None:
    """Print `table` whole (never a cut figure: the console is widened to the table's need, and
    a narrower terminal wraps the lines), then the verdict."""
    from sitsprof.policies.serving.slo import verdict_lines
    from sitsprof.policies.serving.tables import fit_width

    from .console import stdout_console

    console = stdout_console()
    if not console.is_terminal:  # a log or a pipe: the 100 columns the table is made for
        console.width = 100
    console.width = fit_width(console, table)
    console.print(table)
    if doc.get("verdict"):
        for line in verdict_lines(doc["verdict"]):
            click.echo(line)
