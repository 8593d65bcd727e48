"""One size grammar (binary units: `16KiB`, `2 MiB`, `4G`; `KB` means KiB) for every option
that takes a number of bytes, and its inverse for messages and summaries.
"""
from __future__ import annotations

import re

from .errors import SitsprofError

__all__ = ["GiB", "KiB", "MiB", "SizeError", "TiB", "format_size", "parse_size"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB

_UNITS = {"": 1, "b": 1, "k": KiB, "kb": KiB, "kib": KiB, "m": MiB, "mb": MiB, "mib": MiB,
          "g": GiB, "gb": GiB, "gib": GiB, "t": TiB, "tb": TiB, "tib": TiB}


class SizeError(SitsprofError, ValueError):
    """A text that is not a size (names the text and gives examples)."""


def parse_size(text) -> int:
    """'16KiB', '2 MiB', '4G', '1.5GiB', 4096 -> bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        return int(text)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise SizeError(f"cannot read size {text!r} (examples: 16KiB, 2MiB, 4GiB)")
    return int(round(float(m.group(1)) * _UNITS[m.group(2).lower()]))


def format_size(n: int) -> str:
    """Bytes as the largest binary unit that keeps it readable: 16 KiB, 1.5 GiB."""
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{n} B"
