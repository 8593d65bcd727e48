"""The first run compiles each kernel once (issue 14): helpers called from inside other kernels
get int64 arguments, never a literal constant or a narrower integer, which numba would compile
as one more specialisation each; and `costmodel.kth_smallest`, the quickselect that spares numba's
np.partition its compile, agrees with np.partition."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from sitsprof.policies.cost.costmodel import _order_statistics, kth_smallest

# Helpers that other kernels call (a second signature here is a second compile on a first run).
# Not here: the replay loops (arc.replay_scan, lirs.replay_window, ...), which the whole-trace
# KERNEL calls with a literal 0 as the first reference, on purpose: the compiler then drops
# the negative-index checks (bench_kernel_rev: fifo, sieve and ARC kernels 18-37% slower
# without); the streamed path compiles them once more with an int64.
HELPERS = {
    "sitsprof.policies.classic.arc": ("new_state",),
    "sitsprof.policies.classic.twoq": ("new_rows", "new_ring", "new_ghost"),
    "sitsprof.policies.classic._structs": ("new_lists",),
    "sitsprof.policies.classic.belady": ("_sift_up",),
    "sitsprof.policies.classic.lirs": ("new_state",),
    "sitsprof.policies.cost.costmodel": ("ttft_kernel", "kth_smallest"),
    "sitsprof.policies.adaptive.semantic_shard": ("_drop", "_expire_tail"),
}

_PROBE = textwrap.dedent("""
    import contextlib, io, json, sys
    from sitsprof.cli.main import main
    from sitsprof.common import jit
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(["policy", "simulate", sys.argv[1], "-p", "all", "-c", "50,400", "--json"])
        except SystemExit as e:
            assert not e.code, e.code
    helpers = json.loads(sys.argv[2])
    out = {}
    for mod, names in helpers.items():
        m = sys.modules.get(mod)
        for name in names:
            k = getattr(m, name, None) if m is not None else None
            d = getattr(k, "_dispatcher", k)
            sigs = [str(s) for s in getattr(d, "signatures", [])] if d is not None else []
            out[mod + "." + name] = sigs
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_policy_simulate_all_compiles_each_helper_once(tmp_path):
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    trace = tmp_path / "trace.jsonl"
    write_mooncake_jsonl(generate_requests(seed=3, duration_s=60), trace)
    # A cold cache (as tests/test_first_run.py makes one): a kernel loaded from the cache
    # brings its callees' code with it and leaves their dispatchers empty.
    cache = str(tmp_path / "numba")
    env = dict(os.environ, SITSPROF_JIT="numba", SITSPROF_NUMBA_CACHE_DIR=cache, NUMBA_CACHE_DIR=cache)
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(trace), json.dumps(HELPERS)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sigs = json.loads(proc.stdout.strip().splitlines()[-1])
    used = {name: s for name, s in sigs.items() if s}
    # the run reaches the helpers (a probe that found none would pass for nothing)
    for name in ("classic.twoq.new_rows", "classic._structs.new_lists", "classic.belady._sift_up",
                 "adaptive.semantic_shard._drop", "adaptive.semantic_shard._expire_tail", "cost.costmodel.ttft_kernel",
                 "cost.costmodel.kth_smallest"):
        assert used.get("sitsprof.policies." + name), (name, sigs)
    several = {name: s for name, s in used.items() if len(s) > 1}
    assert not several, several
    assert not [s for ss in used.values() for s in ss if "Literal" in s]  # a literal: a compile per value


@pytest.mark.parametrize("kind", ["uniform", "duplicates", "sorted", "reversed", "equal", "tiny"])
def testkth_smallest_is_np_partition(kind):
    rng = np.random.default_rng(7)
    n = {"tiny": 1}.get(kind, 2001)
    a = {"uniform": rng.random(n), "duplicates": rng.integers(0, 5, n).astype(np.float64),
         "sorted": np.arange(n, dtype=np.float64), "reversed": np.arange(n, 0, -1, dtype=np.float64),
         "equal": np.full(n, 0.25), "tiny": np.array([3.5])}[kind]
    for k in sorted({0, n // 3, n // 2, n - 1}):
        want = np.partition(a, k)[k]
        for select in (kth_smallest, kth_smallest.py_func):
            b = a.copy()
            assert select(b, np.int64(k)) == want
            assert np.array_equal(np.sort(b), np.sort(a))  # reordered, nothing lost


def test_order_statistics_gathers_throughkth_smallest():
    # 300,000 values in a narrow band share their top 16 bits: the second pass gathers them
    rng = np.random.default_rng(11)
    values = 1.0 + rng.random(300_000) * 1e-9
    values[::7] = 1.5
    ranks = np.array([0, 1, 12_345, 150_000, 299_999], dtype=np.int64)
    out = np.empty(len(ranks))
    assert _order_statistics(values, ranks, out)
    assert np.array_equal(out, np.sort(values)[ranks])


@pytest.mark.parametrize("m", [1, 2, 3, 100, 1999])
def test_p99_through_kth_smallest_is_np_percentile(m):
    from sitsprof.policies.adaptive.signals import p99

    rng = np.random.default_rng(m)
    for values in (rng.random(2000), rng.integers(0, 4, 2000).astype(np.float64)):
        kept = values.copy()
        for f in (p99, p99.py_func):
            assert f(values, np.int64(m)) == pytest.approx(np.percentile(values[:m], 99), rel=1e-12, abs=0)
        assert np.array_equal(values, kept)  # p99 leaves its input alone


@pytest.mark.slow
def test_after_sitsprof_compile_the_first_run_compiles_nothing(compiled_cold_cache):
    # bench_startup.py found one: the percentile select, which the small warm trace never reaches
    sitsprof = os.path.join(os.path.dirname(sys.executable), "sitsprof")
    env = compiled_cold_cache  # `sitsprof compile -p lru` into an empty cache (conftest.py)
    run = subprocess.run([sitsprof, "policy", "simulate", "bundled:mooncake", "-p", "lru", "-c", "1000", "--json"],
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["results"][0]["requests"] >= 4096  # the select's size, not np.percentile's
    assert "compil" not in run.stderr, run.stderr
