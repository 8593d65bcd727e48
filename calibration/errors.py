"""The one error of the calibration file: which field is wrong, and why."""
from __future__ import annotations

from sitsprof.common.errors import SitsprofError

__all__ = ["CalibrationError"]


class CalibrationError(SitsprofError, ValueError):
    """A calibration file that is missing, unreadable or invalid; names the field."""

    def __init__(self, field: str, problem: str, path: str | None = None):
        self.field = field
        self.problem = problem
        where = f"{path}: " if path else ""
        super().__init__(f"{where}{field}: {problem}")
