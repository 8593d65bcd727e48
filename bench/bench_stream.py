"""Streaming replay against libCacheSim on a large oracleGeneral trace: peak memory and time.

Run by hand (not in CI), from the repository root:

    .venv/bin/python bench/bench_stream.py --refs 200M --objects 22M      # the issue's size (4.8 GB file)
    .venv/bin/python bench/bench_stream.py --refs 50M --objects 22M       # a quarter
    .venv/bin/python bench/bench_stream.py --refs 2M --objects 500k       # quick
    .venv/bin/python bench/bench_stream.py --refs 50M --objects 5M --plain-cli   # the command a user types
    .venv/bin/python bench/bench_stream.py --refs 5M --objects 1M --plain-cli --aot --repeat 7 --policies lru,arc
        # whole-process CPU against libCacheSim, kernels built ahead of time first (issue 24)

Workload: `--refs` references drawn Zipf(alpha = 0.8) over `--objects` object ranks (inverse
CDF of the continuous power law, ranks hashed to sparse 64-bit ids), every object of size 1,
written straight to an oracleGeneral file in 4M-record chunks (so writing needs no memory
for the whole trace). `next_access_vtime` is -1 ("never") in every record: computing it needs
the whole trace in memory (`write_oracle_general` does exactly that), and neither LRU, ARC nor
S3-FIFO reads it, on either side. `--policies belady`, `sits` and `semantic-shard` are ours
alone: our streaming replay computes belady's next uses in two extra passes (docs/scale.md),
while libCacheSim's Belady takes the -1s at their word, and libCacheSim has neither of the
others. The generator counts the distinct ids (the streaming factoriser) and the cache holds
`--capacity-share` of them (default 10%).

Each (side, policy) runs in its own child process, timed from the parent (wall seconds of the
whole process: interpreter start, imports, reading, replay), and its peak resident memory is
the child's VmHWM (/proc/self/status, read as it finishes; ru_maxrss from os.wait4 is kept
beside it in the JSON). Ours runs
`policies.engine.stream.stream_simulate`; libCacheSim runs `process_trace` on its own reader
(tests/libcachesim_ref.py), hashpower sized to the distinct ids. A warm-up child loads our
compiled kernels first, so no child of ours compiles. Hit ratios must agree to 1e-9.
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

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
POLICIES = ("lru", "arc", "s3fifo")
#: No libCacheSim side: sits and semantic-shard are ours alone, and libCacheSim's Belady would
#: read the -1s as "never again".
OURS_ONLY = ("belady", "sits", "semantic-shard")


def count(text: str) -> int:
    text = text.strip().lower()
    mult = {"k": 10**3, "m": 10**6, "g": 10**9}.get(text[-1], 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


def generate(path: Path, refs: int, objects: int, alpha: float, seed: int, chunk: int = 1 << 22) -> int:
    """Write the trace in chunks; returns its distinct ids."""
    from sitsprof.policies.traces.factorize import Factorizer
    from sitsprof.policies.traces.oracle import ORACLE_DTYPE

    rng = np.random.default_rng(seed)
    fac = Factorizer(bits=20)
    rec = np.empty(chunk, dtype=ORACLE_DTYPE)
    tmp = path.with_suffix(".part")
    with open(tmp, "wb") as fh:
        for lo in range(0, refs, chunk):
            n = min(chunk, refs - lo)
            u = rng.random(n)
            ranks = np.minimum((objects * u ** (1.0 / (1.0 - alpha))).astype(np.uint64), np.uint64(objects - 1))
            ids = (ranks + np.uint64(1)) * GOLDEN  # odd multiplier: distinct ranks stay distinct
            r = rec[:n]
            r["timestamp"] = (np.arange(lo, lo + n) // 1000).astype(np.uint32)
            r["obj_id"] = ids
            r["obj_size"] = 1
            r["next_access_vtime"] = -1
            fac.codes(ids)
            r.tofile(fh)
    os.replace(tmp, path)
    return fac.n


OURS = """
import json, sys, time
t0 = time.perf_counter()
from sitsprof.policies.registry import get_policy
from sitsprof.policies.engine.stream import stream_simulate
res, summary = stream_simulate(sys.argv[1], [get_policy(sys.argv[2])], [int(sys.argv[3])])
r = res[0]
print(json.dumps({"hit_ratio": r.block_hit_ratio, "kernel_s": r.seconds, "read_s": summary["read_seconds"],
                  "cpu_s": time.process_time(),
                  "distinct": summary["distinct_blocks"], "inner_s": time.perf_counter() - t0,
                  "vmhwm_kb": int([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])}))
"""

WHOLE = """
import json, sys, time
t0 = time.perf_counter()
from sitsprof.policies.registry import get_policy
from sitsprof.policies.sweep import simulate
from sitsprof.policies.traces.oracle import read_oracle
m, trace = get_policy(sys.argv[2]), read_oracle(sys.argv[1])
# an adaptive policy's whole-trace run is `run` (as policy simulate runs it), not its engine KERNEL
r = m.run(trace, int(sys.argv[3])) if hasattr(m, "run") else simulate(trace, sys.argv[2], int(sys.argv[3]))
print(json.dumps({"hit_ratio": r.block_hit_ratio, "kernel_s": r.seconds, "cpu_s": time.process_time(),
                  "inner_s": time.perf_counter() - t0,
                  "vmhwm_kb": int([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])}))
"""

#: `--plain-cli`: the command a user types, no flag (`policy simulate TRACE -p P -c C --json`),
#: streamed or not by its own rule (policies/engine/autostream.py); its peak is the process's.
CLI = """
import json, runpy, sys, time, io, contextlib
t0 = time.perf_counter()
sys.argv = ["sitsprof", "policy", "simulate", sys.argv[1], "-p", sys.argv[2], "-c", sys.argv[3], "--json"]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    from sitsprof.cli.main import main
    code = main(sys.argv[1:])
doc = json.loads(out.getvalue())
r = doc["results"][0]
print(json.dumps({"hit_ratio": r["block_hit_ratio"], "kernel_s": r["seconds"],
                  "read_s": doc["trace"].get("read_seconds", 0.0),
                  "cpu_s": time.process_time(), "exit": code, "numba": "numba" in sys.modules,
                  "distinct": doc["trace"]["distinct_blocks"], "inner_s": time.perf_counter() - t0,
                  "vmhwm_kb": int([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])}))
"""

THEIRS = """
import json, sys, time
sys.path.insert(0, sys.argv[5])
t0 = time.perf_counter()
import libcachesim as lcs
from libcachesim_ref import LCS_CLASSES
reader = lcs.TraceReader(sys.argv[1], lcs.TraceType.ORACLE_GENERAL_TRACE)
cache = getattr(lcs, LCS_CLASSES[sys.argv[2]])(int(sys.argv[3]), hashpower=int(sys.argv[4]))
miss, _ = cache.process_trace(reader)
print(json.dumps({"hit_ratio": 1.0 - miss, "inner_s": time.perf_counter() - t0,
                  "vmhwm_kb": int([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])}))
"""


#: The children's environment: without PYTHONDONTWRITEBYTECODE (set in some shells), so our
#: modules load from their .pyc as an installed package's do, not compiled from source on every
#: run (~0.05-0.1 s of CPU on the streamed command); the warm-up child writes them.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def child(code: str, *args) -> dict:
    """Run `code` in a child Python; returns its JSON line plus wall seconds and peak RSS (MB)."""
    start = time.perf_counter()
    proc = subprocess.Popen([PY, "-c", code, *map(str, args)], stdout=subprocess.PIPE, cwd=ROOT, env=ENV)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"child failed ({proc.returncode}): {args}")
    row = json.loads(out.decode().strip().splitlines()[-1])
    row.update(wall_s=wall, peak_mb=row["vmhwm_kb"] / 1024, ru_maxrss_mb=usage.ru_maxrss / 1024,
               process_cpu_s=usage.ru_utime + usage.ru_stime)  # the whole process's CPU: robust to a loaded machine
    return row


def _median(values: list[float]) -> float:
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--refs", type=count, default=count("50M"))
    ap.add_argument("--objects", type=count, default=count("22M"))
    ap.add_argument("--alpha", type=float, default=0.8)
    ap.add_argument("--capacity-share", type=float, default=0.1)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--dir", default="/tmp/sitsprof-bench-stream")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--keep", action="store_true", help="keep the trace file (reused when the name matches)")
    ap.add_argument("--json", dest="json_path", default=None, help="also write the rows to this file")
    ap.add_argument("--plain-cli", action="store_true",
                    help="ours is the plain CLI command (policy simulate TRACE -p P -c C --json, no --stream): "
                         "the peak a user gets without the flag")
    ap.add_argument("--aot", action="store_true",
                    help="first build the ahead-of-time kernel module for --policies (`sitsprof compile --aot`, "
                         "into the user's folder or SITSPROF_AOT_DIR): the streamed command then imports no numba")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each side this many times, alternating, and report the median whole-process CPU "
                         "(a shared machine's load moves single runs by +-30%%)")
    ap.add_argument("--no-libcachesim", action="store_true",
                    help="ours only (the peak of the plain command on a trace libCacheSim takes minutes over)")
    ap.add_argument("--in-memory", action="store_true",
                    help="also replay each policy in memory (read_oracle + simulate, or an adaptive policy's run) "
                         "in a child: its time and peak")
    args = ap.parse_args()

    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"zipf{args.alpha}_{args.refs}_{args.objects}_{args.seed}.oracleGeneral"
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        distinct = json.loads(meta.read_text())["distinct"]
        gen_s = 0.0
    else:
        t = time.perf_counter()
        distinct = generate(path, args.refs, args.objects, args.alpha, args.seed)
        gen_s = time.perf_counter() - t
        meta.write_text(json.dumps({"distinct": distinct}))
    capacity = max(1, int(distinct * args.capacity_share))
    hashpower = max(20, int(np.ceil(np.log2(distinct))))
    size_gb = path.stat().st_size / 1e9
    print(f"trace {path.name}: {args.refs:,} references, {distinct:,} distinct ids, {size_gb:.2f} GB "
          f"(written in {gen_s:.1f} s); capacity {capacity:,} blocks; libCacheSim hashpower {hashpower}")

    warm = folder / "warm.oracleGeneral"
    generate(warm, 20_000, 2_000, args.alpha, 1)
    for name in args.policies.split(","):
        child(OURS, warm, name, 100)
    if args.aot:
        subprocess.run([str(Path(PY).with_name("sitsprof")), "compile", "--aot", "-p", args.policies], check=True,
                       env=ENV, cwd=ROOT)

    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # page cache, for both sides
    rows = []
    print(f"{'policy':8} {'ours s':>8} {'lcs s':>8} {'speed-up':>8} {'ours MB':>8} {'lcs MB':>8} "
          f"{'B/ref':>6} {'B/id':>6} {'hit ours':>9} {'hit lcs':>9}")
    for name in args.policies.split(","):
        ours = child(CLI if args.plain_cli else OURS, path, name, capacity)
        if args.in_memory:
            whole = child(WHOLE, path, name, capacity)
            same = "same hit ratio" if whole["hit_ratio"] == ours["hit_ratio"] else "HIT RATIO DIFFERS"
            print(f"         in memory: {whole['wall_s']:.1f} s, CPU {whole['cpu_s']:.1f} s, peak "
                  f"{whole['peak_mb']:.0f} MB ({same})", flush=True)
            ours["in_memory"] = whole
        if args.plain_cli:
            print(f"         plain command: numba {'imported' if ours['numba'] else 'not imported'}, "
                  f"whole-process CPU {ours['process_cpu_s']:.2f} s, peak {ours['peak_mb']:.0f} MB", flush=True)
        if name in OURS_ONLY or args.no_libcachesim:
            print(f"{name:8} {ours['wall_s']:8.1f} {'-':>8} {'-':>8} {ours['peak_mb']:8.0f} {'-':>8} "
                  f"{ours['peak_mb'] * 2**20 / args.refs:6.1f} {ours['peak_mb'] * 2**20 / distinct:6.1f} "
                  f"{ours['hit_ratio']:9.6f} {'-':>9}", flush=True)
            print(f"         ours: read+factorise {ours['read_s']:.1f} s, kernel {ours['kernel_s']:.1f} s, "
                  f"CPU {ours['cpu_s']:.1f} s", flush=True)
            rows.append({"policy": name, "refs": args.refs, "distinct": distinct, "capacity": capacity, "ours": ours})
            continue
        theirs = child(THEIRS, path, name, capacity, hashpower, ROOT / "tests")
        pairs = [(ours, theirs)]
        for _ in range(args.repeat - 1):  # alternating, so a change in the machine's load hits both sides
            pairs.append((child(CLI if args.plain_cli else OURS, path, name, capacity),
                          child(THEIRS, path, name, capacity, hashpower, ROOT / "tests")))
        ours_cpu = sorted(o["process_cpu_s"] for o, _ in pairs)
        theirs_cpu = sorted(t["process_cpu_s"] for _, t in pairs)
        ours, theirs = (min(pairs, key=lambda p: abs(p[0]["process_cpu_s"] - _median(ours_cpu)))[0],
                        min(pairs, key=lambda p: abs(p[1]["process_cpu_s"] - _median(theirs_cpu)))[1])
        row = {"policy": name, "refs": args.refs, "distinct": distinct, "capacity": capacity,
               "ours": ours, "libcachesim": theirs, "speedup": theirs["wall_s"] / ours["wall_s"],
               "process_cpu_s": {"ours": ours_cpu, "libcachesim": theirs_cpu},
               "cpu_ratio": _median(theirs_cpu) / _median(ours_cpu)}
        rows.append(row)
        agree = abs(ours["hit_ratio"] - theirs["hit_ratio"]) < 1e-9
        print(f"{name:8} {ours['wall_s']:8.1f} {theirs['wall_s']:8.1f} {row['speedup']:7.2f}x "
              f"{ours['peak_mb']:8.0f} {theirs['peak_mb']:8.0f} {ours['peak_mb'] * 2**20 / args.refs:6.1f} "
              f"{ours['peak_mb'] * 2**20 / distinct:6.1f} {ours['hit_ratio']:9.6f} {theirs['hit_ratio']:9.6f}"
              f"{'' if agree else '  DIFFER'}", flush=True)
        print(f"         ours: read+factorise {ours['read_s']:.1f} s, kernel {ours['kernel_s']:.1f} s, "
              f"CPU {ours['cpu_s']:.1f} s", flush=True)
        if args.repeat == 1:
            print(f"         whole-process CPU: ours {ours['process_cpu_s']:.2f} s, libCacheSim "
                  f"{theirs['process_cpu_s']:.2f} s ({row['cpu_ratio']:.2f}x)", flush=True)
        else:
            print(f"         whole-process CPU, median of {args.repeat} alternating runs: ours "
                  f"{_median(ours_cpu):.2f} s ({ours_cpu[0]:.2f}-{ours_cpu[-1]:.2f}), libCacheSim "
                  f"{_median(theirs_cpu):.2f} s ({theirs_cpu[0]:.2f}-{theirs_cpu[-1]:.2f}): {row['cpu_ratio']:.2f}x",
                  flush=True)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(rows, indent=1))
    if not args.keep:
        path.unlink()
        meta.unlink()


if __name__ == "__main__":
    main()
