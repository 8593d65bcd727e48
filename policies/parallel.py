"""Sweeps in parallel: the runs of one sweep over this machine's cores or a Dask cluster.

`map_runs(task, trace, items, ...)` runs ``task(trace, state, item, shared)`` for every item
and returns the results in the items' order, whatever order they finish in, so a parallel
sweep returns exactly what the serial loop does (`policies.sweep` passes its own task and
items; this module knows no policy). ``state = setup(trace)`` is built once per worker and
reused by every run on it (the engine's `Prepared` arrays).

- ``jobs=1, cluster=None``: the plain loop in this process.
- ``jobs=N``: N worker processes (`concurrent.futures.ProcessPoolExecutor`). Start method
  (`start_method`): ``fork`` on Linux while this process runs only its main thread: a
  worker then starts in milliseconds with the engine imported, its kernels loaded and the
  trace shared copy-on-write. Otherwise (a progress-bar or Dask thread running, macOS)
  ``forkserver``, which imports the engine once (``PRELOAD``) and forks workers from that,
  or ``spawn``: never ``fork`` beside another thread, which could hold a lock the child
  inherits locked. There the trace is written once to a temporary folder, one ``.npy`` a
  column, and every worker maps it (``mmap_mode="c"``: shared pages, writeable views, so
  the kernels see the same array types as in the serial run and load the same compiled
  specialisations); a constant column travels as its one value. Nothing of the trace is
  sent per run.
- ``cluster=ADDRESS`` (``tcp://host:8786``) or a ``distributed.Client``: the same runs as
  Dask tasks, the trace scattered to every worker once (``broadcast=True``).

Compiles happen once: before any run starts, the parent replays each distinct item once
on the trace's first requests (a few thousand references), which compiles whatever the
numba cache (``cache=True`` files beside the modules) lacks and writes it there; workers
then load those files. Workers are started (and import the engine) while the parent warms
up. On a cluster whose workers do not share this machine's files, each worker compiles on
its first run; see docs/scale.md.

`auto_jobs(runs, references)` is the CLI's default for ``--jobs``: see its docstring.
"""
from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import fields

import numpy as np

from .errors import PolicyEngineError
from .traces.trace import Trace

__all__ = [
    "AUTO_MIN_REFERENCES",
    "PRELOAD",
    "START_METHODS",
    "TEMP_PREFIX",
    "WARM_REFERENCES",
    "ParallelError",
    "Progress",
    "auto_jobs",
    "check_jobs",
    "cpu_count",
    "head_trace",
    "map_runs",
    "pack_trace",
    "start_method",
    "unpack_trace",
]

# A worker process costs about 0.5-1 s to start on a busy 2-core machine (interpreter,
# numpy, numba, loading the cached kernels; docs/scale.md); the automatic --jobs only
# spreads a sweep whose replays add up to enough references to repay that.
AUTO_MIN_REFERENCES = 20_000_000
WARM_REFERENCES = 2_000

Progress = Callable[[int, int, str], None]


class ParallelError(PolicyEngineError):
    """A parallel sweep that cannot run as asked: bad --jobs, no Dask, no scheduler."""


def cpu_count() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def auto_jobs(runs: int, references: int) -> int:
    """Workers for a sweep of `runs` replays of a `references`-long trace when the user did
    not say: every core (at most one per run) once runs x references reaches
    AUTO_MIN_REFERENCES, else 1 (a short sweep is over before a worker has started)."""
    if runs <= 1 or runs * references < AUTO_MIN_REFERENCES:
        return 1
    return min(cpu_count(), runs)


def check_jobs(jobs) -> int | None:
    """`jobs` as a positive int, or None for automatic; anything else is a ParallelError."""
    if jobs is None:
        return None
    try:
        value = int(jobs)
    except (TypeError, ValueError):
        value = 0
    if value < 1 or value != jobs:
        raise ParallelError(f"--jobs must be a whole number of worker processes >= 1, got {jobs!r} "
                            "(leave it out to use every core on a large sweep)")
    return value


# ---------------------------------------------------------------- the trace, packed to travel

_ARRAYS = ("time", "request", "block", "original_id", "position", "tokens", "tenant", "request_output_tokens")


def pack_trace(trace: Trace, folder: str | None = None) -> dict:
    """The trace as a plain dict: each column an array (or, with `folder`, the path of a
    ``.npy`` written there) or ``("constant", value, dtype, length)`` for a zero-stride column;
    the other fields as they are. `unpack_trace` turns it back into an equal Trace."""
    packed: dict = {}
    for f in fields(Trace):
        value = getattr(trace, f.name)
        if f.name in _ARRAYS and value is not None:
            value = np.asarray(value)
            if len(value) and value.strides[0] == 0:
                value = ("constant", value[0].item(), value.dtype.str, len(value))
            elif folder is not None:
                path = os.path.join(folder, f"{f.name}.npy")
                np.save(path, np.ascontiguousarray(value))
                value = ("npy", path)
        packed[f.name] = value
    return packed


def unpack_trace(packed: dict) -> Trace:
    """The Trace `pack_trace` packed; ``.npy`` columns mapped copy-on-write, not read."""
    kwargs = {}
    for name, value in packed.items():
        if isinstance(value, tuple) and value and value[0] == "constant":
            _, one, dtype, length = value
            value = np.broadcast_to(np.array(one, dtype=np.dtype(dtype)), (length,))
        elif isinstance(value, tuple) and value and value[0] == "npy":
            value = np.load(value[1], mmap_mode="c")
            value = value.view(np.ndarray) if isinstance(value, np.memmap) else value
        kwargs[name] = value
    return Trace(**kwargs)


def head_trace(trace: Trace, references: int = WARM_REFERENCES) -> Trace:
    """The trace's first whole requests, about `references` references (at least one
    request): a valid Trace of the same column types, to compile kernels on."""
    n = len(trace)
    if n <= references:
        return trace
    last_request = int(trace.request[references - 1])
    end = int(np.searchsorted(np.asarray(trace.request), last_request, side="right"))
    kwargs = {}
    for f in fields(Trace):
        value = getattr(trace, f.name)
        if f.name in _ARRAYS and f.name != "request_output_tokens" and value is not None:
            value = value[:end]
        elif f.name == "request_output_tokens" and value is not None:
            value = value[:last_request + 1]
        elif f.name == "request_texts" and value is not None:
            value = tuple(value[:last_request + 1])
        elif f.name == "n_blocks":
            value = -1  # recounted: blocks are numbered in order of first appearance
        kwargs[f.name] = value
    return Trace(**kwargs)


# ---------------------------------------------------------------- worker processes

_WORKER: dict = {}


def _worker_init(packed, setup) -> None:
    """A worker dies with the sweep (its parent, even SIGKILLed: PR_SET_PDEATHSIG) and leaves
    Ctrl-C and SIGTERM to it: the parent stops every worker on either."""
    import signal

    from sitsprof.common.procs import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if not die_with_parent(signal.SIGKILL) and sys.platform.startswith("linux"):
        os._exit(1)  # the parent is already gone: no one is waiting for this worker
    trace = packed if isinstance(packed, Trace) else unpack_trace(packed)
    _WORKER.update(trace=trace, state=setup(trace) if setup is not None else None)


def _worker_ready() -> int:
    return os.getpid()


def _worker_run(task, item, shared):
    return _compact(task(_WORKER["trace"], _WORKER["state"], item, shared))


def _compact(result):
    """A result to send back, small. Per-request hit counts that are all 0 or 1 (always so in a
    trace of one reference per request, whose unbuilt ``request_hits`` are the replay's hit
    flags) go bit-packed, 8 to a byte, and arrive unbuilt (widened to int32 when first read);
    other counts go in the smallest unsigned type that holds them. `_expand` restores either."""
    from .engine.replay import hit_flags_of

    flags = hit_flags_of(result)
    if flags is None:
        hits = getattr(result, "request_hits", None)
        if not isinstance(hits, np.ndarray) or hits.dtype.kind not in "iu" or not len(hits) or int(hits.min()) < 0:
            return result
        top = int(hits.max())
        if top <= 1 and hits.dtype == np.int32:
            flags = hits
        else:
            small = np.min_scalar_type(top)
            if small.itemsize >= hits.itemsize:
                return result
            dtype = hits.dtype.str
            result.request_hits = hits.astype(small)
            return ("compact", result, dtype)
    result.request_hits = np.empty(0, dtype=np.int32)  # the flags travel packed beside it
    return ("bits", result, np.packbits(flags != 0), len(flags))


def _expand(sent):
    if isinstance(sent, tuple) and len(sent) == 4 and sent[0] == "bits":
        from .engine.replay import set_hit_flags

        _, result, bits, n = sent
        set_hit_flags(result, np.unpackbits(bits, count=n))
        return result
    if isinstance(sent, tuple) and len(sent) == 3 and sent[0] == "compact":
        _, result, dtype = sent
        result.request_hits = result.request_hits.astype(np.dtype(dtype))
        return result
    return sent


START_METHODS = ("fork", "forkserver", "spawn")
PRELOAD = ["sitsprof.policies.sweep"]  # what a forkserver imports once, for every worker it forks


def start_method() -> str:
    """``fork`` on Linux while this process runs no thread but its main one (nothing then holds
    a lock a child could inherit; no kernel here is ``parallel=True``, so numba starts no
    threads), else ``forkserver`` (``spawn`` where there is none)."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    if sys.platform.startswith("linux") and "fork" in methods and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def _context(method: str):
    import multiprocessing

    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(PRELOAD)  # takes effect when this process's forkserver starts
    return context


def _warm(task, setup, trace: Trace, warm_items: Sequence, shared) -> None:
    """Replay each warm item on the trace's head here, so compiles happen once, in this process."""
    if not warm_items:
        return
    head = head_trace(trace)
    state = setup(head) if setup is not None else None
    for item in warm_items:
        try:
            task(head, state, item, shared)
        except Exception:  # best effort: the real run reports any error with its own trace
            pass


def _pool_map(task, setup, trace, items, shared, jobs, progress, labels, warm_items, method):
    # imported here: a serial sweep (and every other command) does not pay for them
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    method = method or start_method()
    if method not in START_METHODS:
        raise ParallelError(f"start method must be one of {', '.join(START_METHODS)}, got {method!r}")
    from sitsprof.common.procs import private_tempdir
    from sitsprof.common.signals import terminate_raises

    # SIGTERM/SIGHUP raise here (they used to kill this process outright, orphaning the workers
    # and the folder); the folder is named by pid, so one a SIGKILL left is reclaimed next time
    folder = private_tempdir(TEMP_PREFIX)
    try:
        with terminate_raises():
            context = _context(method)
            # a forked worker inherits the trace (copy-on-write); others map it from the folder
            packed = trace if method == "fork" else pack_trace(trace, folder)
            if method == "fork":  # compile before forking: every worker inherits the compiled code
                _warm(task, setup, trace, warm_items, shared)
            pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_init,
                                       initargs=(packed, setup))
            finished = False
            try:
                ready = [pool.submit(_worker_ready) for _ in range(jobs)]  # start the workers now...
                if method != "fork":  # ...while this process compiles (and caches) or loads the kernels
                    _warm(task, setup, trace, warm_items, shared)
                for f in ready:
                    f.result()
                futures = {pool.submit(_worker_run, task, item, shared): i for i, item in enumerate(items)}
                results = _collect(as_completed(futures), futures, progress, labels)
                finished = True
                return results
            finally:
                if finished:
                    pool.shutdown(wait=True)
                else:
                    _stop_pool(pool)
    except BrokenProcessPool:
        raise ParallelError(
            "a sweep worker process died (killed, out of memory, or a script that starts a parallel sweep "
            "when imported: put it under `if __name__ == \"__main__\":`, or use --jobs 1)") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


TEMP_PREFIX = "sitsprof-sweep-"


def _stop_pool(pool) -> None:
    """Stop a pool at once, running tasks included (shutdown alone waits for them): on an error,
    Ctrl-C or SIGTERM, the workers go with the sweep."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        try:
            process.kill()
        except (OSError, ValueError):  # already gone, or already closed
            pass
    for process in processes:
        try:
            process.join(5)
        except (OSError, ValueError, AssertionError):
            pass


def _collect(completed, futures: dict, progress, labels) -> list:
    """Results of `futures` ({future: item index}) in item order, `progress` as each completes."""
    results: list = [None] * len(futures)
    for done, future in enumerate(completed, start=1):
        i = futures[future]
        results[i] = _expand(future.result())
        if progress is not None:
            progress(done, len(futures), labels[i] if labels is not None else str(i))
    return results


# ---------------------------------------------------------------- Dask distributed

_LOCAL = threading.local()  # a Dask worker may run several threads: one Prepared state each


def _dask_run(task, setup, packed, item, shared):
    # `packed` is the one scattered copy on this worker: unpack and set up once per thread.
    cache = getattr(_LOCAL, "entry", None)
    if cache is None or cache[0] is not packed:
        trace = unpack_trace(packed)
        cache = (packed, trace, setup(trace) if setup is not None else None)
        _LOCAL.entry = cache
    return _compact(task(cache[1], cache[2], item, shared))


def _client(cluster):
    try:
        import distributed
    except ImportError:
        raise ParallelError("--cluster needs Dask distributed, which is not installed: "
                            "pip install 'sitsprof[cluster]' (or run without --cluster)") from None
    if isinstance(cluster, distributed.Client):
        return cluster, False
    address = getattr(cluster, "scheduler_address", cluster)  # a LocalCluster / SpecCluster too
    try:
        return distributed.Client(address, timeout="10s", set_as_default=False), True
    except (OSError, TimeoutError, ValueError) as exc:
        raise ParallelError(f"cannot reach the Dask scheduler at {address!r}: {exc} "
                            "(start one with `dask scheduler` and workers with `dask worker ADDRESS`, "
                            "or give its tcp://host:port)") from None


def _dask_map(task, setup, trace, items, shared, cluster, progress, labels, warm_items):
    client, own = _client(cluster)  # first: it says so when distributed is missing
    from distributed import as_completed as dask_completed

    try:
        _warm(task, setup, trace, warm_items, shared)
        [packed] = client.scatter([pack_trace(trace)], broadcast=True, hash=False)
        futures = {client.submit(_dask_run, task, setup, packed, item, shared, pure=False): i
                   for i, item in enumerate(items)}
        return _collect(dask_completed(list(futures), loop=client.loop), futures, progress, labels)
    finally:
        if own:
            client.close()


# ---------------------------------------------------------------- the one entry point

def map_runs(task, trace: Trace, items: Sequence, shared=None, *, setup=None, jobs: int = 1, cluster=None,
             progress: Progress | None = None, labels: Sequence[str] | None = None,
             warm_items: Sequence = (), method: str | None = None) -> list:
    """``[task(trace, setup(trace), item, shared) for item in items]``, on `jobs` processes or a
    Dask `cluster`; `task` and `setup` must be module-level functions (they travel by name),
    items, shared and results picklable. `progress(done, total, labels[i])` after each run, in
    this process, in the order runs finish. `warm_items`: items to replay on the trace's head
    in this process first, so every kernel is compiled (and cached) before workers start.
    `method`: the processes' start method (default `start_method()`)."""
    items = list(items)
    if cluster is None and (jobs == 1 or len(items) <= 1):
        state = setup(trace) if setup is not None else None
        results = []
        for i, item in enumerate(items):
            results.append(task(trace, state, item, shared))
            if progress is not None:
                progress(i + 1, len(items), labels[i] if labels is not None else str(i))
        return results
    if cluster is not None:
        return _dask_map(task, setup, trace, items, shared, cluster, progress, labels, warm_items)
    return _pool_map(task, setup, trace, items, shared, min(jobs, len(items)), progress, labels, warm_items,
                     method)
