"""Policy parameters by name: what each policy accepts, and values parsed from text.

`accepted(module)` maps each parameter a policy takes to its default: the trailing keyword
arguments of a classic ``KERNEL``; for the trace-aware policies (those with ``run``) the
keywords of ``run`` (semantic-shard) or their ``PARAMS`` (sits). `bind(policies, given)`
checks names and converts values (``"180s"``, ``"3m"`` for durations; ``true``/``false``;
numbers), and returns the parameters each policy gets. A name no selected policy takes is
one error line that lists what they do take.
"""
from __future__ import annotations

import inspect
import re
from types import ModuleType

from sitsprof.common.durations import parse_duration

from .errors import PolicyEngineError

# Keywords of `run` that are not tuning parameters (data, outputs, the cost model's own flags).
_NOT_PARAMS = {"trace", "capacity", "offsets", "hit_out", "texts", "embedder", "calibration", "model", "miss",
               "gate", "kwargs"}


def accepted(module: ModuleType) -> dict:
    """Parameter name -> default for one policy module."""
    if hasattr(module, "PARAMS"):
        return dict(module.PARAMS)
    if not hasattr(module, "run"):
        from .engine import kernel_params

        return kernel_params(module)
    parameters = inspect.signature(module.run).parameters
    return {n: p.default for n, p in parameters.items()
            if n not in _NOT_PARAMS and p.kind is not inspect.Parameter.VAR_KEYWORD}


def convert(name: str, text, default):
    """`text` as the type of `default`; names ending in _s are durations in seconds."""
    if not isinstance(text, str):
        return text
    value = text.strip()
    if name.endswith("_s"):
        return parse_duration(value)
    if isinstance(default, bool) or default is None and value.lower() in ("true", "false", "yes", "no", "on", "off"):
        lowered = value.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise PolicyEngineError(f"parameter {name}={text!r}: give true or false")
    try:
        if isinstance(default, int) or default is None and re.fullmatch(r"[+-]?\d+", value):
            return int(value)
        if isinstance(default, float) or default is None and re.fullmatch(r"[+-]?[\d.]+(e[+-]?\d+)?", value, re.I):
            return float(value)
    except ValueError:
        kind = "a whole number" if isinstance(default, int) else "a number"
        raise PolicyEngineError(f"parameter {name}={text!r}: give {kind}") from None
    if default is None:  # an optional number (no text parameter defaults to None)
        if value.lower() == "none":
            return None
        raise PolicyEngineError(f"parameter {name}={text!r}: give a number or none")
    return value


def parse_assignments(items) -> dict:
    """`["name=value", ...]` -> {name: "value"} (names with - or _ alike)."""
    out = {}
    for item in items:
        name, sep, value = str(item).partition("=")
        if not sep or not name.strip():
            raise PolicyEngineError(f"parameter {item!r} is not name=value (e.g. --param ttl_s=120)")
        out[name.strip().replace("-", "_")] = value
    return out


def bind(policies, given: dict) -> dict:
    """{policy name: {parameter: value}} for `policies` (names or modules): every given name
    must be taken by at least one of them; each policy gets the ones it takes, converted."""
    from .registry import get_policy

    modules = [p if isinstance(p, ModuleType) else get_policy(str(p)) for p in policies]
    takes = {m.NAME: accepted(m) for m in modules}
    unknown = [name for name in given if not any(name in t for t in takes.values())]
    if unknown:
        offer = "; ".join(f"{p}: {', '.join(t) or 'none'}" for p, t in takes.items())
        raise PolicyEngineError(f"no selected policy takes parameter {', '.join(unknown)} ({offer})")
    return {p: {name: convert(name, value, t[name]) for name, value in given.items() if name in t}
            for p, t in takes.items()}
