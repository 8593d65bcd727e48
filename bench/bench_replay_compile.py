"""The serving replay's numba compile, cold: CPU seconds of the first replay in a process with an
empty numba cache, then of one replay per other policy after it (issue 24: a state type per
policy must not make numba compile `replay` once per policy, which would add minutes to
`make test`).

Each measurement is a fresh child process with `NUMBA_CACHE_DIR` an empty folder; it replays
a small generated workload (all its time is compiling) with -p lru first, then every other
serving policy, and reports CPU seconds (user + system, this process) per replay. Run twice
(before / after a change) in the same session on the same machine; the machine's cores are
shared, so CPU time, not wall time, is the figure.

    .venv/bin/python bench/bench_replay_compile.py --runs 1
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import json, resource, sys

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

from sitsprof.policies.serving.names import SERVING_POLICIES
from sitsprof.policies.serving.reblock import reblock
from sitsprof.policies.serving.scheduler import run_replay
from sitsprof.policies.traces.generator import generate_workload

trace = generate_workload(seed=1, duration_s=2.0)
rb = reblock(trace, 16)
out = {}
for p in SERVING_POLICIES:
    t = cpu()
    run_replay(trace, p, 2000, reblocked=rb)
    out[p] = cpu() - t
print(json.dumps(out))
"""


def one() -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    runs = [one() for _ in range(args.runs)]
    for p in runs[0]:
        vals = [r[p] for r in runs]
        print(f"{p:>7} CPU s: " + " ".join(f"{v:.1f}" for v in vals) + f"  median {statistics.median(vals):.1f}")
    totals = [sum(r.values()) for r in runs]
    print("  total CPU s: " + " ".join(f"{v:.1f}" for v in totals) + f"  median {statistics.median(totals):.1f}")


if __name__ == "__main__":
    main()
