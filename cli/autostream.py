"""`policy simulate` without --stream or --no-stream: stream a large trace on its own.

Wiring only: the rule is `sitsprof.policies.engine.autostream`'s (its docstring says why and
where the bars are). When it streams, one line on stderr says so, what it gives up, and the
flag that holds the whole trace instead.
"""
from __future__ import annotations

import click

from .console import TRACE_READ_KEY

__all__ = ["stream_on_its_own"]


def stream_on_its_own(trace_path, fmt, policies, params, *, skip_bad_lines=False, events=False, jobs=None,
                      cluster=None) -> bool:
    """Whether this `policy simulate` streams though neither flag was given (and if so, says so)."""
    from sitsprof.policies.engine import autostream
    from sitsprof.policies.errors import TraceFormatError
    from sitsprof.policies.registry import get_policy
    from sitsprof.policies.traces.detect import detect_format, trace_file

    try:
        path = trace_file(trace_path)
        fmt = (fmt or detect_format(path)).lower()
    except TraceFormatError:
        return False  # the whole-trace reader says what is wrong, as without this rule
    n = autostream.large_trace(path, fmt)
    if n is None:
        return False
    ctx = click.get_current_context(silent=True)
    reading = dict(ctx.meta.get(TRACE_READ_KEY, {})) if ctx is not None else {}
    if autostream.whole_trace_options(fmt, events=events, jobs=jobs, cluster=cluster,
                                      skip_bad_lines=skip_bad_lines, reading=reading):
        return False
    if not autostream.policies_stream([get_policy(p) for p in policies], fmt, params):
        return False
    click.echo(f"sitsprof: {trace_path} holds {'' if fmt == 'oracle' else 'about '}{n:,} references: streaming it "
               "(memory follows the distinct blocks; the same hits, no cost model TTFT); --no-stream holds the "
               "whole trace", err=True)
    return True
