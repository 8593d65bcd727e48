"""JSON that is JSON: every `--json` document and JSON file sitsprof writes goes through here.

Python's `json.dumps` writes `NaN`, `Infinity` and `-Infinity` for non-finite floats by
default, which no strict JSON parser (jq, JavaScript's JSON.parse, Go, Rust's serde_json)
reads. A figure that is not a number (a ratio of empty sets, an overflow) is written as
`null` here, the one JSON value that says "no number"; `allow_nan=False` then guarantees that
nothing non-finite slips through by another path. NumPy scalars and arrays are written as the
numbers they hold, so callers need not convert them first.
"""
from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["dumps", "finite"]


def finite(obj: Any) -> Any:
    """`obj` with every non-finite float (NaN, +-inf, NumPy's too) replaced by None, recursively."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, dict):
        return {key: finite(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(value) for value in obj]
    kind = getattr(obj, "dtype", None)
    if kind is not None and hasattr(obj, "tolist"):  # a NumPy scalar or array
        return finite(obj.tolist())
    return obj


def dumps(obj: Any, **kwargs) -> str:
    """`json.dumps` of `finite(obj)`, refusing (ValueError) anything non-finite that remains."""
    kwargs["allow_nan"] = False
    return json.dumps(finite(obj), **kwargs)
