"""LFU's incremental form in the serving replay (policies/serving/evictors/lfu.py) beside LRU, in one run.

The bundled Mooncake conversation trace (12,031 requests) at 16-token KV blocks through vLLM's
rules, pools of 10% and 3% of its KV blocks, arrivals x1: each policy's replay, warm (a first
replay compiles), LRU and LFU alternated `--repeat` times; best CPU (process time: the cores are
shared) and best wall, and LFU's ratio to LRU. bench_replay.py part 3 measures the whole-trace
kernel against a loop over the incremental form for every policy, LFU included.

    .venv/bin/python bench/bench_replay_lfu.py              # ~1 min
    .venv/bin/python bench/bench_replay_lfu.py --repeat 1
"""
from __future__ import annotations

import argparse
import time

from sitsprof.policies.serving.reblock import reblock
from sitsprof.policies.serving.scheduler import run_replay
from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.opening import BUNDLED

POLICIES = ("lru", "lfu")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    trace = read_trace(BUNDLED["mooncake"])
    rb = reblock(trace, 16)
    for frac in (0.10, 0.03):
        cap = int(rb.n_ids * frac)
        for p in POLICIES:
            run_replay(trace, p, cap, reblocked=rb)  # warm
        best = {p: [float("inf"), float("inf")] for p in POLICIES}
        rows = {}
        for _ in range(args.repeat):
            for p in POLICIES:
                w, c = time.perf_counter(), time.process_time()
                rows[p] = run_replay(trace, p, cap, reblocked=rb).summary()
                best[p][0] = min(best[p][0], time.perf_counter() - w)
                best[p][1] = min(best[p][1], time.process_time() - c)
        print(f"Mooncake, {trace.n_requests:,} requests, vllm rules, pool {cap:,} blocks ({100 * frac:.0f}%), "
              f"best of {args.repeat}, alternated:")
        for p in POLICIES:
            s = rows[p]
            print(f"   {p}: {best[p][1]:.2f} s CPU, {best[p][0]:.2f} s wall (x{best[p][1] / best['lru'][1]:.2f} of "
                  f"lru's CPU); {s['evictions']:,} evictions, {s['preemptions']:,} preemptions, "
                  f"block hit {s['block_hit_ratio']:.4f}")


if __name__ == "__main__":
    main()
