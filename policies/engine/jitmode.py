"""When a command runs its kernels interpreted rather than compiled (``SITSPROF_JIT=auto``, issue 14).

A compiled run pays a fixed start-up before its first kernel returns: importing numba and
building its CPU target, then loading each cached kernel (~0.6-0.7 s CPU here, bench/README.md
``bench_startup.py``); an interpreted run pays per reference instead (the kernels' own Python
source, `sitsprof.common.jit`). `policy simulate` decides twice, each time before any kernel runs:

1. `before_reading(path)`: from the trace file's size, before reading it (reading factorizes
   the ids, a kernel): interpreted when the file is at most `SMALL_FILE_BYTES` (a compressed
   one counts `COMPRESSED_RATIO` times its size); a stream, a bundled trace or a larger file
   compiles.
2. `before_replay(references, policies, capacities)`: from the work, once the trace is read:
   the estimated interpreted seconds, references x the sum over the runs of each policy's
   interpreted cost per reference (`US_PER_REFERENCE`, measured), plus the Belady headroom
   line and the cost model, against `BUDGET_S`. The capacity needs no term of its own: every
   loop a kernel runs is over references, requests or blocks resident (at most the distinct
   blocks, at most the references); capacity-sized arrays are numpy allocations either way.

Interpreted to compiled is one way: a small file whose work turns out large compiles for the
replay. Above the rule a run is exactly the compiled run it was before.
"""
from __future__ import annotations

import os
import sys

from sitsprof.common import jit

__all__ = [
    "BUDGET_S",
    "COMPRESSED_RATIO",
    "DEFAULT_US",
    "HEADROOM_US",
    "READ_US",
    "SMALL_FILE_BYTES",
    "US_PER_REFERENCE",
    "before_reading",
    "before_replay",
    "estimate_s",
    "most_references",
    "quiet_blas",
    "small_file",
]

#: Interpreted cost per reference of one costed run (the kernel, its cost model pricing, the
#: result's metrics), microseconds, the larger of capacity 10 and 1,000 on a 5,000-reference
#: trace (``bench_startup.py --break-even``), the larger of two loaded runs, rounded up.
US_PER_REFERENCE = {
    "lru": 8, "fifo": 4, "lfu": 11, "sieve": 6, "lirs": 8, "arc": 17, "s3fifo": 8, "2q": 17,
    "prefix_lru": 9, "sits": 50, "semantic-shard": 20, "belady": 14,
}
#: A policy the table does not list (a new one) is priced as the dearest listed.
DEFAULT_US = max(US_PER_REFERENCE.values())
#: The Belady headroom line under a table, per capacity, and reading the trace (factorizing).
HEADROOM_US, READ_US = 14, 4
#: Interpret when the estimate is at most this. Measured (bench/README.md, `bench_startup.py
#: --break-even`, CLI CPU seconds, two runs on the loaded VM): the two cost the same where the
#: estimate is ~0.65-1.0 s (LRU alone at 30,000-50,000 references; all 12 policies at one
#: capacity at 3,000-10,000); at or under 0.5 s interpreting was the cheaper every time
#: (0.32-0.58x the compiled CPU), above ~1 s compiling wins by more and more (100,000 refs,
#: -p all: interpreted 8.8x).
BUDGET_S = 0.5
#: Trace files read interpreted: at most this many bytes (a Mooncake JSONL line holds ~22
#: bytes per reference, an oracleGeneral record 24, so ~12,000 references).
SMALL_FILE_BYTES = 256 * 1024
COMPRESSED_RATIO = 20
_COMPRESSED = (".xz", ".zst", ".zstd", ".gz", ".bz2", ".lzma")


def small_file(path) -> bool:
    """Whether the trace at `path` is small enough to read interpreted (a plain local file only)."""
    try:
        size = os.stat(path).st_size
    except (OSError, TypeError, ValueError):
        return False  # "-", bundled:NAME, a URL-like name: not a file we can size
    if str(path).lower().endswith(_COMPRESSED):
        size *= COMPRESSED_RATIO
    return size <= SMALL_FILE_BYTES


def estimate_s(references: int, policies, capacities, headroom: bool = False) -> float:
    """Estimated interpreted seconds of a sweep of `policies` x `capacities` over `references`."""
    per_ref = sum(US_PER_REFERENCE.get(str(p), DEFAULT_US) for p in policies) * max(1, len(capacities))
    if headroom:
        per_ref += HEADROOM_US * max(1, len(capacities))
    return references * per_ref * 1e-6


#: Thread-count settings of the BLAS numpy loads; any one set is left as it is.
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def quiet_blas() -> bool:
    """Before numpy is first imported, with no thread count set: one BLAS thread. numpy's
    OpenBLAS starts a thread per core on import, ~0.05-0.13 s of CPU (not wall) measured on
    the 2-core VM (bench/README.md); an interpreted sweep does no BLAS work to share out.
    Whether it was set."""
    if "numpy" in sys.modules or any(os.environ.get(name) for name in _BLAS_THREADS):
        return False
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    return True


def most_references(path) -> int:
    """The most references the file at `path` can hold: 2 bytes each (`1,` in a JSONL id
    list or a CSV column; an oracleGeneral record is 24), 20x that when compressed."""
    size = os.stat(path).st_size
    if str(path).lower().endswith(_COMPRESSED):
        size *= COMPRESSED_RATIO
    return size // 2


def before_reading(path, policies=None, capacities=None, headroom: bool = False) -> str:
    """Decide from the file's size (see the module docstring); the mode now in force. When
    even `most_references` would be small work for `policies` x `capacities`, the run is sure
    to stay interpreted: then, before numpy loads, one BLAS thread (`quiet_blas`)."""
    mode = jit.decide(small_file(path))
    sure = (mode == "python" and policies is not None and capacities is not None
            and estimate_s(most_references(path), policies, capacities, headroom) <= BUDGET_S)
    if sure:
        quiet_blas()
    return mode


def before_replay(references: int, policies, capacities, headroom: bool = False) -> str:
    """Decide from the work (see the module docstring); the mode now in force."""
    return jit.decide(estimate_s(references, policies, capacities, headroom) <= BUDGET_S)
