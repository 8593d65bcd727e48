"""One duration grammar for every option that takes a time (`record --duration`, sampler
intervals, policy parameters ending in `_s`), so `500ms` means the same everywhere.
"""
from __future__ import annotations

import math
import re

from .errors import SitsprofError

__all__ = ["DurationError", "parse_duration"]

_DURATION = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)\s*(ns|us|ms|s|m|min|h)?\s*$", re.IGNORECASE)
_SECONDS = {None: 1.0, "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


class DurationError(SitsprofError, ValueError):
    """A text that is not a duration, or a duration out of range (names the text and the grammar)."""


def parse_duration(text, *, positive: bool = False) -> float:
    """Seconds from a number of seconds or `180`, `180s`, `500ms`, `10us`, `3m`, `3min`, `1.5h`.

    Negative, infinite and NaN durations are refused; `positive=True` refuses zero too.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        match = _DURATION.match(str(text))
        if match is None:
            raise DurationError(f"duration {text!r} is not a time; give seconds such as 180, or a number with "
                                "ns, us, ms, s, m (min) or h such as 500ms, 10s, 3m or 1h")
        unit = match.group(2).lower() if match.group(2) else None
        value = float(match.group(1)) * _SECONDS[unit]
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise DurationError(f"duration {text!r} must be {'positive' if positive else 'zero or more'}")
    return value
