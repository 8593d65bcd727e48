"""Policy parameters by name: the one place that says what each policy accepts, and values parsed from text.

Two entry points, one answer each. `kernel_params(module)`: the trailing parameters of a
``KERNEL`` (after the contract's five), which is what the engine's replay takes.
`accepted(module)`: what a sweep takes, i.e. an adaptive policy's declared ``PARAMS`` (the
tuning keywords of its ``run``, data and cost-model keywords excluded) or else the kernel's.
`bind(modules, given)` checks names and converts values (``"180s"``, ``"3m"`` for
durations; ``true``/``false``; numbers), and returns the parameters each policy gets. A name
no selected policy takes is one error line that lists what they do take.
"""
from __future__ import annotations

import inspect
import re
from types import ModuleType

from sitsprof.common.durations import parse_duration

from ..errors import PolicyEngineError


def kernel_params(module: ModuleType) -> dict:
    """Name -> default of the trailing parameters of a policy's KERNEL: those after the five
    the kernel contract fixes (block, req_offsets, n_blocks, capacity, hit)."""
    kernel = module.KERNEL
    parameters = inspect.signature(getattr(kernel, "py_func", kernel)).parameters
    return {name: p.default for name, p in list(parameters.items())[5:]}


def accepted(module: ModuleType) -> dict:
    """Parameter name -> default for one policy module in a sweep: `PARAMS` of a policy
    with `run`, else its KERNEL's trailing parameters."""
    if hasattr(module, "run"):
        return dict(module.PARAMS)
    return kernel_params(module)


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


def bind(modules, given: dict) -> dict:
    """{policy name: {parameter: value}} for policy `modules`: every given name must be taken
    by at least one of them; each policy gets the ones it takes, converted."""
    takes = {m.NAME: accepted(m) for m in modules}
    unknown = [name for name in given if not any(name in t for t in takes.values())]
    if unknown:
        offer = "; ".join(f"{p}: {', '.join(t) or 'none'}" for p, t in takes.items())
        raise PolicyEngineError(f"no selected policy takes parameter {', '.join(unknown)} ({offer})")
    return {p: {name: convert(name, value, t[name]) for name, value in given.items() if name in t}
            for p, t in takes.items()}
