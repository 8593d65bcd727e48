"""`common.prefetch`: the hint compiled kernels give the CPU for the block they serve next.

A prefetch must change no result and must really be emitted: a kernel that prefetches is
compiled in a fresh cache and its LLVM IR read for the ``llvm.prefetch`` call (LLVM LangRef,
"llvm.prefetch" intrinsic), its result compared with the same kernel interpreted
(``SITSPROF_JIT=python``, where the hint does nothing and numba is never imported). The policy
kernels that prefetch are checked hit for hit against libCacheSim in test_policies_classic.py
and against their streaming form in test_stream.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from kernel_package import run_in_package

_KERNEL = '''
import numpy as np
from sitsprof.common.jit import njit
from sitsprof.common.prefetch import AHEAD, prefetch


@njit(cache=True)
def gather(idx, table, col):
    s = 0
    for i in range(idx.shape[0]):
        if i + AHEAD < idx.shape[0]:
            prefetch(table, idx[i + AHEAD])
            prefetch(col, idx[i + AHEAD])  # a strided view
        s += table[idx[i]] + col[idx[i]]
    return s


@njit
def flat_only(rows):
    prefetch(rows, 0)  # a 2-D array: refused when typed
'''

_RUN = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from sitsprof.common import jit
from sitsprof.jitpf import k
rng = np.random.default_rng(7)
idx = rng.integers(0, 1000, 5000).astype(np.int32)
rows = rng.integers(0, 99, (1000, 4)).astype(np.int64)
got = int(k.gather(idx, rows[:, 0].copy(), rows[:, 2]))
out = {"got": got, "want": int(rows[idx, 0].sum() + rows[idx, 2].sum()), "numba": "numba" in sys.modules,
       "prefetch_is": type(k.prefetch).__name__}
if jit.mode() == "python":
    out["python_call"] = k.prefetch(idx, 10**9)  # out of range: still nothing
else:
    (ir,) = k.gather.inspect_llvm().values()
    out["llvm_prefetch_calls"] = ir.count("call void @llvm.prefetch")
    try:
        k.flat_only(rows)
        out["two_d"] = "accepted"
    except Exception as e:
        out["two_d"] = type(e).__name__
print(json.dumps(out))
'''


def _run(tmp_path, mode: str) -> dict:
    return run_in_package(tmp_path, "jitpf", _KERNEL, _RUN, mode)


def test_compiled_prefetch_is_emitted_and_changes_nothing(tmp_path):
    compiled = _run(tmp_path, "numba")
    assert compiled["got"] == compiled["want"]
    # the module global became numba's intrinsic; both calls (a contiguous array and a
    # strided view) are in the loop's IR, hoisted or not
    assert compiled["prefetch_is"] != "LazyKernel" and compiled["llvm_prefetch_calls"] >= 2
    assert compiled["two_d"] == "TypingError"


def test_interpreted_prefetch_does_nothing_and_needs_no_numba(tmp_path):
    python = _run(tmp_path, "python")
    assert python["got"] == python["want"] and not python["numba"]
    assert python["prefetch_is"] == "LazyKernel" and python["python_call"] is None


_POLICY = '''
import json
import numpy as np
from sitsprof.policies.classic import lfu
block = np.random.default_rng(3).integers(0, 50, 2000).astype(np.int32)
hit = np.zeros(block.shape[0], dtype=np.uint8)
lfu.KERNEL(block, np.zeros(1, dtype=np.int64), np.int64(50), np.int64(10), hit)
(ir,) = lfu.replay_window.inspect_llvm().values()
print(json.dumps({"calls": ir.count("call void @llvm.prefetch"), "hits": int(hit.sum())}))
'''


def test_a_policy_kernel_prefetches_when_compiled(tmp_path):
    """LFU's loop, compiled from scratch, carries its three prefetches (node, links)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "NUMBA_CACHE_LOCATOR_CLASSES")}
    env.update(SITSPROF_NUMBA_CACHE_DIR=str(tmp_path / "cache"), SITSPROF_JIT="numba")
    out = subprocess.run([sys.executable, "-c", _POLICY], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["calls"] >= 3 and 0 < doc["hits"] < 2000
