"""Errors the PMU layer reports to users: one line, exit status 2 from the CLI."""
from __future__ import annotations

from sitsprof.common.errors import SitsprofError

__all__ = ["ClockPermissionError", "ClockValueError", "NoGpuError", "PmuError", "UnsupportedError"]


class PmuError(SitsprofError, RuntimeError):
    """Base for user-facing PMU errors."""


class NoGpuError(PmuError):
    """No NVIDIA GPU, driver or GPU library where one is needed: says what is missing and what to do."""


class ClockPermissionError(PmuError):
    """Changing clocks needs root (NVML_ERROR_NO_PERMISSION)."""

    def __init__(self, what: str = "locking clocks"):
        super().__init__(
            f"{what} needs root (NVML_ERROR_NO_PERMISSION); run as root (sudo), "
            "or pass `--clocks none` to leave the clocks alone and record their drift instead"
        )


class ClockValueError(PmuError):
    """A requested clock that the device does not support (names the supported values)."""


class UnsupportedError(PmuError):
    """A capability the device or driver does not have (e.g. GPM before Hopper)."""
