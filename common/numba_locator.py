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

Files are named by the source's content too (`content_key`): numba's index holds one version
of a source at a time, so two checkouts of different versions sharing the per-user cache (two
branches, eight clones on one machine) used to overwrite each other's index and compile again
on every switch; keyed by content, each version keeps its files and the same text is still
shared. A module whose kernels compile other files' code in (numba inlines and links callees
without tracking them) names those files in ``NUMBA_CACHE_DEPENDS`` (paths relative to its
folder: the serving replay's scheduler), and they enter its key, so an edit to any of them
compiles it afresh.

Imported by numba only, when it creates the first cached kernel (this module imports numba).
"""
from __future__ import annotations

import functools
import hashlib
import os
import sys
from pathlib import Path

from numba.core import config
from numba.core.caching import UserProvidedCacheLocator

__all__ = ["PackageCacheLocator", "content_key"]


class PackageCacheLocator(UserProvidedCacheLocator):
    """sitsprof kernels in ``$NUMBA_CACHE_DIR/<package>``; anything else: None (the next locator)."""

    def __init__(self, py_func, py_file):
        super().__init__(py_func, py_file)
        package = py_func.__module__.rpartition(".")[0] or py_func.__module__
        self._cache_path = os.path.join(config.CACHE_DIR, package)
        self._content = content_key(py_func.__module__, py_file)

    def get_disambiguator(self):
        """numba's line number, then `content_key`: each version of a source keeps its own files."""
        return f"{self._lineno}-{self._content}"

    @classmethod
    def from_function(cls, py_func, py_file):
        if not config.CACHE_DIR or not str(getattr(py_func, "__module__", "")).startswith("sitsprof."):
            return None
        return super().from_function(py_func, py_file)


@functools.cache
def content_key(module_name: str, py_file: str) -> str:
    """12 hex digits of a hash of the source file and of the files its module names in
    ``NUMBA_CACHE_DEPENDS`` (read once a process; a missing one counts as empty)."""
    module = sys.modules.get(module_name)
    here = Path(py_file).parent
    digest = hashlib.sha256()
    for path in (Path(py_file), *(here / name for name in getattr(module, "NUMBA_CACHE_DEPENDS", ()))):
        try:
            data = path.read_bytes()
        except OSError:
            data = b""
        digest.update(path.name.encode() + b"\0" + data)
    return digest.hexdigest()[:12]
