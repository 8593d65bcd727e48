"""``njit`` that imports numba only when a kernel is first run compiled (issue 14).

``from sitsprof.common.jit import njit`` is used exactly as numba's: ``@njit``,
``@njit(cache=True)``, ``@njit(cache=True, inline="always")``, ``@njit("sig")``. It returns a
`LazyKernel`: a call either runs the kernel's own Python source (``py_func``, the same
implementation, interpreted) or builds numba's dispatcher with the same options, once, and
calls it. On a small piece of work (a 1,000-reference ``policy simulate``) importing numba and
setting up its CPU target costs more than interpreting the kernels (bench/README.md,
``bench_startup.py``), so the CLI decides, before it calls any kernel, which way this process runs.

The mode, ``SITSPROF_JIT``:

* ``numba``: every kernel compiled, as before this module existed;
* ``python``: every kernel interpreted; numba is never imported;
* ``auto`` (the default): compiled, unless the caller declared the work small with
  `decide` (``policy simulate`` does, from the trace's size and then its reference count).

Switching to compiled is one-way for a process: on the first compiled call every module that
holds a `LazyKernel` in its globals gets the dispatcher in its place (``_bind_all``), so
compiled kernels call compiled kernels directly and numba inlines ``inline="always"`` helpers
as before; a numba ``typeof`` for `LazyKernel` covers one held anywhere else (a dict, an argument).
Interpreted mode is chosen only while nothing has been compiled (`decide` returns which it is).

Nothing of sitsprof's own is imported here but `numba_cache` (sibling, before numba loads).
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from .errors import SitsprofError

__all__ = [
    "ENV",
    "MODES",
    "JitModeError",
    "LazyKernel",
    "allow_aot",
    "compiled_yet",
    "decide",
    "interpreted",
    "kernels",
    "mode",
    "njit",
    "requested_mode",
    "scope",
]

ENV = "SITSPROF_JIT"
MODES = ("auto", "numba", "python")

_lock = threading.RLock()
_kernels: list[LazyKernel] = []
_state = {"mode": None, "compiled": False, "typeof": False, "aot": False}


class JitModeError(SitsprofError):
    """``SITSPROF_JIT`` names no mode (exit 2)."""


def requested_mode() -> str:
    """``SITSPROF_JIT`` (``auto`` when unset); a bad value raises `JitModeError`."""
    mode = os.environ.get(ENV, "").strip().lower() or "auto"
    if mode not in MODES:
        raise JitModeError(f"{ENV}={os.environ.get(ENV)!r} is not a mode: set it to one of {', '.join(MODES)} "
                           "(or unset it for auto)")
    return mode


def interpreted() -> bool:
    """Whether kernels called now run as Python (the mode decided, else ``SITSPROF_JIT=python``)."""
    mode = _state["mode"]
    if mode is None:
        mode = "python" if requested_mode() == "python" else "numba"
        _state["mode"] = mode
    return mode == "python"


def decide(small: bool) -> str:
    """Under ``SITSPROF_JIT=auto``: interpret from now on when `small`, else compile; the
    explicit modes ignore `small`. Only narrows to compiled once numba has run a kernel (one
    way). Returns the mode now in force, ``"python"`` or ``"numba"``."""
    with _lock:
        req = requested_mode()
        if req == "python":
            _state["mode"] = "python"
        elif req == "numba" or _state["compiled"] or not small:
            _state["mode"] = "numba"
        else:
            _state["mode"] = "python"
        return _state["mode"]


@contextmanager
def scope():
    """A command's decisions end with it: the mode before the block comes back after it
    (compiled, if a kernel was compiled meanwhile: that is one way), and so does `allow_aot`."""
    saved, aot = _state["mode"], _state["aot"]
    try:
        yield
    finally:
        with _lock:
            _state["mode"] = "numba" if _state["compiled"] else saved
            _state["aot"] = aot


def allow_aot(on: bool = True) -> bool:
    """Compiled calls may run the ahead-of-time module's functions (`common.aot`) while their
    kernel has no dispatcher yet, so a command whose kernels are all there never imports numba.
    Off by default: asked for by the command that gains (the streamed `policy simulate`).
    Returns whether it is on (``SITSPROF_AOT=0`` keeps it off)."""
    from . import aot

    _state["aot"] = bool(on) and aot.enabled()
    return _state["aot"]


def mode() -> str:
    """The mode in force now, ``"python"`` or ``"numba"``."""
    return "python" if interpreted() else "numba"


def compiled_yet() -> bool:
    """Whether any kernel has been built as a numba dispatcher in this process."""
    return _state["compiled"]


class LazyKernel:
    """A kernel: its Python function plus how to compile it; see the module docstring."""

    def __init__(self, func: Callable, args: tuple, options: dict, make: Callable | None = None):
        self.py_func = func
        self._args = args
        self._options = options
        self._make = make  # builds something other than a dispatcher (a numba intrinsic: common/prefetch.py)
        self._dispatcher = None
        self.__name__ = getattr(func, "__name__", "kernel")
        self.__qualname__ = getattr(func, "__qualname__", self.__name__)
        self.__module__ = getattr(func, "__module__", None)
        self.__doc__ = getattr(func, "__doc__", None)
        self.__wrapped__ = func
        with _lock:
            _kernels.append(self)

    @property
    def dispatcher(self):
        """numba's dispatcher for this kernel (imports numba and builds it on first use)."""
        d = self._dispatcher
        if d is None:
            with _lock:
                if self._dispatcher is None:
                    with _collector_paused():
                        self._dispatcher = _build(self)
                d = self._dispatcher
            _bind_all()
        return d

    def __call__(self, *args, **kwargs):
        if self._make is not None:
            return self.py_func(*args, **kwargs)  # an intrinsic exists only inside compiled code
        if _state["mode"] == "numba" or not interpreted():
            if _state["aot"] and self._dispatcher is None and not kwargs:
                from .aot import find

                fn = find(self, args)
                if fn is not None:
                    return fn(*args)
            d = self.dispatcher
            if d.overloads:
                return d(*args, **kwargs)
            with _collector_paused():  # the first call loads (or compiles) its machine code
                return d(*args, **kwargs)
        if getattr(_depth, "n", 0):
            return self.py_func(*args, **kwargs)
        return _interpret(self.py_func, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        # Dispatcher attributes (_cache, signatures, overloads, compile, stats...): compiled.
        if name.startswith("__") or name in ("_dispatcher", "_args", "_options", "_make", "py_func"):
            raise AttributeError(name)
        return getattr(self.dispatcher, name)

    def __repr__(self) -> str:
        state = "compiled" if self._dispatcher is not None else "lazy"
        return f"<LazyKernel {self.__module__}.{self.__qualname__} ({state})>"


@contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off for the block: importing numba and loading a
    kernel from its cache allocate hundreds of thousands of objects, which set off ~200 young
    and a full collection (the full one walks everything numba made): 0.12-0.17 s of the
    1.9 s warm `policy replay` of the bundled trace (issue 24). Then everything alive is frozen
    (`gc.freeze`: numba's types, registries and dispatchers live as long as the process), or the
    next collections would walk it all again; the few cycles of garbage among it stay."""
    import gc

    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # what was made lives as long as the process: never walked again
        if collecting:
            gc.enable()


_depth = threading.local()  # interpreted calls in progress on this thread (np.errstate is per thread too)


def _interpret(func: Callable, args: tuple, kwargs: dict):
    """An outermost interpreted call: machine integers wrap silently, as compiled (numba does
    not check overflow; numpy's scalars would warn on every wrap of a uint64 hash)."""
    import numpy as np

    _depth.n = 1
    try:
        with np.errstate(over="ignore"):
            return func(*args, **kwargs)
    finally:
        _depth.n = 0


def _build(kernel: LazyKernel):
    from . import numba_cache

    numba_cache.configure()
    import numba

    _register_typeof()
    _state["compiled"] = True
    _state["mode"] = "numba"
    if kernel._make is not None:
        return kernel._make()
    dispatcher = numba.njit(*kernel._args, **kernel._options)(kernel.py_func)
    return dispatcher


def _register_typeof() -> None:
    if _state["typeof"]:
        return
    from numba.core import types
    from numba.extending import typeof_impl

    @typeof_impl.register(LazyKernel)
    def _typeof_lazy(val, c):
        return types.Dispatcher(val.dispatcher)

    _state["typeof"] = True


#: Only sitsprof's modules are rebound (kernels call kernels only there); a kernel held
#: elsewhere still works through its `LazyKernel` (the typeof above).
_PREFIX = "sitsprof."


def _bind_all() -> None:
    """Put each kernel's dispatcher in place of its `LazyKernel` in every loaded module's globals."""
    with _lock:
        kernels = {id(k): k for k in _kernels}
        for name, module in list(sys.modules.items()):
            if not name.startswith(_PREFIX):
                continue
            namespace = getattr(module, "__dict__", None)
            if not namespace or not isinstance(namespace, dict):
                continue
            for key, value in list(namespace.items()):
                if type(value) is LazyKernel and id(value) in kernels:
                    if value._dispatcher is None:
                        value._dispatcher = _build(value)
                    namespace[key] = value._dispatcher


def njit(*args, **options):
    """numba's ``njit``, lazily: ``@njit``, ``@njit(**options)``, ``@njit(signature, **options)``."""
    if len(args) == 1 and not options and callable(args[0]) and not isinstance(args[0], (str, list, tuple)):
        return LazyKernel(args[0], (), {})

    def wrap(func: Callable) -> LazyKernel:
        return LazyKernel(func, args, options)

    return wrap


def kernels() -> list[LazyKernel]:
    """Every kernel declared with this `njit` so far."""
    return list(_kernels)
