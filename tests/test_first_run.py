"""A first run says it is compiling the kernels (issue 13: the bar sat at 0/55 for 20-50 s).

numba compiles a kernel on a cache miss only; `NUMBA_CACHE_DIR` pointed at an empty folder
makes a cold cache for one process without touching the checkout's own cache.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

SITSPROF = Path(sys.executable).with_name("sitsprof")


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("first") / "t.jsonl"
    write_mooncake_jsonl(generate_requests(seed=2, duration_s=60), path)
    return path


def _simulate(trace_file, cache: Path, *extra):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), SITSPROF_JIT="numba")  # compiled, even on a small trace
    return subprocess.run([str(SITSPROF), "policy", "simulate", str(trace_file), "-p", "fifo,sieve", "-c", "100",
                           *extra], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_cold_cache_says_compiling_per_policy_then_warm_says_nothing(trace_file, tmp_path):
    cold = _simulate(trace_file, tmp_path / "cache")
    assert cold.returncode == 0, cold.stderr
    lines = [line for line in cold.stderr.splitlines() if line.startswith("sitsprof: ")]
    assert "sitsprof: compiling kernels (first run only): fifo (1 of 2 policies)" in lines
    assert "sitsprof: compiling kernels (first run only): sieve (2 of 2 policies)" in lines
    assert any(line.startswith("sitsprof: compiled ") and "kernel(s) in" in line for line in lines)
    # cached now: the same run says nothing about compiling
    warm = _simulate(trace_file, tmp_path / "cache")
    assert warm.returncode == 0 and "compil" not in warm.stderr
    # --json keeps stdout JSON (the note goes to stderr), with the warm run's results
    cold_json = _simulate(trace_file, tmp_path / "cache2", "--json")
    warm_json = _simulate(trace_file, tmp_path / "cache2", "--json")
    assert "first run only" in cold_json.stderr and "compil" not in warm_json.stderr
    hits = [[r["hits"] for r in json.loads(run.stdout)["results"]] for run in (cold_json, warm_json)]
    assert hits[0] == hits[1] and len(hits[0]) == 2


def test_bar_says_compiling_while_a_kernel_compiles(trace_file):
    """On a terminal the bar's text names the policy being compiled, with its place in the sweep."""
    from numba import njit
    from rich.console import Console

    from sitsprof.cli.console import run_with_progress
    from sitsprof.policies.sweep import simulate_many
    from sitsprof.policies.traces.detect import read_trace

    @njit  # a function compiled now: numba announces it as a compile
    def fresh(x):
        return x + 1

    def sweep(trace, policies, capacities, progress=None):
        def slow_progress(done, total, label):
            progress(done, total, label)
            if done == 2:  # the second policy begins: compile something
                fresh(done)
        return simulate_many(trace, policies, capacities, progress=slow_progress)

    screen = io.StringIO()
    tty = Console(file=screen, force_terminal=True, width=160)
    run_with_progress(read_trace(trace_file), ["lru", "fifo"], [50, 500], show=True, console=tty, simulate=sweep)
    text = screen.getvalue()
    assert "compiling kernels (first run only): fifo (2 of 2 policies)" in text
    assert "sitsprof: compiled 1 kernel(s) in" in text


def test_a_compile_is_named_by_the_policy_whose_module_it_is_in():
    """A parallel sweep warms every policy before its first run (done is still 0): the note
    names the policy by the compiled function's module, not by the sweep's position."""
    from types import SimpleNamespace

    from numba.core import event
    from rich.console import Console

    from sitsprof.cli.console import progress_bar

    def compile_event(module: str):
        func = SimpleNamespace(__module__=module, __qualname__="KERNEL")
        with event.trigger_event("numba:compile", data={"dispatcher": SimpleNamespace(py_func=func)}):
            pass

    pipe = io.StringIO()
    with progress_bar(["lru", "2q", "semantic-shard"], [10, 20], True, console=Console(file=pipe)):
        compile_event("sitsprof.policies.classic.twoq")
        compile_event("sitsprof.policies.adaptive.semantic_shard")
        compile_event("sitsprof.policies.cost.costmodel")  # a shared helper: the sweep's current policy
    lines = pipe.getvalue().splitlines()
    assert lines[:3] == ["sitsprof: compiling kernels (first run only): 2q (2 of 3 policies)",
                         "sitsprof: compiling kernels (first run only): semantic-shard (3 of 3 policies)",
                         "sitsprof: compiling kernels (first run only): lru (1 of 3 policies)"]
    assert lines[3].startswith("sitsprof: compiled 3 kernel(s) in")
