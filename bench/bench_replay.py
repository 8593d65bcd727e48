"""The serving replay's speed (issue 11), as ratios within one run.

1. Mooncake conversation trace (12,031 requests) at 16-token KV blocks through vLLM's rules
   with LRU: replay seconds, warm (the JIT compiled by a first replay), wall and CPU (process
   time: the machine's cores are shared, so CPU seconds are what one core spends). Target:
   <= 5 s on one core.
2. Cost linear in requests: a generated workload of 1x, 4x and 16x the trace time (the same
   load, 4x and 16x the requests): seconds per request and each size's ratio to 1x.
3. What one implementation per policy would cost: each whole-trace kernel
   (policies/classic/<name>.py) against the same replay written as a loop over the serving
   evictor's incremental form (policies/serving/evictors/) on a seeded Zipf trace: the ratio
   is what `policy simulate` would pay if its kernels were loops over the incremental forms.
4. LIRS against LRU under a mostly pinned pool (Mooncake's first 2,000 requests, 50,000
   blocks): the ratio a victim walk over pinned blocks would blow up.

    .venv/bin/python bench/bench_replay.py                 # all three, ~2 min
    .venv/bin/python bench/bench_replay.py --quick         # smaller sizes
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from numba import njit

from sitsprof.policies.registry import get_policy
from sitsprof.policies.serving import evictors as ev
from sitsprof.policies.serving.reblock import reblock
from sitsprof.policies.serving.scheduler import run_replay
from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.generator import generate_workload
from sitsprof.policies.traces.opening import BUNDLED

MOONCAKE = Path("/work/shared/data/mooncake/conversation_trace.jsonl")



def timed(fn, repeat):
    best_wall = best_cpu = float("inf")
    out = None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        best_wall = min(best_wall, time.perf_counter() - w)
        best_cpu = min(best_cpu, time.process_time() - c)
    return out, best_wall, best_cpu


@njit(cache=True)
def incremental_kernel(pid, S, block, capacity, hit):
    """A whole-trace replay as a loop over the incremental form: what a kernel would become."""
    resident = np.zeros(S[2].shape[0], dtype=np.uint8)
    n = 0
    for i in range(block.shape[0]):
        x = block[i]
        if resident[x]:
            hit[i] = 1
            v = ev.ev_hit(pid, S, x)
            if v >= 0:
                resident[v] = 0
                n -= 1
            ev.ev_pin(pid, S, x)
            ev.ev_unpin(pid, S, x)
            continue
        hit[i] = 0
        ev.ev_miss(pid, S, x)
        if n >= capacity:
            v = ev.ev_victim(pid, S)
            resident[v] = 0
        else:
            n += 1
        ev.ev_admit(pid, S, x)
        ev.ev_unpin(pid, S, x)
        resident[x] = 1
    return n


def part1(repeat):
    path = next((p for p in (BUNDLED["mooncake"], MOONCAKE) if p.exists()), None)
    if path is None:
        print("1. skipped: no Mooncake trace (bundled or /work/shared/data)")
        return
    trace = read_trace(path)
    rb = reblock(trace, 16)
    cap = rb.n_ids // 10
    run_replay(trace, "lru", cap, reblocked=rb)  # warm
    r, wall, cpu = timed(lambda: run_replay(trace, "lru", cap, reblocked=rb), repeat)
    s = r.summary()
    print(f"1. Mooncake, {trace.n_requests:,} requests, {int(rb.offsets[-1]):,} KV blocks of 16 tokens, "
          f"pool {cap:,} blocks (10%), vllm + lru: {wall:.2f} s wall, {cpu:.2f} s CPU "
          f"(target <= 5 s: {'met' if cpu <= 5 else 'NOT met'}); {s['steps']:,} steps, {s['evictions']:,} evictions, "
          f"{s['preemptions']:,} preemptions")
    # what windows cost: the same run cut into 10 s windows of simulated time (no controller),
    # and -p sits with its controller between windows; alternated with the one-call run
    from sitsprof.policies.serving.adaptive import windowed

    run_replay(trace, "sits", cap, reblocked=rb)  # warm the SITS evictor's dispatch and the shadows
    cpus = {"one call": [], "10 s windows": [], "sits, 10 s windows": []}
    for _ in range(max(repeat, 2)):
        for name, fn in (("one call", lambda: run_replay(trace, "lru", cap, reblocked=rb)),
                         ("10 s windows", lambda: run_replay(trace, "lru", cap, reblocked=rb, driver=windowed(10.0))),
                         ("sits, 10 s windows", lambda: run_replay(trace, "sits", cap, reblocked=rb))):
            _, _, c = timed(fn, 1)
            cpus[name].append(c)
    base = min(cpus["one call"])
    print("   windows, alternated (best CPU s): " + ", ".join(
        f"{k} {min(v):.2f} (x{min(v) / base:.2f})" for k, v in cpus.items()))


def part2(repeat, base_s):
    print("2. generated workload, vllm + lru, pool 5% of its KV blocks")
    first = None
    for k in (1, 4, 16):
        trace = generate_workload(seed=7, duration_s=base_s * k)
        rb = reblock(trace, 16)
        cap = max(rb.n_ids // 20, int(np.diff(rb.offsets).max()))
        if k == 1:
            run_replay(trace, "lru", cap, reblocked=rb)
        r, wall, cpu = timed(lambda trace=trace, rb=rb, cap=cap: run_replay(trace, "lru", cap, reblocked=rb), repeat)
        per = cpu / trace.n_requests
        first = first or per
        print(f"   {k:>2}x: {trace.n_requests:>7,} requests, {int(rb.offsets[-1]):>11,} blocks: {wall:6.2f} s wall, "
              f"{cpu:6.2f} s CPU, {per * 1e6:7.1f} us CPU/request (x{per / first:.2f} of 1x), "
              f"{cpu / int(rb.offsets[-1]) * 1e9:6.0f} ns CPU/block")


def part3(repeat, n_refs, n_objects):
    rng = np.random.default_rng(11)
    w = 1.0 / np.arange(1, n_objects + 1)
    block = rng.permutation(n_objects)[rng.choice(n_objects, size=n_refs, p=w / w.sum())].astype(np.int32)
    offs = np.arange(n_refs + 1, dtype=np.int64)
    cap = n_objects // 10
    print(f"3. Zipf(1.0), {n_refs:,} references over {n_objects:,} objects, capacity {cap:,}: "
          "kernel vs a loop over the incremental form")
    for name, pid in ev.POLICY_IDS.items():
        if pid == ev.SITS:  # adaptive: its KERNEL switches; its SCAN behaviour is ARC's code, measured as arc
            continue
        kern = get_policy(name).KERNEL
        hk = np.zeros(n_refs, dtype=np.uint8)
        hi = np.zeros(n_refs, dtype=np.uint8)
        kern(block, offs, n_objects, cap, hk)
        incremental_kernel(pid, ev.new_state(pid, n_objects, cap), block, cap, hi)
        _, _, ck = timed(lambda kern=kern, hk=hk: kern(block, offs, n_objects, cap, hk), repeat)
        _, _, ci = timed(lambda pid=pid, hi=hi: incremental_kernel(pid, ev.new_state(pid, n_objects, cap), block, cap,
                                                                   hi), repeat)
        same = "equal hits" if np.array_equal(hk, hi) else f"{int((hk != hi).sum())} hits DIFFER"
        print(f"   {name:7s} kernel {ck:6.3f} s, incremental {ci:6.3f} s: x{ci / ck:.2f} ({same})")


def part4(repeat, n_requests=2000, capacity=50_000):
    """LIRS against LRU under a mostly pinned pool: Mooncake's first 2,000 requests at 16-token
    blocks in 50,000 blocks (hundreds of preemptions, the pool's peak pinned = its size), where
    a victim walk that re-passed pinned blocks kept LIRS from finishing in 900 s (LRU: 0.8 s).
    Alternated, best CPU."""
    import lzma
    import tempfile

    from sitsprof.policies.traces.mooncake import read_mooncake

    path = next((p for p in (BUNDLED["mooncake"], MOONCAKE) if p.exists()), None)
    if path is None:
        print("4. skipped: no Mooncake trace (bundled or /work/shared/data)")
        return
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt") as fh, tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as out:
        for k, line in enumerate(fh):
            if k >= n_requests:
                break
            out.write(line)
    trace = read_mooncake(out.name)
    Path(out.name).unlink()
    rb = reblock(trace, 16)
    cpus = {"lru": [], "lirs": []}
    rows = {}
    for p in cpus:
        run_replay(trace, p, capacity, reblocked=rb)  # warm
    for _ in range(max(repeat, 2)):
        for p in cpus:
            r, _, c = timed(lambda p=p: run_replay(trace, p, capacity, reblocked=rb), 1)
            cpus[p].append(c)
            rows[p] = r.summary()
    lru, lirs = min(cpus["lru"]), min(cpus["lirs"])
    s = rows["lirs"]
    print(f"4. Mooncake's first {trace.n_requests:,} requests, 16-token blocks, pool {capacity:,} blocks, vllm: "
          f"lru {lru:.2f} s CPU, lirs {lirs:.2f} s CPU (x{lirs / lru:.2f} of lru); lirs: {s['evictions']:,} "
          f"evictions, {s['preemptions']:,} preemptions, peak pinned {s['peak_pinned_blocks']:,}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    part1(1 if args.quick else args.repeat)
    part2(1 if args.quick else args.repeat, 60.0 if args.quick else 150.0)
    part3(args.repeat, 500_000 if args.quick else 5_000_000, 100_000 if args.quick else 1_000_000)
    part4(args.repeat)


if __name__ == "__main__":
    main()
