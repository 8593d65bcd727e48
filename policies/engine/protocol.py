"""The policy module contract, declared once: what a replacement policy module must expose, what
it may expose, and what the engine concludes from it (`Capabilities`).

A policy is a plain module (docs/CONTRACTS.md, "policies"). Before this module the contract was
implicit: three required names checked in `registry.py`, and a dozen optional ones tested with
`hasattr` where they were used (`registry.py`, `engine/params.py`, `engine/stream.py`,
`sweep.py`). Now the registry calls `check_policy` once per module as it loads it, and every
caller asks `capabilities(module)` / `stream_capabilities(module)` instead of probing names.

Required (`PolicyModule`): ``NAME`` (str, the CLI name), ``DESCRIPTION`` (one line), ``KERNEL``
(``KERNEL(block, req_offsets, n_blocks, capacity, hit, *params) -> (evictions, max_resident)``).

Optional, module level (`OPTIONAL`):
- ``run(trace, capacity, **PARAMS) -> SimResult`` with ``PARAMS`` (name -> default): an
  *adaptive* policy, one that needs the whole trace (time windows, tenants, the cost model);
  the costed sweeps call ``run``, and its parameters are ``PARAMS`` rather than the kernel's.
- ``PARAM_RANGES``: name -> ``(spec, why)`` or a ``params.Range`` (engine/params.py).
- ``STREAM_FORM``: the dotted name of the module holding the resumable form, when it is not
  this module (the adaptive policies keep theirs apart so the engine need not import them).

Optional, on the resumable form (`StreamForm`; the module itself or ``STREAM_FORM``'s):
``new_stream_state``, ``grow_state``, ``max_resident`` and one of ``stream_window`` (a window of
references) or ``stream_requests`` (whole requests, prefix_lru); ``STREAM_PARAMS`` (the
parameters a stream takes, default the kernel's), ``STREAM_FUTURE`` (the window reads each
reference's next use: belady), ``STREAM_TIMES`` (it reads times and sizes and its state the
trace's span: sits, semantic-shard) and ``stream_finish(state) -> dict`` (extra fields of its
result). The contract of each function is in engine/stream.py's docstring.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol

__all__ = [
    "OPTIONAL",
    "REQUIRED",
    "Capabilities",
    "PolicyModule",
    "StreamCapabilities",
    "StreamForm",
    "capabilities",
    "check_policy",
    "stream_capabilities",
]


class PolicyModule(Protocol):
    """What every registered policy module exposes (module docstring)."""

    NAME: str
    DESCRIPTION: str
    KERNEL: Callable


class StreamForm(Protocol):
    """A policy's resumable form, one window (or run of requests) at a time."""

    def new_stream_state(self, n_blocks: int, capacity: int, **params): ...

    def grow_state(self, state, n_blocks: int, capacity: int, **params): ...

    def max_resident(self, state) -> int: ...


REQUIRED = ("NAME", "DESCRIPTION", "KERNEL")
#: optional names -> what having them means (module docstring)
OPTIONAL = {
    "run": "adaptive: replays the whole trace itself (with PARAMS)",
    "PARAMS": "an adaptive policy's tuning keywords and defaults",
    "PARAM_RANGES": "valid values of its parameters",
    "STREAM_FORM": "the module holding its resumable form",
    "new_stream_state": "resumable form: the state for n_blocks",
    "grow_state": "resumable form: the state grown to more blocks",
    "max_resident": "resumable form: the most blocks ever resident",
    "stream_window": "resumable form: serve a window of references",
    "stream_requests": "resumable form: serve whole requests",
    "stream_finish": "resumable form: extra result fields at the end",
    "STREAM_PARAMS": "the parameters a stream takes (default the kernel's)",
    "STREAM_FUTURE": "its stream reads each reference's next use",
    "STREAM_TIMES": "its stream reads times, sizes and the trace's span",
}


@dataclass(frozen=True)
class Capabilities:
    """What the engine may do with a policy module, read from its names once."""

    name: str
    #: has ``run`` and ``PARAMS``: the costed sweeps call run, parameters are PARAMS
    adaptive: bool
    #: dotted name of its resumable form's module, or None when the module holds it itself
    stream_form: str | None


@dataclass(frozen=True)
class StreamCapabilities:
    """What the streaming replay may do with a policy (its resumable form's names)."""

    form: ModuleType | None
    #: has the resumable form at all
    streams: bool
    #: serves whole requests (``stream_requests``) rather than windows of references
    by_request: bool
    needs_future: bool
    needs_times: bool
    #: STREAM_PARAMS, or None: the kernel's trailing parameters
    params: tuple | None
    finishes: bool


_CAPS: dict[str, Capabilities] = {}
_STREAM_CAPS: dict[str, StreamCapabilities] = {}


def check_policy(module: ModuleType) -> Capabilities:
    """The module's `Capabilities`, after checking it keeps the contract; TypeError naming the
    module and the broken rule otherwise (a programming error, not the user's)."""
    for attr in REQUIRED:
        if not hasattr(module, attr):
            raise TypeError(f"policy module {module.__name__} lacks {attr} (docs/CONTRACTS.md)")
    if not isinstance(module.NAME, str) or not isinstance(module.DESCRIPTION, str) or not callable(module.KERNEL):
        raise TypeError(f"policy module {module.__name__}: NAME and DESCRIPTION must be str, KERNEL callable")
    has_run, has_params = callable(getattr(module, "run", None)), isinstance(getattr(module, "PARAMS", None), dict)
    if has_run != has_params:
        raise TypeError(f"policy module {module.__name__}: an adaptive policy has both run and PARAMS (a dict)")
    form = getattr(module, "STREAM_FORM", None)
    if form is not None and not isinstance(form, str):
        raise TypeError(f"policy module {module.__name__}: STREAM_FORM must be a module's dotted name")
    caps = Capabilities(name=module.NAME, adaptive=has_run, stream_form=form)
    if _key(module):
        _CAPS[_key(module)] = caps
    return caps


def _key(module) -> str | None:
    """What the caches know a module by: its dotted name; None for a stand-in object (a test's
    namespace), which is read afresh each time."""
    return module.__name__ if isinstance(module, ModuleType) else None


def capabilities(module: ModuleType) -> Capabilities:
    """`check_policy(module)`, once per module."""
    caps = _CAPS.get(_key(module))
    return caps if caps is not None else check_policy(module)


def stream_capabilities(module: ModuleType) -> StreamCapabilities:
    """The streaming side of the contract, read once per module (importing its STREAM_FORM, the
    first time a stream asks: the adaptive forms are not imported by a replay that never streams)."""
    caps = _STREAM_CAPS.get(_key(module))
    if caps is not None:
        return caps
    checked = _CAPS.get(_key(module))
    name = checked.stream_form if checked is not None else getattr(module, "STREAM_FORM", None)
    form = importlib.import_module(name) if name else module
    names = set(dir(form))
    by_window, by_request = "stream_window" in names, "stream_requests" in names
    streams = {"new_stream_state", "grow_state", "max_resident"} <= names and (by_window or by_request)
    if ({"new_stream_state", "stream_window", "stream_requests"} & names) and not streams:
        raise TypeError(f"policy module {getattr(form, '__name__', form)}: a resumable form has new_stream_state, "
                        "grow_state, max_resident and stream_window or stream_requests")
    params = getattr(form, "STREAM_PARAMS", None)
    caps = StreamCapabilities(
        form=form if streams else None, streams=streams, by_request=streams and not by_window,
        needs_future=bool(getattr(form, "STREAM_FUTURE", False)),
        needs_times=bool(getattr(form, "STREAM_TIMES", False)),
        params=None if params is None else tuple(params), finishes=callable(getattr(form, "stream_finish", None)))
    if _key(module):
        _STREAM_CAPS[_key(module)] = caps
    return caps
