"""NVML sampler benchmark: achieved rate, timing jitter and CPU cost at several intervals.

    python bench/bench_nvml_sampler.py            # real NVML (a GPU node)
    python bench/bench_nvml_sampler.py --fake     # the fake NVML of tests/ (no GPU needed)

Target on a GPU: >= 1 kHz sustained, < 1% of one core per 100 Hz. With --fake the cost is
that of the fake's ctypes callbacks (Python), so the CPU figure is an upper bound.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def run(intervals_ms, seconds: float, groups) -> list[dict]:
    from sitsprof.collectors.nvml_sampler import NvmlSampler

    results = []
    for interval_ms in intervals_ms:
        sampler = NvmlSampler(0, interval_s=interval_ms / 1e3, groups=groups)
        with sampler:
            time.sleep(seconds)
        stats = sampler.stats()
        reads = sampler.drain().get("read_ns", [])
        stats["read_us_median"] = sorted(reads)[len(reads) // 2] / 1e3 if reads else None
        stats["cpu_pct_per_100hz"] = (stats["cpu_pct_of_core"] / (stats["achieved_hz"] / 100.0)
                                      if stats["achieved_hz"] else None)
        results.append(stats)
    return results


def group_costs(groups, calls: int = 200) -> dict[str, float]:
    """Median microseconds of one read of each NVML counter group (which call is expensive)."""
    from sitsprof.collectors.nvml_sampler import _group_readers
    from sitsprof.pmu.nvml import handle, nvml

    pynvml = nvml()
    out = {}
    for group, reader in zip(groups, _group_readers(pynvml, handle(0), groups)):
        times = []
        for _ in range(calls):
            t0 = time.perf_counter_ns()
            try:
                reader()
            except pynvml.NVMLError:
                break
            times.append(time.perf_counter_ns() - t0)
        out[group] = sorted(times)[len(times) // 2] / 1e3 if times else None
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake", action="store_true", help="use tests/fake_nvml.py instead of the driver")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per interval")
    parser.add_argument("--intervals", default="10,2,1", help="intervals in ms, comma separated")
    parser.add_argument("--groups", default="clocks,power,temperature,utilization,event_reasons,memory")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.fake:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        import fake_nvml

        fake_nvml.install(fake_nvml.default_state())
    from sitsprof.pmu.device import device_facts

    facts = device_facts(0, cuda=False)
    costs = group_costs(args.groups.split(","))
    results = run([float(x) for x in args.intervals.split(",")], args.seconds, args.groups.split(","))
    if args.json:
        print(json.dumps({"device": facts["name"], "fake": args.fake, "group_read_us": costs, "results": results},
                         indent=2))
        return 0
    print(f"NVML sampler on {facts['name']}{' (fake NVML)' if args.fake else ''}")
    print("median read per group: " + ", ".join(
        f"{g} {'n/a' if us is None else f'{us:.1f}us'}" for g, us in costs.items()))
    print(f"{'interval':>9} {'achieved':>10} {'dropped':>8} {'read p50':>9} {'late p50':>9} {'late p99':>9} "
          f"{'jitter sd':>9} {'CPU %core':>9} {'CPU%/100Hz':>10}")
    for r in results:
        print(f"{r['interval_s'] * 1e3:7.1f}ms {r['achieved_hz']:8.1f}Hz {r['dropped']:8d} "
              f"{r['read_us_median']:7.1f}us {r.get('lateness_p50_us', 0):7.1f}us {r.get('lateness_p99_us', 0):7.1f}us "
              f"{r.get('interval_std_us', 0):7.1f}us {r['cpu_pct_of_core']:9.2f} {r['cpu_pct_per_100hz'] or 0:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
