"""Progress of `policy replay`: a rich bar on a terminal, one stderr line per replay elsewhere.

A sweep of replays ran minutes with nothing on stderr (issue 21). On a terminal the bar shows
the replays done of the total (with an ETA) and, for the one running, the simulated time it
reached of the trace's time; without a terminal (a log, CI) one line per replay when it ends,
so the log says where a sweep is without control codes. A first run that compiles the serving
kernels says so (a line, or the bar's text) while numba compiles. `--quiet` shows none of it.

The engine reports through `policies.serving.watch` (a `Watch` installed for the block); this
module only draws.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

import click

__all__ = ["replay_progress"]


def _say(text: str) -> None:
    click.echo(f"sitsprof: {text}", err=True)


@contextmanager
def replay_progress(total: int, quiet: bool = False, console=None, lines: bool = True):
    """Follow the `total` replays run in the block (policies.serving.watch): a bar on a
    terminal, else (`lines`) a line per replay; a first compile is said either way."""
    from sitsprof.policies.engine.compiling import FIRST_RUN_NOTE, watch_compiles
    from sitsprof.policies.serving.watch import Watch, watching

    if quiet:
        with watching(Watch()):
            yield
        return
    from rich.console import Console

    console = console or Console(stderr=True)
    if not console.is_terminal:
        watch = _LineWatch(total) if lines else Watch()
        noted = []

        def on_compile(name: str) -> None:
            if not noted:
                noted.append(name)
                _say(f"{FIRST_RUN_NOTE}: the serving replay's kernels ({name}, ...); "
                     "`sitsprof compile` builds them ahead")

        with watch_compiles(on_compile) as stats, watching(watch):
            yield
        if stats["count"]:
            _say(f"compiled {stats['count']} kernel(s) in {stats['seconds']:.1f} s (first run only)")
        return
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        watch = _BarWatch(progress, total)

        def on_compile(name: str) -> None:
            progress.update(watch.task, description=f"{FIRST_RUN_NOTE}: {name}", refresh=True)

        with watch_compiles(on_compile) as stats, watching(watch):
            yield
    if stats["count"]:
        _say(f"compiled {stats['count']} kernel(s) in {stats['seconds']:.1f} s (first run only; "
             "`sitsprof compile` builds them ahead)")


def _label(meta: dict) -> str:
    return f"{meta['policy']} at {meta['capacity']:,} blocks"


class _LineWatch:
    """One stderr line per replay done: which, of how many, its wall and simulated time."""

    stop = False

    def __init__(self, total: int):
        self.total = max(int(total), 1)
        self.done = 0
        self.began = time.perf_counter()
        self.now = 0.0

    def started(self, meta, trace_end):
        self.now = 0.0

    def advanced(self, now, trace_end):
        self.now = now

    def finished(self, meta, seconds):
        self.done += 1
        left = (time.perf_counter() - self.began) / self.done * (self.total - min(self.done, self.total))
        _say(f"replay {self.done} of {self.total}: {_label(meta)} done in {seconds:.1f} s "
             f"({self.now:,.0f} s simulated)" + (f"; about {left:,.0f} s left" if self.done < self.total else ""))


class _BarWatch:
    """The bar: replays done of the total plus the running one's share of the trace's time."""

    stop = False

    def __init__(self, progress, total: int):
        self.progress = progress
        self.total = max(int(total), 1)
        self.done = 0
        self.label = ""
        self.task = progress.add_task("replaying", total=self.total)

    def started(self, meta, trace_end):
        # compact, so an 80-column terminal keeps the bar, the times and the ETA whole
        self.label = f"{self.done + 1}/{self.total} {meta['policy']}@{meta['capacity']:,}"
        self.progress.update(self.task, description=self.label, completed=self.done)

    def advanced(self, now, trace_end):
        """The running replay's share is its simulated time of the last arrival's (past it, the
        engine drains what is left: the text says how far, the bar waits at the replay's end)."""
        share = min(max(now / trace_end, 0.0), 1.0) if trace_end > 0 else 0.0
        self.progress.update(self.task, completed=self.done + share * 0.999,
                             description=f"{self.label} sim {now:,.0f}/{trace_end:,.0f} s")

    def finished(self, meta, seconds):
        self.done += 1
        self.progress.update(self.task, completed=self.done)
