"""Plot axes and colours shared by the report's sections (run, fleet, policy results).

Byte sizes are labelled in binary units on a log axis (the ladder's footprints double).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["axis_titles", "bytes_axis", "colour_ramp", "fmt_bytes"]


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if abs(v - round(v)) < 0.05 else f"{v:.1f} {unit}"
    return f"{n:.0f} B"


def bytes_axis(values) -> dict:
    """A log axis over byte sizes with ticks at powers of 4 labelled 16 KiB, 1 MiB, ..."""
    values = np.asarray(values, dtype=np.float64)
    values = values[values > 0]
    if values.size == 0:
        return {"type": "log"}
    lo, hi = math.floor(math.log(values.min(), 4)), math.ceil(math.log(values.max(), 4))
    ticks = [4.0 ** k for k in range(lo, hi + 1)]
    return {"type": "log", "tickvals": ticks, "ticktext": [fmt_bytes(t) for t in ticks],
            "title": {"text": "footprint"}}


def colour_ramp(i: int, n: int) -> str:
    """A sequential blue-to-red colour for item i of n (load levels)."""
    t = 0.0 if n <= 1 else i / (n - 1)
    r, g, b = (int(round(a + (c - a) * t)) for a, c in ((0x1f, 0xd6), (0x77, 0x27), (0xb4, 0x28)))
    return f"rgb({r},{g},{b})"


def axis_titles(x: str, y: str, **extra) -> dict:
    out = {"xaxis": {"title": {"text": x}}, "yaxis": {"title": {"text": y}}}
    for key, value in extra.items():
        out.setdefault(key, {}).update(value)
    return out
