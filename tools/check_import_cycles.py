#!/usr/bin/env python3
"""Fail the build on any import cycle between sitsprof modules.

import-linter checks which package may import which; it does not see a cycle between two
modules of one package, and a cycle closed by an import inside a function still makes the
modules impossible to understand (or load) one at a time. This reads every module's source
with `ast` (no imports run), builds the module graph and reports each strongly connected
component as one cycle, with the file and line of every import on it.

What counts as an edge: `import a.b` and `from a import b` anywhere in a module (functions
and methods included), relative imports resolved against the module's package, `from pkg
import name` resolved to the submodule `pkg.name` when there is one, and
`importlib.import_module("a.b")` with a literal name. Imports under `if TYPE_CHECKING:` are
left out: they never run, so they cannot form a cycle at run time.

Usage: `python tools/check_import_cycles.py` reads the packages from pyproject.toml
(`[tool.setuptools.package-dir]`); `--package NAME=DIR` (repeatable) names them instead.
Exit status 0 with a one-line summary, 1 with the cycles, 2 on a usage error.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Site:
    """Where one import sits."""

    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def discover(packages: dict[str, Path]) -> dict[str, tuple[Path, bool]]:
    """Module name -> (source file, is a package) for every .py file under each package dir."""
    modules: dict[str, tuple[Path, bool]] = {}
    for name, root in packages.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if any(not p.isidentifier() for p in parts):
                continue  # not importable (e.g. a folder with a dash)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            modules[".".join([name, *parts])] = (path, is_package)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST):
    """Every node, skipping the bodies of `if TYPE_CHECKING:` (their `else` still runs)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _deepest_known(name: str, modules) -> str | None:
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imports_of(module: str, path: Path, is_package: bool, modules) -> list[tuple[str, Site]]:
    """(imported module, site) for each import of a known module in `module`'s source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in _nodes(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level - 1 > len(base_parts) - 1:
                    continue  # beyond the top of the tree: not ours to resolve
                base = ".".join(base_parts[: len(base_parts) - (node.level - 1)])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.append(sub if sub in modules else source)
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id == "import_module"))):
            targets = [node.args[0].value]
        for target in targets:
            known = _deepest_known(target, modules)
            if known is not None and known != module:
                found.append((known, Site(path, node.lineno)))
    return found


def build_graph(modules) -> dict[str, dict[str, list[Site]]]:
    """importer -> imported -> the sites of that import."""
    graph: dict[str, dict[str, list[Site]]] = {m: {} for m in modules}
    for module, (path, is_package) in modules.items():
        for target, site in imports_of(module, path, is_package, modules):
            sites = graph[module].setdefault(target, [])
            if site not in sites:  # `from x import a, b` is one site
                sites.append(site)
            sites.sort(key=lambda s: s.line)
    return graph


def strongly_connected(graph) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return sorted(components)


def shortest_cycle(graph, component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, staying inside the component."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child not in members:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError("a strongly connected component always holds a cycle")


def report(graph, components, root: Path | None = None) -> list[str]:
    """The lines printed for the cycles found."""
    def where(site: Site) -> str:
        path = site.path
        if root is not None:
            try:
                path = path.resolve().relative_to(root.resolve())
            except ValueError:
                pass
        return f"{path}:{site.line}"

    lines = [f"{len(components)} import cycle(s) between modules:"]
    for number, component in enumerate(components, 1):
        cycle = shortest_cycle(graph, component)
        lines.append(f"cycle {number}: {' -> '.join(cycle)}")
        for a, b in zip(cycle, cycle[1:]):
            lines.append(f"    {a} -> {b}  at {', '.join(where(s) for s in graph[a][b])}")
        others = sorted(set(component) - set(cycle))
        if others:
            lines.append(f"    (the same cycle group also holds: {', '.join(others)})")
    return lines


def packages_from_pyproject(pyproject: Path) -> dict[str, Path]:
    text = pyproject.read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:  # Python 3.10 has no TOML reader: the table is `"name" = "folder"` lines
        section = re.search(r"^\[tool\.setuptools\.package-dir\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
        package_dir = dict(re.findall(r'^"([^"]+)"\s*=\s*"([^"]+)"', section.group(1), re.M)) if section else {}
    else:
        package_dir = tomllib.loads(text).get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return {name: pyproject.parent / folder for name, folder in package_dir.items() if name}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", action="append", default=[], metavar="NAME=DIR",
                        help="a top-level package and its folder (default: pyproject.toml's package-dir)")
    parser.add_argument("--pyproject", type=Path, default=Path(__file__).resolve().parent.parent / "pyproject.toml")
    args = parser.parse_args(argv)
    if args.package:
        packages = {}
        for item in args.package:
            name, sep, folder = item.partition("=")
            if not sep or not name or not folder:
                parser.error(f"--package {item!r}: give NAME=DIR")
            packages[name] = Path(folder)
        root = None
    else:
        packages = packages_from_pyproject(args.pyproject)
        root = args.pyproject.parent
    missing = [f"{name} ({folder})" for name, folder in packages.items() if not folder.is_dir()]
    if missing:
        print(f"check_import_cycles: no such package folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    modules = discover(packages)
    graph = build_graph(modules)
    components = strongly_connected(graph)
    if components:
        print("\n".join(report(graph, components, root)))
        return 1
    edges = sum(len(targets) for targets in graph.values())
    print(f"no import cycles: {len(modules)} modules, {edges} edges")
    return 0


if __name__ == "__main__":
    sys.exit(main())
