"""Policy parameters by name: the one place that says what each policy accepts, and values parsed from text.

Two entry points, one answer each. `kernel_params(module)`: the trailing parameters of a
``KERNEL`` (after the contract's five), which is what the engine's replay takes.
`accepted(module)`: what a sweep takes, i.e. an adaptive policy's declared ``PARAMS`` (the
tuning keywords of its ``run``, data and cost-model keywords excluded) or else the kernel's.
`bind(modules, given)` checks names and converts values (``"180s"``, ``"3m"`` for
durations; ``true``/``false``; numbers), and returns the parameters each policy gets. A name
no selected policy takes is one error line that lists what they do take.

Valid values: a policy module declares ``PARAM_RANGES`` (parameter -> `Range`) beside its
parameters; `check_params(module, values)` refuses a value outside its range with one line
naming the parameter, the value, the range and why (`bind`, the engine's replay and the
costed sweep all call it, so every entry point refuses alike). `ranges(module)` reads them.
"""
from __future__ import annotations

import inspect
import math
import numbers
import re
from dataclasses import dataclass
from types import ModuleType

from sitsprof.common.durations import parse_duration

from ..errors import PolicyEngineError
from .protocol import capabilities

__all__ = [
    "Range",
    "accepted",
    "bind",
    "check_params",
    "convert",
    "kernel_params",
    "parse_assignments",
    "parse_range",
    "ranges",
]


@dataclass(frozen=True)
class Range:
    """The values one parameter may take: a number between `low` and `high` (each bound
    inclusive unless `low_open` / `high_open`; None: unbounded), a whole number when
    `integer`, or one of `choices`; None too when `optional`. `why` says what the parameter
    is and what goes wrong outside the range, for the error line."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    choices: tuple = ()
    optional: bool = False
    why: str = ""

    def describe(self, name: str = "x") -> str:
        """The range as a user reads it: ``0 < name < 1``, ``name >= 1`` (a whole number), ``one of a, b``."""
        if self.choices:
            text = "one of " + ", ".join(map(str, self.choices))
        elif self.low is not None and self.high is not None:
            text = (f"{self.low:g} {'<' if self.low_open else '<='} {name} "
                    f"{'<' if self.high_open else '<='} {self.high:g}")
        elif self.low is not None:
            text = f"{name} {'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            text = f"{name} {'<' if self.high_open else '<='} {self.high:g}"
        else:
            text = f"{name} a number"
        if self.integer:
            text += ", a whole number"
        return text + (", or none" if self.optional else "")

    def allows(self, value) -> bool:
        if value is None:
            return self.optional
        if self.choices:
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            return False
        if self.integer and not float(value).is_integer():
            return False
        if self.low is not None and (value < self.low or self.low_open and value == self.low):
            return False
        return not (self.high is not None and (value > self.high or self.high_open and value == self.high))


_INTERVAL = re.compile(r"^\s*(int\s+)?([\[(])\s*(-?inf|[-+\d.e]+)\s*,\s*(inf|[-+\d.e]+)\s*([\])])\s*(or none)?\s*$",
                       re.I)


def parse_range(spec: str, why: str = "") -> Range:
    """A declared range: interval notation (``"(0, 1)"``, ``"[0, 1]"``, ``"(0, inf)"``), ``int``
    before it for whole numbers (``"int [1, inf)"``), ``or none`` after it when None is allowed,
    or ``"one of a, b"`` for text. The policy modules declare these as plain text because the
    classic ones sit below the engine and cannot import `Range`."""
    text = str(spec).strip()
    if text.lower().startswith("one of "):
        return Range(choices=tuple(c.strip() for c in text[7:].split(",") if c.strip()), why=why)
    match = _INTERVAL.match(text)
    if match is None:
        raise TypeError(f"parameter range {spec!r} is not interval notation such as '(0, 1)' or 'int [1, inf)'")
    integer, left, low, high, right, optional = match.groups()
    low_v, high_v = float(low), float(high)
    return Range(None if math.isinf(low_v) else low_v, None if math.isinf(high_v) else high_v,
                 low_open=left == "(", high_open=right == ")", integer=bool(integer), optional=bool(optional),
                 why=why)


def ranges(module: ModuleType) -> dict:
    """Parameter name -> Range a policy module declares: `PARAM_RANGES`, each entry a Range or
    (spec, why) with spec as `parse_range` reads it; none declared: {}."""
    out = {}
    for name, entry in getattr(module, "PARAM_RANGES", {}).items():
        out[name] = entry if isinstance(entry, Range) else parse_range(*entry)
    return out


def check_params(module: ModuleType, values: dict) -> dict:
    """`values` (parameter -> converted value) unchanged when each is within the range the
    policy declares; else PolicyEngineError naming the parameter, the value, the range and why."""
    declared = ranges(module)
    for name, value in values.items():
        rule = declared.get(name)
        if rule is not None and not rule.allows(value):
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            raise PolicyEngineError(
                f"parameter {name}={shown} of {module.NAME} is out of range: give {rule.describe(name)}"
                + (f" ({rule.why})" if rule.why else ""))
    return values


def kernel_params(module: ModuleType) -> dict:
    """Name -> default of the trailing parameters of a policy's KERNEL: those after the five
    the kernel contract fixes (block, req_offsets, n_blocks, capacity, hit)."""
    kernel = module.KERNEL
    parameters = inspect.signature(getattr(kernel, "py_func", kernel)).parameters
    return {name: p.default for name, p in list(parameters.items())[5:]}


def accepted(module: ModuleType) -> dict:
    """Parameter name -> default for one policy module in a sweep: `PARAMS` of a policy
    with `run`, else its KERNEL's trailing parameters."""
    if capabilities(module).adaptive:
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
    modules = {m.NAME: m for m in modules}
    return {p: check_params(modules[p], {name: convert(name, value, t[name]) for name, value in given.items()
                                         if name in t})
            for p, t in takes.items()}
