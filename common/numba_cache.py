"""Where numba keeps sitsprof's compiled kernels: one per-user folder, shared by every run.

By default numba caches a ``cache=True`` kernel beside its module (``__pycache__``), or, where
that folder is not writable (a system-wide install), in a per-user folder of its own. sitsprof
points ``NUMBA_CACHE_DIR`` at ``~/.cache/sitsprof/numba/py3.X`` (``$XDG_CACHE_HOME`` when set)
instead, so that the CLI, ``make demo``, ``make test`` and ``sitsprof compile`` all read and
write one cache, whatever folder the package is imported from and whoever can write there.

A ``NUMBA_CACHE_DIR`` already set is kept (tests/test_first_run.py makes cold caches that
way); ``SITSPROF_NUMBA_CACHE_DIR`` overrides the default folder. What stays numba's: inside
the folder a kernel's files are keyed by its source folder's absolute path, and its index
by the source file's modification time and size, the numba version and the CPU; so a
reinstall into another folder (a fresh venv) compiles again, measured in bench/README.md.

Cheap on purpose: this module imports neither numba nor anything heavy (`configure` runs on
every import of the policy engine) and must run before numba is first imported, since numba
reads ``NUMBA_CACHE_DIR`` then; when numba is already imported it sets numba's config too.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "NUMBA_CACHE_DIR"
OVERRIDE_ENV = "SITSPROF_NUMBA_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$SITSPROF_NUMBA_CACHE_DIR``, else ``$XDG_CACHE_HOME/sitsprof/numba/py3.X`` (``~/.cache`` without it)."""
    override = os.environ.get(OVERRIDE_ENV)
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sitsprof" / "numba" / f"py{sys.version_info[0]}.{sys.version_info[1]}"


def configure() -> str:
    """Set ``NUMBA_CACHE_DIR`` to the default folder unless it is set already; the folder numba will use."""
    folder = os.environ.get(ENV)
    if not folder:
        folder = str(default_cache_dir())
        os.environ[ENV] = folder
    config = sys.modules.get("numba.core.config")
    if config is not None and getattr(config, "CACHE_DIR", None) != folder:
        config.CACHE_DIR = folder  # numba imported before us: kernels decorated from now on use it
    return folder
