"""`__all__` says a module's public surface (issue 24): every name it lists exists, and every
public name another package imports from it is listed, so the list is what the rest of sitsprof
really uses, not a wish. Read from the source (ast): the imports inside functions count too."""
from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".venv", "tests", "bench", "tools", "examples"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["sitsprof", *parts])


def _owner(name: str) -> str:
    """The package a module belongs to for this check: a policies layer (`sitsprof.policies.engine`)
    or a top-level package (`sitsprof.cli`)."""
    parts = name.split(".")
    return ".".join(parts[:3]) if len(parts) > 2 and parts[1] == "policies" else ".".join(parts[:2])


def _sources():
    return [p for p in ROOT.rglob("*.py") if not SKIP & set(p.relative_to(ROOT).parts)]


@functools.cache
def _imports_from_outside() -> dict[str, set[str]]:
    """module -> the names other packages import from it."""
    used: dict[str, set[str]] = defaultdict(set)
    for path in _sources():
        me = _module_name(path)
        package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("sitsprof.") and _owner(target) != _owner(me):
                used[target].update(a.name for a in node.names)
    return used


def _with_all() -> list[str]:
    return sorted(_module_name(p) for p in _sources() if "__all__ = [" in p.read_text(encoding="utf-8"))


def test_the_modules_that_declare_a_surface():
    names = _with_all()
    for expected in ("sitsprof.calibration", "sitsprof.policies.registry", "sitsprof.policies.sweep",
                     "sitsprof.policies.engine.protocol", "sitsprof.policies.engine.results"):
        assert expected in names


@pytest.mark.parametrize("name", _with_all())
def test_all_lists_what_exists_and_what_others_use(name):
    module = importlib.import_module(name)
    listed = list(module.__all__)
    assert len(listed) == len(set(listed)), "a name listed twice"
    missing = [n for n in listed if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ lists names it does not define: {missing}"
    used = {n for n in _imports_from_outside().get(name, ()) if not n.startswith("_")}
    submodules = {n for n in used if importlib.util.find_spec(f"{name}.{n}") is not None} \
        if hasattr(module, "__path__") else set()
    unlisted = sorted(used - set(listed) - submodules)
    assert not unlisted, f"other packages import {unlisted} from {name}: add them to its __all__"
