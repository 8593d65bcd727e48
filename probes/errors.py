"""Errors the probes report to users (one line, exit status 2 from the CLI)."""
from __future__ import annotations

from sitsprof.common.errors import SitsprofError

__all__ = ["CompileError", "PlanError", "ProbeError"]


class ProbeError(SitsprofError, ValueError):
    """Base for user-facing probe errors."""


class PlanError(ProbeError):
    """A probe plan that cannot run on this device; raised before anything is launched."""


class CompileError(ProbeError):
    """A probe kernel that does not compile (names the file and carries the compiler log)."""
