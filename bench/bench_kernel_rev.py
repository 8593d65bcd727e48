"""One classic policy's KERNEL in the working tree against the same KERNEL at a git revision.

Run by hand (not in CI), from the repository root:

    .venv/bin/python bench/bench_kernel_rev.py --against HEAD --policies lfu,s3fifo,twoq,prefix_lru

Workload: `bench_policies.py`'s Zipf(1.0) trace (5,000,000 references over 1,000,000 objects,
seed 42, factorised once), capacity 100,000. The revision's module
(`git show REV:policies/classic/NAME.py`, its relative imports made absolute, so it shares the
working tree's helpers) and the working tree's are timed in turns, `--repeat` times each, in
one process: the best wall and CPU seconds (time.process_time) of each, and the hits,
evictions and most-resident count of both, which must agree. For a change that should leave
a kernel's speed alone (docs/scale.md: KERNEL as one window of the streaming replay's loop).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from libcachesim_ref import zipf_ids  # noqa: E402


def old_module(rev: str, name: str, folder: Path):
    """The module policies/classic/NAME.py as it was at `rev`, loaded under another name."""
    source = subprocess.run(["git", "show", f"{rev}:policies/classic/{name}.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    source = source.replace("from ._structs", "from sitsprof.policies.classic._structs")
    source = source.replace("from .twoq", "from sitsprof.policies.classic.twoq")
    path = folder / f"rev_{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"rev_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", default="HEAD", help="git revision to compare with (default HEAD)")
    ap.add_argument("--policies", default="lfu,s3fifo,twoq,prefix_lru", help="module names in policies/classic")
    ap.add_argument("--requests", type=int, default=5_000_000)
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--capacity", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    from sitsprof.policies.traces.factorize import factorize_int64

    codes, k = factorize_int64(zipf_ids(args.requests, args.objects, 1.0, 42))
    codes = codes.astype(np.int32)
    offsets = np.arange(len(codes) + 1, dtype=np.int64)
    cap, n_blocks = np.int64(args.capacity), np.int64(k)
    print(f"Zipf(1.0) seed 42: {len(codes):,} references over {k:,} blocks, capacity {args.capacity:,}; "
          f"best of {args.repeat}, {args.against} and the working tree in turns")
    hit = np.zeros(len(codes), dtype=np.uint8)
    with tempfile.TemporaryDirectory() as folder:
        for name in args.policies.split(","):
            pair = {args.against: old_module(args.against, name, Path(folder)),
                    "tree": importlib.import_module(f"sitsprof.policies.classic.{name}")}
            times = {label: [] for label in pair}
            outcome = {}
            for module in pair.values():  # compile or load both before timing
                module.KERNEL(codes[:1000], offsets[:1001], n_blocks, cap, hit)
            for _ in range(args.repeat):
                for label, module in pair.items():
                    wall, cpu = time.perf_counter(), time.process_time()
                    ev, most = module.KERNEL(codes, offsets, n_blocks, cap, hit)
                    times[label].append((time.perf_counter() - wall, time.process_time() - cpu))
                    outcome[label] = (int(np.count_nonzero(hit)), int(ev), int(most))
            same = len(set(outcome.values())) == 1
            for label in pair:
                wall = min(t[0] for t in times[label])
                cpu = min(t[1] for t in times[label])
                hits, ev, most = outcome[label]
                print(f"{name:<11}{label:<9} wall {wall:.3f} s  CPU {cpu:.3f} s  hits {hits:,} evictions {ev:,} "
                      f"max_resident {most:,}")
            if not same:
                print(f"{name}: RESULTS DIFFER", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
