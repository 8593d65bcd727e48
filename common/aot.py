"""Kernels compiled ahead of time: a streamed `policy simulate` without numba's start-up (issue 24).

Why: a compiled run pays numba's start-up before its first kernel returns, whatever the work:
importing numba (~0.17 s of CPU) and setting up its CPU target to load the first kernel from
its cache (~0.15 s), measured on the 2-core VM (bench/README.md, "The plain command ... ahead of
time"). On a 5M-reference oracleGeneral trace the work itself (reading, factorising, the LRU
kernel) is ~0.26 s, so start-up was more than half of the process, and libCacheSim, a C
library, pays none. numba can also compile the *same* kernel source ahead of time into a plain
extension module (`numba.pycc`); loading that needs no numba at all.

What this module does, at run time, without importing numba: `find(kernel, args)` returns the
ahead-of-time compiled function for a `common.jit.LazyKernel` and these arguments, or None.
It is used only where a caller asked for it (`allow`, the streamed `policy simulate`), and only

1. when the extension module and its manifest exist (`folder()`; `sitsprof compile --aot`
   builds them: `sitsprof.policies.aot`),
2. when the kernel's source key (`source_key`: every source file of its module's folder, of
   the folders whose kernels and functions it holds, and of common/, hashed) equals the one it
   was built from: an edited kernel is never run from a stale build, it compiles as before; and
3. when the arguments have exactly the numba types of one of its exported signatures (dtype,
   dimensions, layout and writability of each array; the type of each scalar), as
   numba's dispatcher would type them: a pycc function does not check its arguments (an array
   of another dtype crashes it), so anything else goes to numba's dispatcher.

The results are the JIT's: the same Python source, compiled by the same numba, with the
options of a plain ``njit(cache=True)`` (the only kernels built are those with no other
option); tests/test_aot.py checks hits reference for reference against the JIT.

Nothing of sitsprof's own is imported here but `numba_cache`'s folder rule (it imports no numba).
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
from pathlib import Path

__all__ = [
    "DIR_ENV",
    "ENV",
    "FORMAT",
    "MANIFEST",
    "MODULE",
    "enabled",
    "find",
    "folder",
    "kernel_id",
    "reset",
    "source_key",
]

ENV = "SITSPROF_AOT"  # "0": never use the ahead-of-time module
DIR_ENV = "SITSPROF_AOT_DIR"
MODULE = "sitsprof_aot_kernels"
MANIFEST = "manifest.json"
FORMAT = 1

_lock = threading.Lock()
_loaded: dict = {}  # "manifest", "module": loaded once a process (None: absent or unusable)
_keys: dict[str, str] = {}  # module name -> source key
_folders: dict[Path, bytes] = {}  # source folder -> digest of its .py files
_found: dict[int, list | None] = {}  # id(kernel) -> [(specs, function), ...] or None


def folder() -> Path:
    """``$SITSPROF_AOT_DIR``, else ``$XDG_CACHE_HOME/sitsprof/aot/py3.X`` (``~/.cache`` without it)."""
    from .numba_cache import user_cache_dir

    return user_cache_dir("aot", DIR_ENV)


def enabled() -> bool:
    """Whether ``SITSPROF_AOT`` allows the module (anything but 0/off/no/false)."""
    return os.environ.get(ENV, "").strip().lower() not in ("0", "off", "no", "false")


def kernel_id(kernel) -> str:
    """``module:qualname`` of a kernel's Python function: its name in the manifest."""
    func = kernel.py_func
    return f"{func.__module__}:{func.__qualname__}"


def _folder_digest(folder: Path) -> bytes:
    digest = _folders.get(folder)
    if digest is None:
        h = hashlib.sha256()
        for file in sorted(folder.glob("*.py")):
            try:
                data = file.read_bytes()
            except OSError:
                data = b""
            h.update(file.name.encode() + b"\0" + data + b"\0")
        digest = _folders[folder] = h.digest()
    return digest


def source_key(module_name: str) -> str | None:
    """16 hex digits of a hash of every source file in the folder of `module_name`, in the
    folders of the sitsprof modules whose functions, classes or kernels it holds, and in common/
    (prefetch.py, inlined into every kernel that prefetches); None when the module has no file.
    Folders, not files: a kernel compiles in the kernels it calls and the constants it reads
    (``GOLDEN``, ``NIL``) are baked in, and numba tracks neither, so an edit anywhere near it
    retires its build (the JIT then compiles it, until `sitsprof compile --aot` runs again)."""
    key = _keys.get(module_name)
    if key is not None:
        return key
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if not path:
        return None
    folders = {Path(path).parent, Path(__file__).parent}
    for value in list(vars(module).values()):
        owner = getattr(value, "__module__", None)
        if isinstance(owner, str) and owner.startswith("sitsprof.") and callable(value):
            file = getattr(sys.modules.get(owner), "__file__", None)
            if file:
                folders.add(Path(file).parent)
    digest = hashlib.sha256()
    for folder in sorted(folders):
        digest.update(str(folder.name).encode() + b"\0" + _folder_digest(folder))
    key = _keys[module_name] = digest.hexdigest()[:16]
    return key


def _load() -> tuple[dict | None, object]:
    if "manifest" in _loaded:
        return _loaded["manifest"], _loaded["module"]
    with _lock:
        if "manifest" in _loaded:
            return _loaded["manifest"], _loaded["module"]
        manifest = module = None
        try:
            where = folder()
            manifest = json.loads((where / MANIFEST).read_text())
            if manifest.get("format") != FORMAT:
                raise ValueError("another format")
            path = where / manifest["file"]
            loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
            spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
        except (OSError, ValueError, KeyError, TypeError, ImportError):
            manifest = module = None
        _loaded["manifest"], _loaded["module"] = manifest, module
        return manifest, module


def reset() -> None:
    """Forget what was loaded (tests build and replace the module in one process)."""
    with _lock:
        _loaded.clear()
        _keys.clear()
        _folders.clear()
        _found.clear()


def _exports(kernel) -> list | None:
    k = id(kernel)
    if k in _found:
        return _found[k]
    manifest, module = _load()
    out = None
    if manifest is not None:
        entry = manifest["kernels"].get(kernel_id(kernel))
        if entry is not None and entry["key"] == source_key(kernel.py_func.__module__):
            out = [(tuple(tuple(s) for s in e["args"]), getattr(module, e["name"], None)) for e in entry["exports"]]
            out = [(specs, fn) for specs, fn in out if fn is not None] or None
    _found[k] = out
    return out


def _scalar_type(value) -> str | None:
    """numba's typeof name for a scalar argument (None: not a scalar this module passes)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64" if -2**63 <= value < 2**63 else None
    if isinstance(value, float):
        return "float64"
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.generic):
        name = value.dtype.name
        return "bool" if name == "bool" else name
    return None


def _matches(spec: tuple, value) -> bool:
    if spec[0] == "a":
        _, dtype, ndim, layout, aligned, mutable = spec
        flags = getattr(value, "flags", None)
        if flags is None or getattr(value, "ndim", None) != ndim or value.dtype.str != dtype:
            return False
        if type(value).__name__ != "ndarray" or value.dtype.names is not None:
            return False
        if layout == "C" and not flags.c_contiguous:
            return False
        # `aligned` is not checked: numba's typeof types every array aligned (x86 loads any
        # address), so the JIT runs the same code on a packed record's field
        return not (mutable and not flags.writeable)
    return _scalar_type(value) == spec[1]


def find(kernel, args: tuple):
    """The ahead-of-time function for `kernel` called with `args`, or None (module docstring)."""
    exports = _exports(kernel)
    if not exports:
        return None
    for specs, fn in exports:
        if len(specs) == len(args) and all(_matches(s, a) for s, a in zip(specs, args)):
            return fn
    return None
