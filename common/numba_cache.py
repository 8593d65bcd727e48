"""Where numba keeps sitsprof's compiled kernels: one per-user folder, shared by every run.

By default numba caches a ``cache=True`` kernel beside its module (``__pycache__``), or, where
that folder is not writable (a system-wide install), in a per-user folder of its own. sitsprof
points ``NUMBA_CACHE_DIR`` at ``~/.cache/sitsprof/numba/py3.X`` (``$XDG_CACHE_HOME`` when set)
instead, so that the CLI, ``make demo``, ``make test`` and ``sitsprof compile`` all read and
write one cache, whatever folder the package is imported from and whoever can write there.

A ``NUMBA_CACHE_DIR`` already set is kept (tests/test_first_run.py makes cold caches that
way); ``SITSPROF_NUMBA_CACHE_DIR`` overrides the default folder. Inside it numba would key a
kernel's files by its source folder's absolute path, so a reinstall into another folder (a
fresh venv, the copy tests/test_readme.py runs in) would compile again for the same source;
`configure` also puts sitsprof's locator first in ``NUMBA_CACHE_LOCATOR_CLASSES`` (numba
0.62+; `sitsprof.common.numba_locator`), which files them by package instead; numba's index
still checks a hash of the source, numba's version and the CPU (bench/README.md measures it).

Cheap on purpose: this module imports neither numba nor anything heavy (`configure` runs on
every import of the policy engine) and must run before numba is first imported, since numba
reads ``NUMBA_CACHE_DIR`` then; when numba is already imported it sets numba's config too.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["ENV", "LOCATORS", "LOCATORS_ENV", "OVERRIDE_ENV", "configure", "default_cache_dir", "user_cache_dir"]

ENV = "NUMBA_CACHE_DIR"
OVERRIDE_ENV = "SITSPROF_NUMBA_CACHE_DIR"
LOCATORS_ENV = "NUMBA_CACHE_LOCATOR_CLASSES"
#: sitsprof's locator, then numba's own, in numba's order (names numba resolves in numba.core.caching).
LOCATORS = ("sitsprof.common.numba_locator.PackageCacheLocator,UserProvidedCacheLocator,InTreeCacheLocator,"
            "UserWideCacheLocator,IPythonCacheLocator,ZipCacheLocator")


def user_cache_dir(kind: str, override_env: str) -> Path:
    """``$<override_env>``, else ``$XDG_CACHE_HOME/sitsprof/<kind>/py3.X`` (``~/.cache`` without it):
    per user and per Python version (compiled code is for one interpreter)."""
    override = os.environ.get(override_env)
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sitsprof" / kind / f"py{sys.version_info[0]}.{sys.version_info[1]}"


def default_cache_dir() -> Path:
    """``$SITSPROF_NUMBA_CACHE_DIR``, else ``$XDG_CACHE_HOME/sitsprof/numba/py3.X`` (``~/.cache`` without it)."""
    return user_cache_dir("numba", OVERRIDE_ENV)


def configure() -> str:
    """Set ``NUMBA_CACHE_DIR`` to the default folder and ``NUMBA_CACHE_LOCATOR_CLASSES`` to
    `LOCATORS`, each unless it is set already; the folder numba will use."""
    folder = os.environ.get(ENV)
    if not folder:
        folder = str(default_cache_dir())
        os.environ[ENV] = folder
    locators = os.environ.setdefault(LOCATORS_ENV, LOCATORS)
    config = sys.modules.get("numba.core.config")
    if config is not None:  # numba imported before us: kernels decorated from now on use these
        if getattr(config, "CACHE_DIR", None) != folder:
            config.CACHE_DIR = folder
        if hasattr(config, "CACHE_LOCATOR_CLASSES") and not config.CACHE_LOCATOR_CLASSES:
            config.CACHE_LOCATOR_CLASSES = locators
    return folder
