"""Start-up and first-run compile of the `sitsprof` CLI (issue 14), measured in one run.

1. Fresh install: a wheel of this checkout installed into a new venv under a temporary folder
   (its dependencies from this interpreter's site-packages, through a .pth line, so nothing is
   downloaded), every run with an empty numba cache (SITSPROF_NUMBA_CACHE_DIR).
   - before: the first `policy simulate bundled:mooncake -p all -c 1000 --json` compiles
     every kernel as it reaches it, one after another;
   - after: `sitsprof compile` (every core) then the same first run;
   - reinstall: the same wheel into a second new venv, the cache kept: does the first run
     there compile again? (numba keys cache files by the source folder: yes.)
   Hits of the runs are compared (identical).
2. Warm: `policy simulate` of a 1,000-reference trace (table, Belady headroom and cost table,
   `-p lru -c 10`), median of --repeat runs, beside `python -c pass` and `python -c "import
   numba"` (the floor any numba command pays) measured in the same loop.

Times are wall seconds and CPU seconds (user + system of the child): on a busy machine wall
time waits for the CPU, CPU time does not. Warm runs use byte-compiled modules (`warm_env`) and SITSPROF_JIT unset
(auto: a trace this small runs interpreted, issue 14), beside SITSPROF_JIT=numba (compiled, as
before). 3. --break-even: CPU of the CLI interpreted and compiled at 1,000-100,000 references,
and each policy's interpreted cost per reference (policies/engine/jitmode.py's rule).
Usage: python bench/bench_startup.py [--repeat 7] [--policies all] [--skip-install | --break-even]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(cmd, env=None, check=True) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall s, CPU s, completed) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if check and done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{done.stderr[-2000:]}")
    return wall, cpu, done


def fresh_venv(folder: Path, wheel: Path) -> Path:
    """A new venv at `folder` with the wheel installed (no deps: this interpreter's site-packages on its path)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next((folder / "lib").glob("python*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(folder / "bin" / "python"), "install", "-q",
                    "--no-deps", str(wheel)], check=True, capture_output=True)
    return folder / "bin" / "sitsprof"


def env_with_cache(cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["SITSPROF_NUMBA_CACHE_DIR"] = str(cache)
    return env


def hits(completed) -> list:
    return [(r["policy"], r["hits"]) for r in json.loads(completed.stdout)["results"]]


def compiled_count(stderr: str) -> str:
    line = next((x for x in stderr.splitlines() if x.startswith("sitsprof: compiled ")), "")
    return line.split(" kernel(s)")[0].rsplit(" ", 1)[-1] if line else "0"


def first_runs(tmp: Path, policies: str) -> list[tuple[str, float, float, str]]:
    wheel_dir = tmp / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(wheel_dir)],
                   check=True, capture_output=True)
    wheel = next(wheel_dir.glob("sitsprof-*.whl"))
    simulate = ["policy", "simulate", "bundled:mooncake", "-p", policies, "-c", "1000", "--json"]
    rows = []
    exe = fresh_venv(tmp / "venv1", wheel)
    wall, cpu, before = run([str(exe), *simulate], env_with_cache(tmp / "cache-before"))
    rows.append(("before: first run, compiles as it goes", wall, cpu, compiled_count(before.stderr) + " compiled"))
    env = env_with_cache(tmp / "cache-after")
    wall, cpu, done = run([str(exe), "compile", "-p", policies, "--json"], env)
    rows.append((f"after: sitsprof compile ({json.loads(done.stdout)['jobs']} processes)", wall, cpu,
                 f"{json.loads(done.stdout)['compiles']} compiled"))
    wall2, cpu2, after = run([str(exe), *simulate], env)
    rows.append(("after: then the first run", wall2, cpu2, compiled_count(after.stderr) + " compiled"))
    rows.append(("after: compile + first run", wall + wall2, cpu + cpu2, ""))
    exe2 = fresh_venv(tmp / "venv2", wheel)
    wall, cpu, again = run([str(exe2), *simulate], env)
    rows.append(("reinstall (new venv, cache kept): first run", wall, cpu, compiled_count(again.stderr) + " compiled"))
    same = hits(before) == hits(after) == hits(again)
    rows.append(("hits identical before / after / reinstall", 0.0, 0.0, str(same)))
    return rows


def tiny_trace(path: Path, references: int = 1000, blocks: int = 300) -> Path:
    rng = random.Random(1)
    lines, n, t = [], 0, 0
    while n < references:
        k = min(rng.randint(1, 8), references - n)
        ids = [rng.randint(0, blocks) for _ in range(k)]
        lines.append(json.dumps({"timestamp": t, "input_length": k * 512, "output_length": 10, "hash_ids": ids}))
        t, n = t + 100, n + k
    path.write_text("\n".join(lines) + "\n")
    return path


def warm_env(tmp: Path, jit: str | None = None) -> dict:
    """The environment of a warm run: byte-compiled modules (an installed package has its .pyc
    files; PYTHONDONTWRITEBYTECODE, set in some shells, would recompile ~70 modules a run, ~0.1 s
    CPU, so the .pyc files go to a folder of this run's) and SITSPROF_JIT as given (unset: auto)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "SITSPROF_JIT")}
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    if jit is not None:
        env["SITSPROF_JIT"] = jit
    return env


def warm(tmp: Path, repeat: int) -> list[tuple[str, float, float, str]]:
    trace = tiny_trace(tmp / "tiny.jsonl")
    sitsprof = str(Path(sys.executable).with_name("sitsprof"))
    simulate = [sitsprof, "policy", "simulate", str(trace), "-p", "lru", "-c", "10"]
    auto, numba = warm_env(tmp), warm_env(tmp, "numba")
    cases = {
        "python -c pass": ([sys.executable, "-c", "pass"], auto),
        "python -c 'import numba'": ([sys.executable, "-c", "import numba"], auto),
        "sitsprof --help": ([sitsprof, "--help"], auto),
        "sitsprof policy simulate 1,000 refs -p lru -c 10": (simulate, auto),
        "  the same, --json (no headroom line, no tables)": ([*simulate, "--json"], auto),
        "  the same, OPENBLAS_NUM_THREADS=2 (a BLAS thread a core)": (simulate, dict(auto, OPENBLAS_NUM_THREADS="2")),
        "  the same, SITSPROF_JIT=numba (compiled, as before)": (simulate, numba),
        "  the same, --json, SITSPROF_JIT=numba": ([*simulate, "--json"], numba),
    }
    for cmd, env in cases.values():  # fill the caches (numba's, the .pyc files, the page cache)
        run(cmd, env)
    times = {name: [] for name in cases}
    for _ in range(repeat):  # interleaved: a busy spell hits every case alike
        for name, (cmd, env) in cases.items():
            times[name].append(run(cmd, env)[:2])
    floor = statistics.median(w for w, _ in times["python -c 'import numba'"])
    rows = []
    for name, got in times.items():
        w = statistics.median(x for x, _ in got)
        c = statistics.median(x for _, x in got)
        rows.append((name, w, c, f"{w / floor:.2f}x import numba"))
    return rows


_PER_POLICY = """
import json, sys, time
from sitsprof.policies import registry
from sitsprof.policies.sweep import run_policies, simulate
from sitsprof.policies.traces.detect import read_trace
trace = read_trace(sys.argv[1])
run_policies(trace, ["lru"], [10])  # imports, calibration
out = {}
for name in registry.policy_names():
    for c in (10, 1000):
        t = time.process_time(); run_policies(trace, [name], [c]); t = time.process_time() - t
        out[name] = max(out.get(name, 0.0), t / len(trace.block) * 1e6)
t = time.process_time(); simulate(trace, "belady", 10); out["(belady headroom line)"] = (
    time.process_time() - t) / len(trace.block) * 1e6
print(json.dumps(out))
"""


_STAGES = """
import io, sys, time
T = time.process_time
import numpy, click, rich.console, rich.table
import sitsprof.cli.main
from rich.console import Console
from sitsprof.cli.console import cost_table, cost_title, load_trace, results_table
from sitsprof.common import jit
from sitsprof.policies.sweep import run_policies, simulate
t1 = T()
jit.decide(True)  # as policy simulate decides for this trace
trace, fmt = load_trace(sys.argv[1], None, False)
t2 = T()
res = run_policies(trace, ["lru"], [10])
t3 = T()
best = simulate(trace, "belady", 10)
t4 = T()
c = Console(file=io.StringIO(), width=120)
c.print(results_table(res, title="t"))
c.print(f"headroom (belady, offline optimal) block hit: {best.block_hit_ratio:.4f} at 10")
c.print(cost_table(res, title=cost_title(res)))
t5 = T()
print(f"{t1:.3f} {t2 - t1:.3f} {t3 - t2:.3f} {t4 - t3:.3f} {t5 - t4:.3f}")
"""


def stages(tmp: Path, repeat: int) -> list[tuple[str, float, float, str]]:
    """Where the interpreted warm run's CPU goes, in-process (`time.process_time` by stage)."""
    trace = tiny_trace(tmp / "tiny.jsonl")
    names = ("interpreter, numpy, click, rich, the CLI's imports", "reading the trace", "the costed LRU run",
             "the headroom Belady run", "printing the tables")
    runs = [[float(x) for x in run([sys.executable, "-c", _STAGES, str(trace)], warm_env(tmp))[2].stdout.split()]
            for _ in range(repeat + 1)][1:]  # the first fills the .pyc folder
    return [(f"stage: {name}", 0.0, statistics.median(r[i] for r in runs),
             "CPU s " + " / ".join(f"{r[i]:.3f}" for r in runs)) for i, name in enumerate(names)]


def break_even(tmp: Path, repeat: int) -> list[tuple[str, float, float, str]]:
    """Where interpreted and compiled kernels cost the same CPU on the `policy simulate` path:
    the CLI at growing trace sizes under SITSPROF_JIT=python and =numba, and each policy's
    interpreted cost per reference (what policies/engine/jitmode.py's rule adds up)."""
    from sitsprof.policies.engine import jitmode
    from sitsprof.policies.registry import policy_names

    sitsprof = str(Path(sys.executable).with_name("sitsprof"))
    rows = []
    per_ref_trace = tiny_trace(tmp / "per-ref.jsonl", 5000)
    done = run([sys.executable, "-c", _PER_POLICY, str(per_ref_trace)], warm_env(tmp, "python"))[2]
    for name, us in json.loads(done.stdout).items():
        rule = jitmode.US_PER_REFERENCE.get(name, jitmode.HEADROOM_US)
        rows.append((f"interpreted {name} (5,000 refs)", 0.0, 0.0, f"{us:.1f} us CPU a reference; the rule: {rule}"))
    shapes = {"-p lru -c 10 (table)": (["-p", "lru", "-c", "10"], ["lru"], True),
              "-p all -c 10 --json": (["-p", "all", "-c", "10", "--json"], policy_names(), False)}
    for n in (1000, 3000, 10000, 30000, 100000):
        trace = tiny_trace(tmp / f"be-{n}.jsonl", n, blocks=max(300, n // 3))
        for label, (args, policies, headroom) in shapes.items():
            cmd = [sitsprof, "policy", "simulate", str(trace), *args]
            got = {}
            for mode in ("python", "numba"):
                run(cmd, warm_env(tmp, mode))
                got[mode] = statistics.median(run(cmd, warm_env(tmp, mode))[1] for _ in range(repeat))
            estimate = jitmode.estimate_s(n, policies, [10], headroom=headroom)
            auto = "python" if estimate <= jitmode.BUDGET_S else "numba"
            rows.append((f"{n:,} refs {label}: python | numba CPU s", got["python"], got["numba"],
                         f"{got['python'] / got['numba']:.2f}x; rule: {estimate:.3f} s -> {auto}"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--policies", default="all")
    parser.add_argument("--skip-install", action="store_true", help="Only the warm start-up.")
    parser.add_argument("--break-even", action="store_true",
                        help="Only where interpreted and compiled kernels cost the same (SITSPROF_JIT).")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="sitsprof-bench-startup-") as folder:
        tmp = Path(folder)
        if args.break_even:
            rows = break_even(tmp, max(1, min(args.repeat, 3)))
        else:
            rows = warm(tmp, args.repeat) + stages(tmp, 3)
        if not args.skip_install and not args.break_even:
            rows += first_runs(tmp, args.policies)
    print(f"{'case':58} {'wall s':>8} {'CPU s':>8}  note")
    for name, wall, cpu, note in rows:
        print(f"{name:58} {wall:8.3f} {cpu:8.3f}  {note}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
