"""Interpreted and compiled kernels give the same results (issue 14, common/jit.py).

The kernels' own Python source (``SITSPROF_JIT=python``) against numba's compiled code
(``SITSPROF_JIT=numba``), each in its own process: every registered policy at several
capacities (with the cost model, tenancy, metrics and event logs), the Belady headroom line,
and the miss-ratio curves (exact and SHARDS-sampled, whose block hash is uint64 arithmetic),
on small generated traces and on a prefix of the bundled Mooncake trace. Every field of the
--json documents is compared except timings; the tables too, but for their time column.

Then `common.jit` itself: the decorator's forms, `py_func`, the compiled mode with kernels
that call kernels through module globals (inlined helpers included), and its cache=True files
loading in a second process with no compile.
"""
from __future__ import annotations

import json
import lzma
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from kernel_package import run_in_package

from sitsprof.policies.registry import policy_names
from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl, write_requests_jsonl
from sitsprof.policies.traces.oracle import write_oracle_general

SITSPROF = Path(sys.executable).with_name("sitsprof")
BUNDLED = Path(__file__).resolve().parents[1] / "policies" / "data" / "mooncake_conversation.jsonl.xz"
CAPACITIES = "3,40,100,300,100000"
TIMING_KEYS = {"seconds", "elapsed_s", "wall_s", "cpu_s"}


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("jit_modes")
    out = {
        "generated": write_mooncake_jsonl(generate_requests(seed=3, duration_s=20), folder / "gen.jsonl"),
        # tenants, sessions and prompt texts: CTCCI, semantic-shard's embedding key
        "requests": write_requests_jsonl(generate_requests(seed=5, duration_s=30, prompts=True),
                                         folder / "req.jsonl"),
    }
    with lzma.open(BUNDLED, "rt") as f:
        head = [next(f) for _ in range(150)]
    prefix = folder / "mooncake_prefix.jsonl"
    prefix.write_text("".join(head))
    out["mooncake"] = prefix
    # 1,000 references to 300 blocks in one SITS window: more than 255 shadow hits in a window
    # (a uint8 accumulator interpreted wraps there; compiled it does not)
    rng = random.Random(1)
    lines, t = [], 0
    for _ in range(250):
        ids = [rng.randint(0, 300) for _ in range(4)]
        lines.append(json.dumps({"timestamp": t, "input_length": 2048, "output_length": 10, "hash_ids": ids}))
        t += 100
    out["uniform"] = folder / "uniform.jsonl"
    out["uniform"].write_text("\n".join(lines) + "\n")
    # oracleGeneral with random 64-bit ids: the factorizer's hash path (uint64 multiply, wraps),
    # the oracle reader's checks, next-access times
    ids = np.random.default_rng(7).integers(0, 2**63 - 1, 400, dtype=np.int64)
    refs = ids[np.random.default_rng(8).zipf(1.3, 3000) % 400]
    out["oracle"] = write_oracle_general(folder / "t.oracleGeneral", refs)
    return out


def _sitsprof(mode: str, *args: str) -> str:
    env = dict(os.environ, SITSPROF_JIT=mode)
    out = subprocess.run([str(SITSPROF), *args], capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr
    assert "RuntimeWarning" not in out.stderr, out.stderr
    return out.stdout


def _without_timings(value):
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _diff(a, b, path="") -> list[str]:
    """Where two JSON values differ (first few), to say which field disagrees."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only on one side" for k in sorted(set(a) ^ set(b))]
        for k in sorted(set(a) & set(b)):
            out += _diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def _same_documents(args: list[str]) -> dict:
    python = json.loads(_sitsprof("python", *args))
    numba = json.loads(_sitsprof("numba", *args))
    differences = _diff(_without_timings(python), _without_timings(numba))
    assert not differences, "\n".join(differences[:20])
    return python


@pytest.mark.parametrize("name", ["generated", "requests", "mooncake", "uniform", "oracle"])
def test_every_policy_same_results_interpreted_and_compiled(traces, name, tmp_path):
    events = {mode: tmp_path / f"events-{mode}.jsonl" for mode in ("python", "numba")}
    args = ["policy", "simulate", str(traces[name]), "-p", "all", "-c", CAPACITIES, "--json"]
    docs = {}
    for mode in ("python", "numba"):
        docs[mode] = json.loads(_sitsprof(mode, *args, "--events", str(events[mode])))
    differences = _diff(_without_timings(docs["python"]), _without_timings(docs["numba"]))
    assert not differences, "\n".join(differences[:20])
    results = docs["python"]["results"]
    assert sorted({r["policy"] for r in results}) == sorted(policy_names())
    assert any(r["hits"] for r in results) and all("cost" in r["extra"] for r in results)
    logs = [[_without_timings(json.loads(line)) for line in events[m].read_text().splitlines()] for m in events]
    assert logs[0] == logs[1]


def test_parameters_and_threshold_engine_same_results(traces):
    _same_documents(["policy", "simulate", str(traces["requests"]), "-p", "sits,semantic-shard,lirs,arc,2q",
                     "-c", "20,200", "--threshold", "--window", "5s", "--ttl", "10s", "-P", "hir_ratio=0.1",
                     "--json"])
    _same_documents(["policy", "simulate", str(traces["requests"]), "-p", "semantic-shard", "-c", "50",
                     "--shard-key", "tenant", "--json"])


def test_tables_and_headroom_line_same(traces):
    def cells(text: str) -> list[str]:
        return [line.rsplit("│", 2)[0] if "│" in line and "time (s)" not in line else line
                for line in text.splitlines()]

    args = ["policy", "simulate", str(traces["mooncake"]), "-p", "lru,s3fifo,prefix_lru", "-c", "30,300"]
    python, numba = _sitsprof("python", *args), _sitsprof("numba", *args)
    assert "headroom (belady, offline optimal) block hit" in python
    assert cells(python) == cells(numba)


@pytest.mark.parametrize("sample", ["exact", "0.5"])
def test_miss_ratio_curves_same(traces, sample):
    doc = _same_documents(["policy", "mrc", str(traces["mooncake"]), "-p", "lru,arc,s3fifo", "-n", "6",
                           "--sample", sample, "--min-sampled-blocks", "5", "--json"])
    assert doc


# -- common.jit itself ------------------------------------------------------------------------

_KERNELS = '''
import numpy as np
from sitsprof.common.jit import njit


@njit(cache=True, inline="always")
def bump(a, i):
    a[i] += 1


@njit
def square(x):
    return x * x


@njit(cache=True)
def total(a):
    s = 0
    for i in range(a.shape[0]):
        bump(a, i)
        s += square(a[i])
    return s
'''

_RUN = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from sitsprof.common import jit
from sitsprof.policies.engine.compiling import watch_compiles
from sitsprof.jitdemo import k
lazy = k.total
with watch_compiles() as stats:
    got = int(lazy(np.arange(4, dtype=np.int64)))
compiled = jit.mode() == "numba"
print(json.dumps({"got": got, "compiles": stats["count"], "numba": "numba" in sys.modules, "mode": jit.mode(),
                  "bound": type(k.bump).__name__, "py_func": lazy.py_func.__name__,
                  # numba's dispatcher attributes, through the lazy kernel (compiled only: they compile)
                  "signatures": len(lazy.signatures) if compiled else None,
                  "overloads": len(lazy.overloads) if compiled else None,
                  "cached": bool(lazy._cache._cache_path) if compiled else None}))
'''


def _demo(tmp_path, mode: str) -> dict:
    return run_in_package(tmp_path, "jitdemo", _KERNELS, _RUN, mode)


def test_compiled_kernels_calling_lazy_kernels_cache_and_load(tmp_path):
    """Compiled, `total` calls `bump` (inlined) and `square` through its module's globals;
    a second process loads `total` from its cache=True files: no compile."""
    want = sum((i + 1) ** 2 for i in range(4))
    first = _demo(tmp_path, "numba")
    assert first["got"] == want and first["numba"] and first["mode"] == "numba"
    assert first["compiles"] >= 1
    assert first["bound"] == "CPUDispatcher"  # the module global is numba's dispatcher now
    assert first["signatures"] == first["overloads"] == 1 and first["cached"]
    second = _demo(tmp_path, "numba")
    assert second["got"] == want and second["compiles"] == 0
    assert list((tmp_path / "cache" / "sitsprof.jitdemo").glob("k.total-*.nbi"))
    python = _demo(tmp_path, "python")
    assert python == {"got": want, "compiles": 0, "numba": False, "mode": "python", "bound": "LazyKernel",
                      "py_func": "total", "signatures": None, "overloads": None, "cached": None}


def test_decorator_forms_and_modes(monkeypatch):
    from sitsprof.common import jit

    @jit.njit
    def plain(x):
        return x + 1

    @jit.njit(cache=True, inline="always")
    def opts(x):
        return x + 2

    assert isinstance(plain, jit.LazyKernel) and plain.py_func(1) == 2 and plain.__name__ == "plain"
    assert opts._options == {"cache": True, "inline": "always"} and opts.__wrapped__.__name__ == "opts"
    monkeypatch.setenv(jit.ENV, "bogus")
    with pytest.raises(jit.JitModeError, match="SITSPROF_JIT='bogus' is not a mode: set it to one of auto"):
        jit.requested_mode()
    with jit.scope():  # this process's mode comes back afterwards
        monkeypatch.setenv(jit.ENV, "python")
        assert jit.decide(False) == "python"  # an explicit mode ignores the size of the work
        monkeypatch.setenv(jit.ENV, "numba")
        assert jit.decide(True) == "numba"


def test_auto_rule_from_file_size_and_work(tmp_path, monkeypatch):
    from sitsprof.policies.engine import jitmode

    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    small.write_text("x" * 1000)
    big.write_text("x" * (jitmode.SMALL_FILE_BYTES + 1))
    compressed = tmp_path / "c.jsonl.xz"
    compressed.write_bytes(b"x" * (jitmode.SMALL_FILE_BYTES // jitmode.COMPRESSED_RATIO + 1))
    assert jitmode.small_file(small) and not jitmode.small_file(big) and not jitmode.small_file(compressed)
    assert not jitmode.small_file("bundled:mooncake") and not jitmode.small_file("-")
    assert jitmode.most_references(small) == 500 and jitmode.most_references(compressed) > jitmode.SMALL_FILE_BYTES // 2
    assert jitmode.estimate_s(1000, ["lru"], [10]) <= jitmode.BUDGET_S
    assert jitmode.estimate_s(1000, policy_names(), [10] * 6) > jitmode.BUDGET_S
    assert jitmode.estimate_s(10, ["a-new-policy"], [1]) == pytest.approx(10 * jitmode.DEFAULT_US * 1e-6)


def test_lazy_kernel_held_outside_sitsprof_types_as_its_dispatcher(tmp_path):
    """A module outside sitsprof keeps its lazy kernels (only sitsprof's globals are rebound):
    numba types one, as a global or as an argument, as its dispatcher (the typeof in common/jit.py)."""
    (tmp_path / "outside.py").write_text(_KERNELS + '''

@njit
def apply(f, x):
    return f(x)
''')
    code = ("import sys\nsys.path.insert(0, sys.argv[1])\nimport numpy as np\nimport outside\n"
            "print(outside.total(np.arange(4, dtype=np.int64)), outside.apply(outside.square, 5),"
            " type(outside.square).__name__)")
    env = dict(os.environ, SITSPROF_JIT="numba", SITSPROF_NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(sum((i + 1) ** 2 for i in range(4))), "25", "LazyKernel"]


def test_a_bad_mode_is_one_line_and_exit_2(traces):
    out = subprocess.run([str(SITSPROF), "policy", "simulate", str(traces["generated"]), "-p", "lru", "-c", "10"],
                         capture_output=True, text=True, env=dict(os.environ, SITSPROF_JIT="fast"), timeout=300)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == ["sitsprof: error: SITSPROF_JIT='fast' is not a mode: "
                                               "set it to one of auto, numba, python (or unset it for auto)"]
