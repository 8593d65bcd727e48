"""The one base class of every error sitsprof reports to a user.

Each package subclasses it in its own `errors.py`; `cli/main.py` prints any of them as one
line and exits with `exit_code` (2: the input or the machine, not sitsprof, needs fixing).
"""
from __future__ import annotations


class SitsprofError(Exception):
    """A user-facing error: its message names the problem and the fix; the CLI exits with `exit_code`."""

    exit_code = 2
