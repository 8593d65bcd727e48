"""Sampled (SHARDS) hit-ratio curves against exact ones, error and time, measured in one run.

For each trace and policy: the exact curve (LRU by stack distances, others by replaying the
whole trace at every point) and the sampled curve at each --rates rate, on the same
log-spaced capacities (`curve_capacities`). Prints the mean and largest absolute error of
the sampled hit ratio and the time ratio exact / sampled. Run by hand:

    .venv/bin/python bench/bench_mrc_sampling.py --mooncake PATH      # also the Mooncake trace
    .venv/bin/python bench/bench_mrc_sampling.py --scale 10           # a 10x generated workload
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def measure(name, trace, policies, rates, points, min_blocks) -> list[dict]:
    from sitsprof.policies.engine.mrc import curve_capacities, mean_absolute_error, policy_curve
    from sitsprof.policies.registry import get_policy

    caps = curve_capacities(trace.n_blocks, points)
    rows = []
    for policy in policies:
        module = get_policy(policy)
        policy_curve(trace, module, caps[:2], sample="exact")  # JIT warm-up, untimed
        policy_curve(trace, module, caps[-2:], sample=0.01, min_blocks=min_blocks)
        exact = policy_curve(trace, module, caps, sample="exact")
        for rate in rates:
            sampled = policy_curve(trace, module, caps, sample=rate, min_blocks=min_blocks)
            err = np.abs(sampled.hit_ratios - exact.hit_ratios)
            rows.append({"trace": name, "references": len(trace), "blocks": int(trace.n_blocks), "policy": policy,
                         "rate": rate, "min_blocks": min_blocks, "points": len(caps),
                         "mae": mean_absolute_error(sampled, exact),
                         "max_error": float(err.max()), "exact_s": exact.seconds, "sampled_s": sampled.seconds,
                         "speedup": exact.seconds / max(sampled.seconds, 1e-9)})
            r = rows[-1]
            print(f"{name:12s} {policy:7s} rate {rate:<6g} MAE {r['mae']:.4f} max {r['max_error']:.4f} "
                  f"exact {r['exact_s']:.2f}s sampled {r['sampled_s']:.2f}s ({r['speedup']:.1f}x)", flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mooncake", help="a Mooncake conversation trace (JSONL)")
    parser.add_argument("--scale", type=float, default=1.0, help="session-rate scale of the generated workload")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default="lru,arc,s3fifo,belady")
    parser.add_argument("--rates", default="0.1,0.01,0.001")
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--min-blocks", type=int, default=1000, help="smallest sampled cache (policy_curve)")
    parser.add_argument("--json", dest="json_out", help="write the rows here")
    args = parser.parse_args(argv)

    from sitsprof.policies.traces import generator
    from sitsprof.policies.traces.detect import read_trace

    policies = [p for p in args.policies.split(",") if p]
    rates = [float(r) for r in args.rates.split(",") if r]
    traces = []
    if args.mooncake:
        traces.append(("mooncake", read_trace(args.mooncake)))
    requests = generator.generate_requests(seed=args.seed, scale=args.scale)
    traces.append((f"three-stack x{args.scale:g}", generator.requests_to_trace(requests)))
    rows = []
    for name, trace in traces:
        rows += measure(name, trace, policies, rates, args.points, args.min_blocks)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
