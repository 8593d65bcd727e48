"""Benchmark a parallel sweep against the serial one in the same run (issue 14).

Run by hand (not in CI), from the repository root:

    .venv/bin/python bench/bench_sweep.py                     # 3 policies x 10 capacities, 5M references
    .venv/bin/python bench/bench_sweep.py --requests 1000000  # quicker

Workload: bench/bench_policies.py's seeded Zipf(alpha) trace (`tests/libcachesim_ref.zipf_ids`),
`--requests` references over `--objects` objects, built in memory (no file). The sweep is
`--policies` (lru, arc, s3fifo) x 10 capacities log-spaced from 0.1% to 50% of the distinct
blocks, through `sweep.run_policies` (what `policy simulate` runs: kernel, cost model,
metrics) or, with `--plain`, `sweep.simulate_many` (kernels only).

serial     jobs=1, this process
jobs N     jobs=N worker processes, for each start method in --methods (the default one,
           `parallel.start_method()`, first); everything counted: writing the trace once,
           starting the workers, the parent's warm-up, the runs (ratio: serial / this)
dask       the same sweep on a `distributed.LocalCluster(n_workers=N, processes=True,
           threads_per_worker=1)` on loopback; the cluster's start is timed apart, the sweep
           (scatter, runs, gather) is the figure

Results of every parallel form are asserted identical to the serial ones (every SimResult
field but its wall time, request_hits included). Every timing is the fastest of `--repeat`.
The load average at the start and end is printed: on a shared machine it bounds what two
cores can show. So is the CPU time: the serial sweep's, and the parallel one's in this
process and in its (reaped) workers; their ratio says how much work parallel adds, and
serial CPU / (own + workers / N) is the speed-up N idle cores would allow for the same work
(an estimate, assuming the runs balance over the workers, not a measured wall ratio).
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from libcachesim_ref import zipf_ids  # noqa: E402

TARGET = 1.7


def _plain(results):
    out = []
    for r in results:
        d = r.to_dict(request_hits=True)
        d.pop("seconds")
        out.append(d)
    return out


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _best(fn, repeat):
    """(fastest wall seconds, result, (this process's CPU s, reaped children's CPU s) of that run)."""
    best, value, cpu = float("inf"), None, (0.0, 0.0)
    for _ in range(repeat):
        start, own, children = time.perf_counter(), time.process_time(), _children_cpu()
        value = fn()
        wall = time.perf_counter() - start
        if wall < best:
            best, cpu = wall, (time.process_time() - own, _children_cpu() - children)
    return best, value, cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=5_000_000)
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--policies", default="lru,arc,s3fifo")
    ap.add_argument("--capacities", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--plain", action="store_true", help="kernels only (simulate_many), no cost model")
    ap.add_argument("--methods", default="fork,forkserver",
                    help="start methods to time besides the default (parallel.start_method())")
    ap.add_argument("--no-dask", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)

    from sitsprof.policies import parallel, sweep
    from sitsprof.policies.engine.replay import as_trace

    print(f"load average at start: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores, "
          f"{parallel.cpu_count()} usable")
    trace = as_trace(zipf_ids(args.requests, args.objects, args.alpha, args.seed))
    policies = args.policies.split(",")
    caps = sorted({max(1, int(c)) for c in np.geomspace(0.001 * trace.n_blocks, 0.5 * trace.n_blocks,
                                                          args.capacities)})
    runner = sweep.simulate_many if args.plain else sweep.run_policies
    print(f"trace: {len(trace):,} references, {trace.n_blocks:,} distinct; sweep: {len(policies)} policies x "
          f"{len(caps)} capacities = {len(policies) * len(caps)} runs through "
          f"{'simulate_many (kernels)' if args.plain else 'run_policies (kernels + cost model)'}")
    runner(trace, policies, caps[:1])  # compile or load every kernel here first: not part of any timing

    serial_s, serial, (serial_cpu, _) = _best(lambda: runner(trace, policies, caps, jobs=1), args.repeat)
    print(f"serial            {serial_s:6.2f} s   CPU {serial_cpu:.2f} s")
    auto = parallel.start_method()
    for method in [auto] + [m for m in args.methods.split(",") if m and m != auto]:
        parallel.start_method = lambda m=method: m  # what map_runs would pick; the default first
        jobs_s, spread, (own, children) = _best(lambda: runner(trace, policies, caps, jobs=args.jobs), args.repeat)
        assert _plain(spread) == _plain(serial), f"jobs results ({method}) differ from serial"
        ratio = serial_s / jobs_s
        default = " (default)" if method == auto else ""
        print(f"jobs {args.jobs} {method:<10} {jobs_s:6.2f} s   {ratio:.2f}x serial{default}"
              f"; target >= {TARGET}x on 2 cores: {'met' if ratio >= TARGET else 'NOT met'}; results identical")
        if method != "fork":  # a forkserver's workers are its children, not ours: no CPU figure
            print(f"     CPU: this process {own:.2f} s (the workers, children of the forkserver, not counted)")
            continue
        bound = serial_cpu / (own + children / args.jobs)
        extra = (own + children) / serial_cpu
        print(f"     CPU: this process {own:.2f} s + workers {children:.2f} s ({extra:.2f}x the serial CPU); "
              f"on {args.jobs} idle cores at most {bound:.2f}x (serial CPU / (own + workers / {args.jobs}))")
    if not args.no_dask:
        try:
            import distributed
        except ImportError:
            print("dask        skipped: distributed not installed (pip install 'sitsprof[cluster]')")
        else:
            start = time.perf_counter()
            with distributed.LocalCluster(n_workers=args.jobs, processes=True, threads_per_worker=1,
                                          host="127.0.0.1", dashboard_address=None) as cluster:
                up_s = time.perf_counter() - start
                dask_s, remote, _ = _best(lambda: runner(trace, policies, caps, cluster=cluster.scheduler_address),
                                       args.repeat)
            assert _plain(remote) == _plain(serial), "dask results differ from serial"
            print(f"dask {args.jobs}      {dask_s:8.2f} s   {serial_s / dask_s:.2f}x serial; results identical "
                  f"(LocalCluster start {up_s:.2f} s, not counted)")
    print(f"load average at end: {os.getloadavg()[0]:.2f} (1 min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
