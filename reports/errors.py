"""Errors the reports raise to users (one line, exit status 2 from the CLI)."""
from __future__ import annotations

from sitsprof.common.errors import SitsprofError

__all__ = ["IncompleteRunError", "ReportError"]


class ReportError(SitsprofError):
    """Base for user-facing report errors."""


class IncompleteRunError(ReportError):
    """The run lacks what a calibration needs; the message lists the missing parts."""
