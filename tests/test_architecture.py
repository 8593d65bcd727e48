"""The build's architecture checks catch what they claim to: the cycle checker finds and names
a cycle (imports inside functions included) without inventing one for `from . import x`, and
the real import-linter contracts of pyproject.toml refuse a forbidden import."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKER = ROOT / "tools" / "check_import_cycles.py"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def _check_cycles(tmp_path: Path, files: dict[str, str]) -> subprocess.CompletedProcess:
    _write(tmp_path, files)
    return subprocess.run([sys.executable, str(CHECKER), "--package", f"pkg={tmp_path / 'pkg'}"],
                          capture_output=True, text=True, timeout=60)


def test_a_cycle_is_found_and_named_with_each_import_site(tmp_path):
    result = _check_cycles(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "import os\nfrom pkg.b import thing\n",
        "pkg/b.py": "thing = 1\nfrom .c import other\n",
        "pkg/c.py": "other = 2\nimport pkg.a\n",
    })
    assert result.returncode == 1, result.stdout
    assert "cycle 1: pkg.a -> pkg.b -> pkg.c -> pkg.a" in result.stdout
    assert f"pkg.a -> pkg.b  at {tmp_path / 'pkg' / 'a.py'}:2" in result.stdout
    assert f"pkg.b -> pkg.c  at {tmp_path / 'pkg' / 'b.py'}:2" in result.stdout
    assert f"pkg.c -> pkg.a  at {tmp_path / 'pkg' / 'c.py'}:2" in result.stdout


def test_from_dot_import_of_a_sibling_is_an_edge_to_the_sibling_not_the_package(tmp_path):
    # Resolved to the package, `from . import b` would close pkg -> pkg.a -> pkg.
    result = _check_cycles(tmp_path, {
        "pkg/__init__.py": "from . import a\n",
        "pkg/a.py": "from . import b\nfrom .sub import leaf\n",
        "pkg/b.py": "",
        "pkg/sub/__init__.py": "",
        "pkg/sub/leaf.py": "from .. import b\n",
    })
    assert result.returncode == 0, result.stdout
    assert result.stdout.strip() == "no import cycles: 5 modules, 4 edges"


def test_imports_inside_functions_count_and_type_checking_ones_do_not(tmp_path):
    result = _check_cycles(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    from pkg import b\n    return b\n",
        "pkg/b.py": "class C:\n    def m(self):\n        import importlib\n"
                    "        return importlib.import_module('pkg.a')\n",
        "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\n",
        "pkg/d.py": "from pkg import c\n",
    })
    assert result.returncode == 1
    assert "pkg.a -> pkg.b -> pkg.a" in result.stdout and "pkg.c" not in result.stdout
    assert "a.py:2" in result.stdout and "b.py:4" in result.stdout


def _contracts_for(tree: Path) -> Path:
    """pyproject.toml's own import-linter contracts, with `sitsprof` renamed `archtest`."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    start = text.index("[tool.importlinter]")
    end = text.find("\n[tool.", text.index("\n", text.rindex("[[tool.importlinter.contracts]]")))
    config = tree / "contracts.toml"
    config.write_text(text[start:end if end != -1 else None].replace("sitsprof.", "archtest."), encoding="utf-8")
    return config


def _lint(tree: Path, config: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--config", str(config), "--no-cache"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(importlib.util.find_spec("importlinter") is None, reason="import-linter is not installed")
def test_the_real_contracts_refuse_a_forbidden_import(tmp_path):
    # A namespace package (no archtest/__init__.py) like sitsprof, holding every module the
    # contracts name (a layers contract needs each layer to exist), and the allowed edges.
    config = _contracts_for(tmp_path)
    named = set(re.findall(r"archtest\.[A-Za-z_][\w.]*", config.read_text(encoding="utf-8")))
    _write(tmp_path, {f"{name.replace('.', '/')}/__init__.py": "" for name in named})
    _write(tmp_path, {"archtest/reports/policy.py": "from archtest.policies.engine import results\n",
                      "archtest/cli/main.py": "import archtest.pmu\nimport archtest.policies.registry\n"})

    kept = _lint(tmp_path, config)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    contracts = config.read_text(encoding="utf-8").count("[[tool.importlinter.contracts]]")
    assert contracts >= 9 and f"Contracts: {contracts} kept, 0 broken." in kept.stdout, kept.stdout

    _write(tmp_path, {"archtest/pmu/device.py": "import os\n\n\ndef f():\n    from archtest.cli import main\n"})
    broken = _lint(tmp_path, config)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "pmu imports only common BROKEN" in broken.stdout
    assert "archtest.pmu.device -> archtest.cli.main (l.5)" in broken.stdout
