"""Benchmark the policy kernels against libCacheSim's `process_trace` in the same run.

Run by hand (not in CI), from the repository root:

    .venv/bin/python bench/bench_policies.py                      # full size: 5M requests
    .venv/bin/python bench/bench_policies.py --requests 500000    # quick

Workload: a seeded Zipf(alpha) trace over `--objects` objects (object of rank r drawn with
weight r^-alpha, ranks shuffled onto ids), written as a libCacheSim oracleGeneral file, every
object of size 1, cache capacity `--capacity` objects. For each registered policy that
libCacheSim also has:

sim x      libCacheSim `process_trace` seconds / our kernel seconds on the loaded trace
e2e x      libCacheSim `process_trace` seconds / our file -> hit ratio seconds
           (`read_trace` + `simulate`, JIT already warm); `process_trace` reads the file too
cpu x      the same ratio in CPU seconds (time.process_time) of this process, steadier than
           wall time on a shared, loaded machine
curve x    100 libCacheSim LRU runs / our one-pass 100-point LRU curve (file already loaded);
           libCacheSim's time is measured on `--lcs-curve-runs` of the 100 capacities and
           extrapolated to 100 (the table says how many were timed)
peak MB    peak resident memory of a separate process that does our whole job (read, every
           policy, the curve), interpreter, numpy and numba included (and whatever else our
           code imports on the way: the oracle path needs no pandas), and the peak
           resident size of each phase (Linux VmHWM, reset per phase): imports and JIT
           loading, reading, then each replay (column +MB: its peak over the loaded trace)

libCacheSim gets `hashpower=20` (a table sized for 1M objects; its default of 24 allocates
128 MiB it does not need, which would only slow it down). Hit ratios of both sides are
printed; they must agree (the differential tests check them). Every timing is the fastest of
`--repeat` runs (default 3), ours and libCacheSim's alike, to damp noise from other load.

Freed memory stays in the process (glibc `mallopt`: no mmap'd chunks, no trimming; both sides,
`--return-freed-memory` to turn it off). The development VM is a Firecracker guest with
virtio-balloon free page reporting (`page_reporting.page_reporting_order=11` on its kernel
command line): memory a process frees goes back to the host in 8 MiB blocks, and touching it
again costs a host fault, measured at 3.6 ms per MiB (2 GiB of numpy ones: 7.5 s of CPU).
Every e2e run reads a fresh 114 MB trace, so without this its time is mostly the hypervisor's
(`read_trace` 0.3-0.45 s after a libCacheSim run, 0.08-0.11 s with it). It does not exist on
bare metal, and the peak-memory child process does not use it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from libcachesim_ref import LCS_CLASSES, write_oracle, zipf_ids  # noqa: E402

TARGETS = {"sim": 10.0, "e2e": 5.0, "curve": 50.0, "peak_mb": 400.0}


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def warm_jit(policies: list[str]) -> None:
    """Compile (or load from numba's cache) every kernel and helper we are about to time."""
    from sitsprof.policies.engine.mrc import lru_hit_ratio_curve
    from sitsprof.policies.sweep import simulate

    tiny = np.array([1, 2, 3, 1, 2, 4, 5, 1], dtype=np.int64)
    for name in policies:
        simulate(tiny, name, 2)
    lru_hit_ratio_curve(tiny, [1, 2, 3])


def lcs_run(oracle: Path, policy: str, capacity: int) -> tuple[float, float, float]:
    """(hit ratio, seconds, CPU seconds) of one libCacheSim `process_trace`; setup not timed."""
    import libcachesim as lcs

    reader = lcs.TraceReader(str(oracle), lcs.TraceType.ORACLE_GENERAL_TRACE)
    cache = getattr(lcs, LCS_CLASSES[policy])(capacity, hashpower=20)
    start, cpu = time.perf_counter(), time.process_time()
    miss_ratio, _ = cache.process_trace(reader)
    return 1.0 - miss_ratio, time.perf_counter() - start, time.process_time() - cpu


class _PeakRss:
    """Peak resident size of this process over a `with` block: Linux's high-water mark
    (VmHWM), reset on entry by writing 5 to /proc/self/clear_refs. Unlike a sampling
    thread it also sees peaks inside compiled code that holds the GIL."""

    def __enter__(self):
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return self

    def __exit__(self, *exc):
        with open("/proc/self/status") as fh:
            kb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
        self.peak = kb / 1024.0


def measure_memory(oracle: Path, policies: list[str], capacity: int, points: int) -> dict:
    """Runs in a child process: our whole job, with the peak resident size of each phase.

    (Not getrusage's ru_maxrss: Linux carries it over execve, so a child forked from this
    bench would report the parent's size.)"""
    with _PeakRss() as warming:
        from sitsprof.policies.engine.mrc import curve_capacities, lru_hit_ratio_curve
        from sitsprof.policies.sweep import simulate
        from sitsprof.policies.traces.detect import read_trace

        warm_jit(policies)
    baseline = _rss_mb()
    with _PeakRss() as reading:
        trace = read_trace(oracle, format="oracle")
    loaded = _rss_mb()
    per_policy = {}
    for name in policies:
        with _PeakRss() as simulating:
            simulate(trace, name, capacity)
        per_policy[name] = simulating.peak
    with _PeakRss() as curving:
        lru_hit_ratio_curve(trace, curve_capacities(trace.n_blocks, points))
    per_policy["lru curve"] = curving.peak
    return {"warm_peak_mb": warming.peak, "baseline_mb": baseline, "read_peak_mb": reading.peak,
            "loaded_mb": loaded, "trace_mb": trace_nbytes(trace) / 2**20,
            "per_policy_mb": per_policy,
            "peak_mb": max(warming.peak, reading.peak, *per_policy.values())}


def trace_nbytes(trace) -> int:
    """Bytes the trace's arrays hold: a zero-stride column (one value repeated) holds one item."""
    return sum(v.itemsize if v.ndim == 1 and v.strides[0] == 0 else v.nbytes
               for v in vars(trace).values() if isinstance(v, np.ndarray))


def run(args) -> dict:
    from sitsprof.policies.engine.mrc import curve_capacities, lru_hit_ratio_curve
    from sitsprof.policies.registry import policy_names
    from sitsprof.policies.sweep import simulate
    from sitsprof.policies.traces.detect import read_trace

    policies = [p for p in (args.policies.split(",") if args.policies else policy_names())]
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="sitsprof-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    oracle = workdir / f"zipf{args.alpha}_{args.requests}_{args.objects}_s{args.seed}.oracleGeneral"
    t0 = time.perf_counter()
    if not oracle.exists():
        write_oracle(oracle, zipf_ids(args.requests, args.objects, args.alpha, args.seed))
    gen_s = time.perf_counter() - t0

    warm_jit(policies)
    trace = read_trace(oracle, format="oracle")  # untimed: loads the reader's kernels, warms the page cache
    reads, floor = [], []
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        trace = read_trace(oracle, format="oracle")
        reads.append((time.perf_counter() - t0, time.process_time() - c0))
        c0 = time.process_time()  # the floor: the file's bytes from the page cache, nothing else
        np.fromfile(oracle, dtype=np.uint8)
        floor.append(time.process_time() - c0)
    read_s, read_cpu = min(r[0] for r in reads), min(r[1] for r in reads)
    load = os.getloadavg()[0]

    rows = []
    for name in policies:
        sim_s, e2e_s, e2e_cpu, lcs_s, lcs_cpu = [], [], [], [], []
        for _ in range(args.repeat):
            ours = simulate(trace, name, args.capacity)
            sim_s.append(ours.seconds)
            t0, c0 = time.perf_counter(), time.process_time()
            e2e = simulate(read_trace(oracle, format="oracle"), name, args.capacity)
            e2e_s.append(time.perf_counter() - t0)
            e2e_cpu.append(time.process_time() - c0)
            del e2e
            if name in LCS_CLASSES and not args.skip_lcs:
                lcs_hit, seconds, cpu = lcs_run(oracle, name, args.capacity)
                lcs_s.append(seconds)
                lcs_cpu.append(cpu)
        row = {"policy": name, "hit": ours.block_hit_ratio, "sim_s": min(sim_s), "e2e_s": min(e2e_s),
               "e2e_cpu_s": min(e2e_cpu)}
        if lcs_s:
            row["lcs_hit"], row["lcs_s"], row["lcs_cpu_s"] = lcs_hit, min(lcs_s), min(lcs_cpu)
        rows.append(row)
        print(f"  {name}: done", file=sys.stderr, flush=True)

    caps = curve_capacities(trace.n_blocks, args.points)
    curve_times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        curve = lru_hit_ratio_curve(trace, caps)
        curve_times.append(time.perf_counter() - t0)
    curve_s = min(curve_times)
    curve_row = {"points": len(caps), "ours_s": curve_s}
    if not args.skip_lcs:
        picks = np.unique(np.linspace(0, len(caps) - 1, args.lcs_curve_runs).round().astype(int))
        lcs_times, worst = [], 0.0
        for k in picks:
            ratio, seconds, _ = lcs_run(oracle, "lru", int(caps[k]))
            lcs_times.append(seconds)
            worst = max(worst, abs(ratio - curve[k]))
        curve_row.update(lcs_timed=len(picks), lcs_mean_s=float(np.mean(lcs_times)),
                         lcs_100_s=float(np.mean(lcs_times)) * len(caps), max_abs_diff=worst)

    child = subprocess.run(
        [sys.executable, __file__, "--_memory", str(oracle), "--policies", ",".join(policies),
         "--capacity", str(args.capacity), "--points", str(args.points)],
        capture_output=True, text=True,
    )
    if child.returncode != 0:
        raise SystemExit(f"memory measurement failed (status {child.returncode}):\n{child.stderr[-3000:]}")
    memory = json.loads(child.stdout)
    if not args.workdir:
        oracle.unlink()
    return {"requests": len(trace), "objects": int(trace.n_blocks), "capacity": args.capacity,
            "alpha": args.alpha, "seed": args.seed, "generate_s": gen_s, "read_s": read_s,
            "read_cpu_s": read_cpu, "fromfile_cpu_s": min(floor), "load_start": load,
            "load_end": os.getloadavg()[0],
            "rows": rows, "curve": curve_row, "memory": memory, "cpus": os.cpu_count(),
            "repeat": args.repeat}


def _flag(value: float, target: float, higher_is_better: bool = True) -> str:
    ok = value >= target if higher_is_better else value <= target
    return "ok" if ok else "MISS"


def print_table(res: dict) -> None:
    print(f"Zipf({res['alpha']}) seed {res['seed']}: {res['requests']:,} requests over "
          f"{res['objects']:,} objects, capacity {res['capacity']:,}; {res['cpus']} CPUs; "
          f"read_trace {res['read_s']:.3f} s (CPU {res['read_cpu_s']:.3f} s; np.fromfile of the file: CPU "
          f"{res['fromfile_cpu_s']:.3f} s); best of {res['repeat']} runs; load average {res['load_start']:.1f} "
          f"at start, {res['load_end']:.1f} at end; freed memory "
          f"{'kept' if res.get('freed_memory_kept') else 'returned to the system'}")
    m = res["memory"]
    extra = {k: v - m["loaded_mb"] for k, v in m["per_policy_mb"].items()}
    head = (f"{'policy':<15}{'hit ours':>9}{'hit lcs':>9}{'lcs s':>8}{'sim s':>8}{'sim x':>8}"
            f"{'':>5}{'e2e s':>8}{'e2e x':>8}{'':>5}{'cpu x':>7}{'':>5}{'+MB':>6}")
    print(head)
    print("-" * len(head))
    for r in res["rows"]:
        if "lcs_s" in r:
            sim_x, e2e_x = r["lcs_s"] / r["sim_s"], r["lcs_s"] / r["e2e_s"]
            cpu_x = r["lcs_cpu_s"] / r["e2e_cpu_s"]
            print(f"{r['policy']:<15}{r['hit']:>9.4f}{r['lcs_hit']:>9.4f}{r['lcs_s']:>8.2f}"
                  f"{r['sim_s']:>8.3f}{sim_x:>7.1f}x {_flag(sim_x, TARGETS['sim']):>4}"
                  f"{r['e2e_s']:>8.2f}{e2e_x:>7.1f}x {_flag(e2e_x, TARGETS['e2e']):>4}"
                  f"{cpu_x:>6.1f}x {_flag(cpu_x, TARGETS['e2e']):>4}{extra[r['policy']]:>6.0f}")
        else:
            print(f"{r['policy']:<15}{r['hit']:>9.4f}{'-':>9}{'-':>8}{r['sim_s']:>8.3f}{'-':>8}"
                  f"{'':>5}{r['e2e_s']:>8.2f}{'-':>8}{'':>5}{'-':>7}{'':>5}{extra[r['policy']]:>6.0f}")
    c = res["curve"]
    line = f"LRU curve, {c['points']} points: ours {c['ours_s']:.2f} s"
    if "lcs_100_s" in c:
        x = c["lcs_100_s"] / c["ours_s"]
        line += (f"; libCacheSim {c['lcs_mean_s']:.2f} s/run x {c['points']} = {c['lcs_100_s']:.1f} s "
                 f"(timed {c['lcs_timed']} runs) -> {x:.0f}x {_flag(x, TARGETS['curve'])}; "
                 f"max |ratio diff| {c['max_abs_diff']:.1e}")
    print(line)
    worst = max(extra, key=extra.get)
    print(f"peak memory (ours, whole job in a fresh process): {m['peak_mb']:.0f} MB "
          f"{_flag(m['peak_mb'], TARGETS['peak_mb'], higher_is_better=False)}; by phase: "
          f"imports + warm JIT {m['baseline_mb']:.0f} MB (peak {m['warm_peak_mb']:.0f}), "
          f"read_trace peak {m['read_peak_mb']:.0f} MB, trace loaded {m['loaded_mb']:.0f} MB "
          f"(its arrays {m['trace_mb']:.0f} MB), then each replay's peak over that in +MB "
          f"(the LRU curve +{extra['lru curve']:.0f}; most: {worst} +{extra[worst]:.0f})")
    print(f"targets: sim >= {TARGETS['sim']:.0f}x, e2e >= {TARGETS['e2e']:.0f}x, "
          f"curve >= {TARGETS['curve']:.0f}x, peak <= {TARGETS['peak_mb']:.0f} MB")


def keep_freed_memory() -> bool:
    """glibc's malloc keeps what is freed for reuse: every allocation from the heap (M_MMAP_MAX
    0) and the heap never trimmed (M_TRIM_THRESHOLD at its largest); mallopt(3). False where
    there is no glibc."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_max = -1, -4  # malloc.h
        return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 2**31 - 1))
    except (OSError, AttributeError):
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=5_000_000)
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--capacity", type=int, default=100_000)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--policies", default="", help="comma-separated; default every registered policy")
    ap.add_argument("--points", type=int, default=100, help="LRU curve points")
    ap.add_argument("--lcs-curve-runs", type=int, default=5,
                    help="libCacheSim LRU runs actually timed for the curve comparison")
    ap.add_argument("--repeat", type=int, default=3,
                    help="time everything this many times and keep the fastest (the machine is shared)")
    ap.add_argument("--workdir", help="keep the generated trace here (reused when present)")
    ap.add_argument("--skip-lcs", action="store_true", help="time only our side")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--_memory", help=argparse.SUPPRESS)
    ap.add_argument("--return-freed-memory", action="store_true",
                    help="let freed memory go back to the system (see the docstring: slow on a ballooned VM)")
    args = ap.parse_args(argv)
    if args._memory:
        print(json.dumps(measure_memory(Path(args._memory), args.policies.split(","),
                                        args.capacity, args.points)))
        return 0
    kept = not args.return_freed_memory and keep_freed_memory()
    res = run(args)
    res["freed_memory_kept"] = kept
    print_table(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
