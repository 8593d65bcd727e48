"""Streaming a Mooncake JSONL trace against reading it whole: peak memory and time, same hits.

Run by hand (not in CI), from the repository root:

    .venv/bin/python bench/bench_stream_lines.py                      # 400k requests, ~10M references
    .venv/bin/python bench/bench_stream_lines.py --requests 40000     # quick

Workload: `--requests` Mooncake lines (`timestamp` ms, `input_length`, `output_length`,
`hash_ids`), each request a chain of blocks: a shared prefix of 1-32 blocks drawn Zipf(1.1)
over `--prefixes` prompt prefixes (each prefix's block ids fixed), then 0 to `--fresh`
(default 16) fresh blocks of its own, so
prefixes repeat and suffixes rarely do, as in the Mooncake conversation trace. Written once to
`--workdir`. Each side runs in its own child process (interpreter, imports, reading, replay),
timed from the parent; peak memory is the child's VmHWM (/proc/self/status). In memory:
`read_trace` + `simulate` per (policy, capacity); streamed: `stream_lines.stream_simulate_lines`,
one pass for all runs. A warm-up child loads the compiled kernels first. Hits must be equal.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

PY = sys.executable

_CHILD = r'''
import json, sys, time
from sitsprof.policies.registry import get_policy
path, side, names, caps = sys.argv[1], sys.argv[2], sys.argv[3].split(","), [int(c) for c in sys.argv[4].split(",")]
cpu = time.process_time()
if side == "memory":
    from sitsprof.policies.sweep import simulate
    from sitsprof.policies.traces.detect import read_trace
    trace = read_trace(path, format="mooncake")
    hits = [simulate(trace, n, c).hits for n in names for c in caps]
    refs, distinct = len(trace.block), trace.n_blocks
else:
    from sitsprof.policies.engine.stream_lines import stream_simulate_lines
    results, summary = stream_simulate_lines(path, "mooncake", [get_policy(n) for n in names], caps)
    hits = [r.hits for r in results]
    refs, distinct = summary["references"], summary["distinct_blocks"]
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")][0]
print(json.dumps({"hits": hits, "references": refs, "distinct": distinct, "cpu_s": time.process_time() - cpu,
                  "peak_mb": int(hwm) / 1024}))
'''


def generate(path: Path, requests: int, prefixes: int, seed: int, fresh_most: int = 16) -> None:
    rng = np.random.default_rng(seed)
    prefix_len = rng.integers(1, 33, prefixes)
    prefix_start = np.concatenate(([0], np.cumsum(prefix_len)))
    fresh = int(prefix_start[-1]) + 1
    ranks = np.minimum(rng.zipf(1.1, requests), prefixes) - 1
    own = rng.integers(0, fresh_most + 1, requests)
    with open(path, "w") as fh:
        for i in range(requests):
            p = int(ranks[i])
            ids = list(range(int(prefix_start[p]), int(prefix_start[p + 1]))) + list(range(fresh, fresh + int(own[i])))
            fresh += int(own[i])
            fh.write(json.dumps({"timestamp": 50 * i, "input_length": 512 * len(ids) - 100,
                                 "output_length": 64, "hash_ids": ids}) + "\n")


def child(*args) -> dict:
    start = time.perf_counter()
    out = subprocess.run([PY, "-c", _CHILD, *args], capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["wall_s"] = time.perf_counter() - start
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=400_000)
    ap.add_argument("--prefixes", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--fresh", type=int, default=16, help="most fresh blocks a request adds after its prefix")
    ap.add_argument("--policies", default="lru,arc,s3fifo,prefix_lru")
    ap.add_argument("--capacities", default="1000,20000")
    ap.add_argument("--workdir", default="/tmp/sitsprof-bench-lines")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"mooncake_{args.requests}_{args.prefixes}_f{args.fresh}_s{args.seed}.jsonl"
    if not path.exists():
        generate(path, args.requests, args.prefixes, args.seed, args.fresh)
    small = work / "warm.jsonl"
    generate(small, 200, 20, 1)
    child(str(small), "memory", args.policies, "10")
    child(str(small), "stream", args.policies, "10")
    rows = {side: child(str(path), side, args.policies, args.capacities) for side in ("memory", "stream")}
    same = (rows["memory"]["hits"], rows["memory"]["distinct"]) == (rows["stream"]["hits"], rows["stream"]["distinct"])
    print(f"{path.name}: {path.stat().st_size / 2**20:,.0f} MiB, {rows['memory']['references']:,} references, "
          f"{args.requests:,} requests, {rows['stream']['distinct']:,} distinct blocks; policies {args.policies} "
          f"at {args.capacities}; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    for side in ("memory", "stream"):
        r = rows[side]
        print(f"  {side:<7} peak {r['peak_mb']:8,.0f} MB   wall {r['wall_s']:6.2f} s   "
              f"CPU {r['cpu_s']:6.2f} s (in the child)")
    print(f"  hits identical: {same}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "same": same, "args": vars(args)}, indent=2))
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
