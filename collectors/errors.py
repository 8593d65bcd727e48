"""Errors the collectors report to users: one line, exit status 2 from the CLI."""
from __future__ import annotations


class CollectorError(RuntimeError):
    """Base for user-facing collector errors; `exit_code` tells the CLI how to exit."""

    exit_code = 2


class RunDirectoryError(CollectorError):
    """A run directory that cannot be created or read (names the path and the problem)."""


class SamplerError(CollectorError):
    """A sampler that cannot start (bad interval, missing backend)."""
