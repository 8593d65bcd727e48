"""Run a script against kernels written into a throwaway ``sitsprof.<package>`` module.

The kernels must live under ``sitsprof.`` for `common.jit` to rebind their module's globals
when the first one compiles; each run gets a fresh process (the JIT mode is chosen once per
process) and numba cache in `tmp_path`, so a compiled run compiles from scratch once.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys


def run_in_package(tmp_path, package: str, source: str, script: str, mode: str) -> dict:
    """Write `source` as ``sitsprof/<package>/k.py`` under `tmp_path`, run `script` (which gets
    that folder's root as argv[1] and prints one JSON document) with ``SITSPROF_JIT=mode``."""
    folder = tmp_path / "pkg" / "sitsprof" / package
    if not folder.exists():
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "k.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "NUMBA_CACHE_LOCATOR_CLASSES")}
    env.update(SITSPROF_NUMBA_CACHE_DIR=str(tmp_path / "cache"), SITSPROF_JIT=mode)
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "pkg")], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)
