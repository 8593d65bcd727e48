"""Option types every command shares, so one grammar holds wherever a kind of value is taken.

`Duration`: every option that takes a time (`--duration`, `--ttl`, `--window`, `--interval`,
`--gpm-interval`, `--cupti-interval`) reads it with `sitsprof.common.durations.parse_duration`
(`180`, `10s`, `500ms`, `3m`, `1.5h`) and gives the command seconds as a float; a bad value is
click's one-line usage error naming the option (exit 2). tests/test_consistency.py checks
that no time-like option of any command is read otherwise.
"""
from __future__ import annotations

import click

from sitsprof.common.durations import DurationError, parse_duration

__all__ = ["DURATION", "MILLISECONDS", "Duration", "Milliseconds", "calibration_option"]


class Duration(click.ParamType):
    """Seconds from the one duration grammar; `positive` refuses zero, `minimum` (seconds) a
    smaller value, with `why` saying what needs it."""

    name = "duration"

    def __init__(self, positive: bool = True, minimum: float | None = None, why: str = ""):
        self.positive = positive
        self.minimum = minimum
        self.why = why

    def get_metavar(self, param, ctx=None) -> str:  # click < 8.2 passes no ctx
        return "DURATION"

    def convert(self, value, param, ctx):
        try:
            seconds = parse_duration(value, positive=self.positive)
        except DurationError as exc:
            self.fail(str(exc), param, ctx)
        if self.minimum is not None and seconds < self.minimum:
            self.fail(f"{value!r} is below {self.minimum:g} s" + (f" ({self.why})" if self.why else ""), param, ctx)
        return seconds


#: A positive duration (the usual case: a run length, a window, a TTL, an interval).
DURATION = Duration()


class Milliseconds(click.ParamType):
    """A latency target in milliseconds, as serving engineers write them (vLLM's benchmark
    `--goodput ttft:2000`): a bare number is ms; with a unit it is the one duration grammar
    (`2s`, `100ms`), so `--slo-ttft-p99 2s` and `--slo-ttft-p99 2000` agree. Must be positive."""

    name = "milliseconds"

    def get_metavar(self, param, ctx=None) -> str:  # click < 8.2 passes no ctx
        return "MS"

    def convert(self, value, param, ctx):
        text = str(value).strip()
        try:
            ms = float(text)
        except ValueError:
            try:
                ms = parse_duration(text, positive=True) * 1e3
            except DurationError:
                ms = float("nan")
        if not (ms > 0 and ms != float("inf")):
            self.fail(f"{value!r} must be a positive number of milliseconds (such as 2000) or a duration "
                      "(such as 2s)", param, ctx)
        return ms


#: A positive latency target in ms (`--slo-ttft-p99 2000` or `2s`).
MILLISECONDS = Milliseconds()


def calibration_option(ctx, param, value):
    """`--calibration PATH` as one `sitsprof.calibration.Calibration`, read and validated here,
    once per command (absent: the shipped hopper-published reference); everything below the CLI
    receives the object, never the path. A bad file is the calibration's one-line error (exit 2)."""
    from sitsprof.calibration import Calibration

    return Calibration.load(value)
