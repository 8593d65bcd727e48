"""The serving replay as a user runs it, whole process, warm (issue 24's target: <= 2.5 s).

The exact command the issue names,

    sitsprof policy replay bundled:mooncake --engine vllm -p lru -c 200000 --allow-oversized-pool

(12,031 requests; -c 200,000 is larger than the default model's GPU holds, hence the flag), run
once to warm numba's cache, then `--runs` more times as separate processes. Reported per run:
wall seconds and CPU seconds (user + system of the child, from wait4): the machine's cores are
shared, so wall time waits for the CPU and CPU time is what the run itself cost; the median of
each. `--json PATH` also keeps one run's `--json` document, so a change can be checked to give
the same results (`--compare OLD.json`: every field but wall-clock ones must be equal).

`--dynamo VENV`: NVIDIA Dynamo 1.6.1's mocker replay (Rust; `dynamo.replay.run_trace_replay`,
installed in VENV with `pip install --no-deps ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1
typing_extensions`) on the same trace file (decompressed) and settings, also whole process and
warm (it has no JIT; the first run warms the file cache): vLLM backend, 16-token blocks, a pool
of 200,000 blocks, 256 sequences and 8,192 batched tokens a step, prefix caching, the trace's
512-token hash blocks. Its step-time model is its own (polynomial), so its simulated duration
differs: the same requests and pool rules, not the same simulated seconds.

    .venv/bin/python bench/bench_replay_warm.py --runs 5
    .venv/bin/python bench/bench_replay_warm.py --runs 3 --json /tmp/after.json --compare /tmp/before.json
"""
from __future__ import annotations

import argparse
import json
import lzma
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMAND = ["policy", "replay", "bundled:mooncake", "--engine", "vllm", "-p", "lru", "-c", "200000",
           "--allow-oversized-pool"]
#: Fields that are wall-clock measurements, not results.
TIMING_FIELDS = {"seconds", "created", "wall_s", "elapsed_s", "timestamp"}
TARGET_S = 2.5


def sitsprof() -> str:
    exe = Path(sys.executable).with_name("sitsprof")
    return str(exe) if exe.exists() else "sitsprof"


DYNAMO = """
import sys
from dynamo.replay import run_trace_replay
engine = {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 200000, "max_num_seqs": 256,
          "max_num_batched_tokens": 8192, "enable_prefix_caching": True}
report = run_trace_replay([sys.argv[1]], extra_engine_args={"engine": engine, "num_gpu_blocks_is_explicit": True},
                          trace_block_size=512, trace_format="mooncake")
"""


def timed(cmd: list[str], out=subprocess.DEVNULL) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one whole-process run of `cmd`."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[0]} failed (exit {os.waitstatus_to_exitcode(status)})")
    return wall, usage.ru_utime + usage.ru_stime


def series(name: str, cmd: list[str], runs: int) -> tuple[float, float]:
    """Warm once, then `runs` timed runs; prints them and returns the medians (wall, CPU)."""
    timed(cmd)
    walls, cpus = zip(*(timed(cmd) for _ in range(runs)))
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    print(f"{name} wall s: " + " ".join(f"{w:.2f}" for w in walls) + f"  median {wall:.2f}")
    print(f"{name} CPU s:  " + " ".join(f"{c:.2f}" for c in cpus) + f"  median {cpu:.2f}")
    return wall, cpu


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
    ap.add_argument("--dynamo", type=Path, help="a venv with ai-dynamo 1.6.1: time its mocker replay beside")
    ap.add_argument("--compare", type=Path, help="a --json document of before: results must be equal")
    args = ap.parse_args()
    ours = [sitsprof(), *COMMAND]
    print("command: sitsprof " + " ".join(COMMAND))
    wall, cpu = series("sitsprof", ours, args.runs)
    verdict = "met" if wall <= TARGET_S else "missed"
    print(f"target <= {TARGET_S} s wall: {verdict} (median wall {wall:.2f} s, CPU {cpu:.2f} s)")
    if args.dynamo:
        from sitsprof.policies.traces.opening import BUNDLED

        with tempfile.NamedTemporaryFile(suffix=".jsonl") as trace:
            trace.write(lzma.decompress(BUNDLED["mooncake"].read_bytes()))
            trace.flush()
            d_wall, d_cpu = series("dynamo", [str(args.dynamo / "bin" / "python"), "-c", DYNAMO, trace.name], args.runs)
        print(f"dynamo / sitsprof: wall {d_wall / wall:.2f}x, CPU {d_cpu / cpu:.2f}x")
    if args.json:
        with open(args.json, "w") as fh:
            timed([*ours, "--json"], out=fh)
        if args.compare:
            same = results(json.loads(args.json.read_text())) == results(json.loads(args.compare.read_text()))
            print(f"results vs {args.compare}: {'identical' if same else 'DIFFERENT'}")
            if not same:
                raise SystemExit(1)


if __name__ == "__main__":
    main()
