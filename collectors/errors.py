"""Errors the collectors report to users: one line, exit status 2 from the CLI."""
from __future__ import annotations

from sitsprof.common.errors import SitsprofError

__all__ = [
    "CollectorError",
    "DamagedTableError",
    "DiskFullError",
    "RunDirectoryError",
    "RunWriteError",
    "SamplerError",
    "WorkloadFailed",
]


class CollectorError(SitsprofError, RuntimeError):
    """Base for user-facing collector errors."""


class RunDirectoryError(CollectorError):
    """A run directory that cannot be created or read (names the path and the problem)."""


class SamplerError(CollectorError):
    """A sampler that cannot start (bad interval, missing backend)."""


class WorkloadFailed(CollectorError):
    """The recorded command failed; sitsprof exits with its status (128+N for signal N)."""

    def __init__(self, command, returncode: int):
        self.exit_code = returncode if returncode > 0 else 128 - returncode
        how = f"status {returncode}" if returncode > 0 else f"signal {-returncode}"
        super().__init__(f"the recorded command {command[0]!r} exited with {how} (the run directory is complete)")


class RunWriteError(RunDirectoryError):
    """A run directory that can no longer be written (read-only, removed, a path under a file)."""


class DiskFullError(RunWriteError):
    """The run directory's file system is full (or over quota): names the path and the fix."""


class DamagedTableError(RunDirectoryError):
    """A table file of a run directory that cannot be read (truncated, garbage, parts that disagree)."""
