"""The serving replay as a user runs it, whole process, warm (issue 24's target: <= 2.5 s).

The exact command the issue names,

    sitsprof policy replay bundled:mooncake --engine vllm -p lru -c 200000 --allow-oversized-pool

(12,031 requests; -c 200,000 is larger than the default model's GPU holds, hence the flag), run
once to warm numba's cache, then `--runs` more times as separate processes. Reported per run:
wall seconds and CPU seconds (user + system of the child, from wait4): the machine's cores are
shared, so wall time waits for the CPU and CPU time is what the run itself cost; the median of
each. `--json PATH` also keeps one run's `--json` document, so a change can be checked to give
the same results (`--compare OLD.json`: every field but wall-clock ones must be equal).

    .venv/bin/python bench/bench_replay_warm.py --runs 5
    .venv/bin/python bench/bench_replay_warm.py --runs 3 --json /tmp/after.json --compare /tmp/before.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ["policy", "replay", "bundled:mooncake", "--engine", "vllm", "-p", "lru", "-c", "200000",
           "--allow-oversized-pool"]
#: Fields that are wall-clock measurements, not results.
TIMING_FIELDS = {"seconds", "created", "wall_s", "elapsed_s", "timestamp"}
TARGET_S = 2.5


def sitsprof() -> str:
    exe = Path(sys.executable).with_name("sitsprof")
    return str(exe) if exe.exists() else "sitsprof"


def run_once(extra: list[str], out=subprocess.DEVNULL) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one whole-process run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sitsprof(), *COMMAND, *extra], stdout=out, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the replay command failed (exit {os.waitstatus_to_exitcode(status)})")
    return wall, usage.ru_utime + usage.ru_stime


def results(doc):
    """`doc` without its wall-clock fields."""
    if isinstance(doc, dict):
        return {k: results(v) for k, v in doc.items() if k not in TIMING_FIELDS}
    if isinstance(doc, list):
        return [results(v) for v in doc]
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path, help="keep one run's --json document here")
    ap.add_argument("--compare", type=Path, help="a --json document of before: results must be equal")
    args = ap.parse_args()
    run_once([])  # warm numba's cache (the first run ever compiles)
    walls, cpus = [], []
    for _ in range(args.runs):
        wall, cpu = run_once([])
        walls.append(wall)
        cpus.append(cpu)
    print("command: sitsprof " + " ".join(COMMAND))
    print("wall s: " + " ".join(f"{w:.2f}" for w in walls) + f"  median {statistics.median(walls):.2f}")
    print("CPU s:  " + " ".join(f"{c:.2f}" for c in cpus) + f"  median {statistics.median(cpus):.2f}")
    med = statistics.median(walls)
    print(f"target <= {TARGET_S} s wall: {'met' if med <= TARGET_S else 'missed'} "
          f"(median wall {med:.2f} s, CPU {statistics.median(cpus):.2f} s)")
    if args.json:
        with open(args.json, "w") as fh:
            run_once(["--json"], out=fh)
        if args.compare:
            same = results(json.loads(args.json.read_text())) == results(json.loads(args.compare.read_text()))
            print(f"results vs {args.compare}: {'identical' if same else 'DIFFERENT'}")
            if not same:
                raise SystemExit(1)


if __name__ == "__main__":
    main()
