"""Start-up (issue 14): a command loads only what it uses, and the kernels live in one cache.

- The registry imports a policy's module when that policy is asked for: a CLI run of one
  policy imports no other policy's module, and nothing of pandas, pyarrow, plotly, jinja2 or numpy.ma.
- `_import_all` (the static imports the layering checks read) lists exactly `SPECS`.
- The policy engine points numba at one per-user cache (`common/numba_cache.py`), keeps a
  NUMBA_CACHE_DIR already set, and `sitsprof compile` fills it so a later run compiles nothing.
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sitsprof.policies import registry
from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

SITSPROF = Path(sys.executable).with_name("sitsprof")
POLICY_MODULES = {f"sitsprof.policies.{path}" for _, path in registry.SPECS}


def _python(code: str, env: dict | None = None) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, **(env or {})))
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def tiny_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("startup") / "tiny.jsonl"
    write_mooncake_jsonl(generate_requests(seed=3, duration_s=20), path)
    return path


def test_one_policy_run_imports_that_policy_only_and_no_dataframe_or_plot_library(tiny_trace):
    code = f"""
import json, sys
from sitsprof.cli.main import main
code = main(["policy", "simulate", {str(tiny_trace)!r}, "-p", "arc", "-c", "10", "--json"])
print(json.dumps({{"code": code, "modules": sorted(sys.modules)}}), file=sys.stderr)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stderr.strip().splitlines()[-1])
    assert loaded["code"] == 0
    modules = set(loaded["modules"])
    assert POLICY_MODULES & modules == {"sitsprof.policies.classic.arc"}
    assert not {"pandas", "pyarrow", "plotly", "jinja2"} & {m.split(".")[0] for m in modules}
    assert "numpy.ma" not in modules  # np.unique and np.percentile import it: ~0.02 s (tenancy, cost model)
    assert json.loads(out.stdout)["results"][0]["policy"] == "arc"


def test_names_and_selection_import_no_policy_module():
    loaded = json.loads(_python(
        "import json, sys\n"
        "from sitsprof.policies import registry\n"
        "names = registry.policy_names(); sel = registry.select_policies('LRU,twoq,prefix-lru')\n"
        "print(json.dumps([names, sel, sorted(sys.modules)]))\n"))
    names, selected, modules = loaded
    assert names[0] == "lru" and names[-1] == "belady" and len(names) == 12
    assert selected == ["lru", "2q", "prefix_lru"]
    assert not POLICY_MODULES & set(modules)
    assert "numba" not in modules


def test_static_imports_list_exactly_the_registered_modules():
    """The registry's import statements (what import-linter and the cycle checker see) are its SPECS."""
    tree = ast.parse(Path(registry.__file__).read_text())
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_import_all")
    static = {f"sitsprof.policies.{node.module}.{alias.name}" for node in ast.walk(func)
              if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert static == POLICY_MODULES
    assert [m.__name__ for m in registry._import_all()] == [f"sitsprof.policies.{p}" for _, p in registry.SPECS]
    assert [m.NAME for m in registry.MODULES] == registry.policy_names() == list(registry.POLICIES)


def test_lookup_behaviour_kept():
    assert registry.get_policy(" LRU ") is registry.POLICIES["lru"]
    assert registry.get_policy("semantic_shard").NAME == "semantic-shard"
    assert registry.select_policies("all") == registry.policy_names()
    from sitsprof.policies.errors import UnknownPolicyError

    with pytest.raises(UnknownPolicyError, match="choose from lru, fifo"):
        registry.get_policy("nope")
    with pytest.raises(UnknownPolicyError):
        registry.select_policies("lru,nope")


def test_cache_folder_default_override_and_kept_env(tmp_path):
    code = ("import os\nimport sitsprof.policies\nimport numba.core.config as c\n"
            "print(os.environ['NUMBA_CACHE_DIR']); print(c.CACHE_DIR)")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "SITSPROF_NUMBA_CACHE_DIR")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    want = str(tmp_path / "xdg" / "sitsprof" / "numba" / f"py{sys.version_info[0]}.{sys.version_info[1]}")
    assert out.stdout.split() == [want, want], out.stderr
    env["SITSPROF_NUMBA_CACHE_DIR"] = str(tmp_path / "mine")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split() == [str(tmp_path / "mine")] * 2, out.stderr
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "set")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split() == [str(tmp_path / "set")] * 2, out.stderr


def test_numba_imported_first_still_gets_the_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR",)}
    env["SITSPROF_NUMBA_CACHE_DIR"] = str(tmp_path / "late")
    code = "import numba.core.config as c\nimport sitsprof.policies\nprint(c.CACHE_DIR)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip() == str(tmp_path / "late"), out.stderr


@pytest.mark.slow
def test_compile_fills_the_cache_a_later_run_loads(tiny_trace, tmp_path, compiled_cold_cache):
    """`sitsprof compile -p fifo,sieve` into a cache without them: the kernels land in the folder
    and a `policy simulate` of those policies afterwards compiles nothing (no first-run note).
    The cache is a copy of the session's `sitsprof compile -p lru -j 2` one (conftest.py: the
    serving replay compiled in a worker into an empty cache), so the serving replay's minute of
    compiling is paid once a session; fifo's and sieve's kernels are not in it (checked)."""
    shutil.copytree(compiled_cold_cache["SITSPROF_NUMBA_CACHE_DIR"], tmp_path / "cache")
    # the classic kernels only: the serving replay compiles its evictors/fifo.py and sieve.py in
    classic = [p for name in ("fifo", "sieve") for p in (tmp_path / "cache").rglob(f"{name}.*.nbi")
               if p.parent.name == "sitsprof.policies.classic"]
    assert not classic
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["SITSPROF_NUMBA_CACHE_DIR"] = str(tmp_path / "cache")
    env["SITSPROF_JIT"] = "numba"  # the later run compiled (auto would interpret a trace this small)
    done = subprocess.run([str(SITSPROF), "compile", "-p", "fifo,sieve", "-j", "2", "--json"], capture_output=True,
                          text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["policies"] == ["fifo", "sieve"] and report["compiles"] > 0
    assert "compiling kernels (first run only): fifo (" in done.stderr
    assert [p for p in (tmp_path / "cache").rglob("fifo.KERNEL-*.nbi") if p.parent.name == "sitsprof.policies.classic"]
    run = subprocess.run([str(SITSPROF), "policy", "simulate", str(tiny_trace), "-p", "fifo,sieve", "-c", "100"],
                         capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stderr
    assert "compil" not in run.stderr


def test_same_source_in_another_folder_loads_the_kernels_compiled_from_the_first(tmp_path):
    """A reinstall elsewhere (a fresh venv, the copy test_readme runs in) finds the kernels: the
    cache is keyed by package and source hash, not by folder (common/numba_locator.py)."""
    for copy in ("one", "two"):
        folder = tmp_path / copy / "sitsprof" / "kernelsdemo"
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "k.py").write_text("from numba import njit\n\n\n@njit(cache=True)\ndef twice(x):\n    return 2 * x\n")
    code = ("import sys\nsys.path.insert(0, sys.argv[1])\nimport sitsprof.policies\n"
            "from sitsprof.policies.engine.compiling import watch_compiles\n"
            "from sitsprof.kernelsdemo.k import twice\n"
            "with watch_compiles() as stats:\n    assert twice(21) == 42\nprint(stats['count'])")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "NUMBA_CACHE_LOCATOR_CLASSES")}
    env["SITSPROF_NUMBA_CACHE_DIR"] = str(tmp_path / "cache")

    def compiles(copy: str) -> int:
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / copy)], capture_output=True, text=True,
                             env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.strip())

    assert compiles("one") == 1
    assert compiles("two") == 0  # the other folder's source, the same text: loaded, not compiled
    assert list((tmp_path / "cache" / "sitsprof.kernelsdemo").glob("k.twice-*.nbi"))
    (tmp_path / "two" / "sitsprof" / "kernelsdemo" / "k.py").write_text(
        "from numba import njit\n\n\n@njit(cache=True)\ndef twice(x):\n    return x + x\n")
    assert compiles("two") == 1  # edited source: compiled again
    # each version keeps its own files (keyed by content): switching back and forth compiles nothing
    assert compiles("one") == 0 and compiles("two") == 0
    assert len(list((tmp_path / "cache" / "sitsprof.kernelsdemo").glob("k.twice-*.nbi"))) == 2


def test_a_kernel_is_compiled_again_when_a_file_it_depends_on_changes(tmp_path):
    """NUMBA_CACHE_DEPENDS (common/numba_locator.py): numba does not track the callees it compiles
    in; a module names the files they live in, and an edit to one of them compiles it afresh."""
    folder = tmp_path / "sitsprof" / "kernelsdemo"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    dep = "from numba import njit\n\n\n@njit(cache=True)\ndef step(x):\n    return x + {}\n"
    (folder / "dep.py").write_text(dep.format(1))
    (folder / "k.py").write_text("from numba import njit\n\nfrom .dep import step\n\n"
                                 "NUMBA_CACHE_DEPENDS = ('dep.py',)\n\n\n"
                                 "@njit(cache=True)\ndef twice(x):\n    return 2 * step(x)\n")
    code = ("import sys\nsys.path.insert(0, sys.argv[1])\nimport sitsprof.policies\n"
            "from sitsprof.kernelsdemo.k import twice\nprint(twice(20))")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "NUMBA_CACHE_LOCATOR_CLASSES")}
    env["SITSPROF_NUMBA_CACHE_DIR"] = str(tmp_path / "cache")

    def result() -> int:
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                             env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.strip())

    assert result() == 42
    (folder / "dep.py").write_text(dep.format(2))
    assert result() == 44  # without the dependency in its key, twice's cached code would still add 1


def test_compile_workers_only_where_there_are_cores_to_spare(monkeypatch):
    """Two workers measured slower than one process on 2 cores (bench/README.md): one there."""
    from sitsprof.policies import precompile

    monkeypatch.setattr(precompile, "cpu_count", lambda: 2)
    assert precompile.default_jobs() == 1
    monkeypatch.setattr(precompile, "cpu_count", lambda: 16)
    assert precompile.default_jobs() == 16


def _simulate_modules(trace, env: dict, *args: str) -> tuple[set, str]:
    code = f"""
import json, os, sys
from sitsprof.cli.main import main
code = main(["policy", "simulate", {str(trace)!r}, *{list(args)!r}])
print(json.dumps({{"code": code, "modules": sorted(sys.modules), "blas": os.environ.get("OPENBLAS_NUM_THREADS")}}),
      file=sys.stderr)
"""
    run_env = {k: v for k, v in os.environ.items()
               if k not in ("SITSPROF_JIT", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env=dict(run_env, **env))
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stderr.strip().splitlines()[-1])
    assert loaded["code"] == 0
    return set(loaded["modules"]) | ({"OPENBLAS_NUM_THREADS=1"} if loaded["blas"] == "1" else set()), out.stdout


def test_small_simulate_imports_no_numba_and_prints_what_numba_prints(tiny_trace):
    """Issue 14: a 1,000-reference-sized `policy simulate` (SITSPROF_JIT unset: auto) runs the
    kernels' Python source; numba is never imported; the table is the compiled run's."""
    modules, table = _simulate_modules(tiny_trace, {}, "-p", "lru,arc", "-c", "10")
    assert not {m for m in modules if m == "numba" or m.startswith(("numba.", "llvmlite"))}
    assert "OPENBLAS_NUM_THREADS=1" in modules  # jitmode.quiet_blas: one BLAS thread, set before numpy loaded
    compiled_modules, compiled_table = _simulate_modules(tiny_trace, {"SITSPROF_JIT": "numba"}, "-p", "lru,arc",
                                                         "-c", "10")
    assert "numba" in compiled_modules

    def without_times(text: str) -> list[str]:  # the time (s) column is the one that differs
        return [line.rsplit("│", 2)[0] if "│" in line else line for line in text.splitlines()]

    assert without_times(table) == without_times(compiled_table)
    assert "headroom (belady, offline optimal)" in table


def test_large_work_compiles_under_auto(tiny_trace):
    """Above the rule (policies/engine/jitmode.py) auto is the compiled run it was before."""
    from sitsprof.policies.engine import jitmode
    from sitsprof.policies.registry import policy_names

    capacities = ["10", "20", "40", "80", "160", "320"]
    from sitsprof.policies.traces.detect import read_trace

    references = len(read_trace(str(tiny_trace)).block)
    assert jitmode.estimate_s(references, policy_names(), capacities) > jitmode.BUDGET_S
    modules, _ = _simulate_modules(tiny_trace, {}, "-p", "all", "-c", ",".join(capacities), "--json")
    assert "numba" in modules and "OPENBLAS_NUM_THREADS=1" not in modules
    modules, _ = _simulate_modules(tiny_trace, {"SITSPROF_JIT": "python"}, "-p", "lru", "-c", "10", "--json")
    assert "numba" not in modules
