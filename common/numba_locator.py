"""numba's cache locator for sitsprof's kernels: files keyed by package, not by folder.

numba (0.6x) keys a cached kernel's files by the absolute path of its source folder, and its
index by a hash of the source file's contents (and numba's version, the CPU). Keyed by path,
a reinstall into another folder (a fresh venv, `pip install .` after `pip install -e .`, the
fresh copy tests/test_readme.py runs in) compiles everything again for the same source.
`PackageCacheLocator` files a sitsprof kernel under its package's dotted name
(``sitsprof.policies.classic``) in the per-user cache instead, so the same source finds its
kernels wherever it is installed; a different source (an edit, another version) fails the
index's content check and compiles, as it would anyway. numba is told to try it first
through ``NUMBA_CACHE_LOCATOR_CLASSES`` (`sitsprof.common.numba_cache.configure`); for a
function outside sitsprof it declines and numba's own locators follow.

Imported by numba only, when it creates the first cached kernel (this module imports numba).
"""
from __future__ import annotations

import os

from numba.core import config
from numba.core.caching import UserProvidedCacheLocator


class PackageCacheLocator(UserProvidedCacheLocator):
    """sitsprof kernels in ``$NUMBA_CACHE_DIR/<package>``; anything else: None (the next locator)."""

    def __init__(self, py_func, py_file):
        super().__init__(py_func, py_file)
        package = py_func.__module__.rpartition(".")[0] or py_func.__module__
        self._cache_path = os.path.join(config.CACHE_DIR, package)

    @classmethod
    def from_function(cls, py_func, py_file):
        if not config.CACHE_DIR or not str(getattr(py_func, "__module__", "")).startswith("sitsprof."):
            return None
        return super().from_function(py_func, py_file)
