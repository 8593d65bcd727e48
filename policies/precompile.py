"""Compile every policy's kernels up front, on every core: `sitsprof compile`, `make compile`.

A kernel compiles on its first call with the argument types of that call, so the surest way
to compile what the commands will load is to run them: `precompile` writes a small Mooncake
trace, reads it the way `policy simulate` does (the same column dtypes, the same trace
kernels) and replays each policy once through the costed sweep (`run_policies`: the kernel,
the cost model, the metrics) and the Belady headroom line. numba writes each compile to its
cache (`sitsprof.common.numba_cache`), which every later run loads.

The shared kernels (trace reading, the cost model, Belady) compile first, here; then the
policies compile in `jobs` worker processes at once (default: every core on 3 cores or more,
one process on fewer, as measured), so a cold cache costs about the slowest policy's compile
rather than the sum of them all where there are cores to spare. Two workers that
compile the same helper both write it, one after the other; numba replaces its cache files
whole, so the worst case is a helper compiled twice. Results are untouched: a compiled
kernel is the same kernel whichever process compiled it.
"""
from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from .parallel import _context, cpu_count, start_method
from .registry import policy_names, select_policies

__all__ = [
    "MIN_CORES_FOR_WORKERS",
    "SERVING",
    "SHARED",
    "WARM_CAPACITY",
    "WARM_SECONDS",
    "Note",
    "default_jobs",
    "precompile",
]

# A trace just long enough to reach every branch the kernels type (evictions, ghosts, windows).
WARM_SECONDS = 30.0
WARM_CAPACITY = 50
#: Compiled first, in the parent, whatever is selected: shared by every policy's run.
SHARED = ("lru", "belady")

Note = Callable[[str], None]
#: Fewer cores than this: compile in one process. Measured on the 2-core development VM
#: (bench/README.md, bench_startup.py): two workers took 62 s wall and 48 s CPU against one
#: process's 40 s and 36 s (policies compiled side by side compile their shared helpers twice,
#: and two hyperthreads do not make two cores).
MIN_CORES_FOR_WORKERS = 3


def default_jobs() -> int:
    """Worker processes when not told: every core from MIN_CORES_FOR_WORKERS cores up, else 1."""
    cores = cpu_count()
    return cores if cores >= MIN_CORES_FOR_WORKERS else 1


def _warm_trace(folder: str):
    from .traces.detect import read_trace
    from .traces.generator import generate_requests, write_mooncake_jsonl

    path = Path(folder) / "warm.jsonl"
    write_mooncake_jsonl(generate_requests(seed=0, duration_s=WARM_SECONDS), path)
    return read_trace(str(path))


#: The serving replay's kernels (`policy replay`), compiled as one more entry beside the policies.
SERVING = "serving replay"


def _warm_serving(trace) -> None:
    """Replay the warm trace as `policy replay` does: every serving policy on vLLM's rules (one
    scheduler kernel; sits's controller), sits's --threshold path, SGLang's radix tree, and
    two instances behind the prefix router (issue 21: a first replay after `sitsprof compile`
    compiled a minute in silence)."""
    from .serving.names import SERVING_POLICIES
    from .serving.routing import RouterSettings, routed_document
    from .serving.summary import replay_document

    cap = f"{WARM_CAPACITY * 4}"  # s3fifo needs 20 blocks or more; the 16-token pool is larger
    replay_document(trace, "warm", "mooncake", policies=",".join(SERVING_POLICIES), capacities=cap)
    replay_document(trace, "warm", "mooncake", policies="sits", capacities=cap, threshold=True)
    replay_document(trace, "warm", "mooncake", engine="sglang", policies="lru", capacities=cap)
    routed_document(trace, "warm", "mooncake", instances=2, routing="prefix", router=RouterSettings().checked(),
                    policies="lru", capacities=cap)


def _compile_one(trace_folder: str, policy: str) -> tuple[str, float, int]:
    """Replay `policy` as `policy simulate` does (costed, with the headroom line), or, for
    SERVING, as `policy replay` does: (policy, seconds, compiles)."""
    from .engine.compiling import watch_compiles
    from .sweep import run_policies, simulate

    trace = _warm_trace(trace_folder)
    started = time.perf_counter()
    with watch_compiles() as stats:
        if policy == SERVING:
            _warm_serving(trace)
        else:
            run_policies(trace, [policy], [WARM_CAPACITY])
        if policy == "sits":  # `policy simulate -p sits --threshold`: the threshold engine's path
            from .sweep import bind_params

            run_policies(trace, [policy], [WARM_CAPACITY], params=bind_params([policy], {"threshold": True}))
        if policy == "belady":
            simulate(trace, "belady", WARM_CAPACITY)
    return policy, time.perf_counter() - started, stats["count"]


def _compile_percentiles() -> int:
    """The cost model's percentile select (`costmodel._order_statistics`) runs from
    `_PARTITION_BELOW` requests up, more than the warm trace has: compile it on its own. Returns
    the compiles (bench_startup.py found a first run after `sitsprof compile` compiling it)."""
    import numpy as np

    from .cost.costmodel import _PARTITION_BELOW, percentiles
    from .engine.compiling import watch_compiles

    with watch_compiles() as stats:
        percentiles(np.linspace(0.0, 1.0, _PARTITION_BELOW))
    return stats["count"]


def _done_line(name: str, done: int, total: int, count: int, seconds: float) -> str:
    """One line per part compiled: `arc (7 of 13): ...`, the serving replay counted as a part."""
    return f"{name} ({done} of {total}): {count} kernel(s) compiled in {seconds:.1f} s"


def precompile(policies: str | list[str] = "all", jobs: int | None = None, note: Note | None = None) -> dict:
    """Compile (or load, when cached) the kernels `policies` use ("all" or "lru,arc" or a list);
    `jobs` worker processes (None: `default_jobs()`, at most one per policy). `note(text)` hears one
    line per policy as it finishes. Returns {"policies", "seconds", "compiles", "jobs"}."""
    names = select_policies(policies) if isinstance(policies, str) else select_policies(",".join(policies))
    names = names or policy_names()
    say = note or (lambda _text: None)
    started = time.perf_counter()
    total = len(names) + 1  # and the serving replay's kernels (SERVING)
    jobs = max(1, min(jobs or default_jobs(), total))
    compiles = 0
    with tempfile.TemporaryDirectory(prefix="sitsprof-compile-") as folder:
        shared = [n for n in SHARED if n in names] or [names[0]]
        rest = [n for n in names if n not in shared] + [SERVING]
        done = 0
        for name in shared:  # the trace kernels, the cost model, Belady: once, here
            _, seconds, count = _compile_one(folder, name)
            done += 1
            compiles += count
            say(_done_line(name, done, total, count, seconds))
        compiles += _compile_percentiles()
        if rest and jobs > 1:
            with ProcessPoolExecutor(max_workers=min(jobs, len(rest)), mp_context=_context(start_method())) as pool:
                futures = [pool.submit(_compile_one, folder, name) for name in rest]
                for future in as_completed(futures):
                    name, seconds, count = future.result()
                    done += 1
                    compiles += count
                    say(_done_line(name, done, total, count, seconds))
        else:
            for name in rest:
                _, seconds, count = _compile_one(folder, name)
                done += 1
                compiles += count
                say(_done_line(name, done, total, count, seconds))
    return {"policies": names, "seconds": time.perf_counter() - started, "compiles": compiles, "jobs": jobs,
            "cache": os.environ.get("NUMBA_CACHE_DIR", "")}
