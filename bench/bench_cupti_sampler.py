"""CUPTI PM sampler benchmark: host memory over a recording, drained vs expected, host cost per sample.

    python bench/bench_cupti_sampler.py --stand-in                  # 60 s, default interval, no GPU
    python bench/bench_cupti_sampler.py --stand-in --interval 10us  # the overflow 10 us causes, reported
    python bench/bench_cupti_sampler.py                             # real CUPTI (a GPU node, cupti-python)

It drains the sampler once a second, as the recorder does, and prints resident memory, the
pending peak and the samples drained so far against those the GPU timeline says it produced.
Target (issue 10.4): at the default interval, resident memory flat over 60 s and drained =
expected within 1%. With --stand-in the GPU is tests/fake_cupti.py (cupti-python's API over a
simulated GPU); its own Python cost is part of `host_us_per_sample`, so the script also times
the sampler's decode loop with the two per-sample CUPTI calls made no-ops (`loop_us_per_sample`):
what sitsprof adds per sample, whatever CUPTI's evaluation costs.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _stand_in(speed: float, buffer_bytes: int | None):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import fake_cupti

    from sitsprof.pmu import cupti_pm

    cupti_pm.availability = lambda *a: (True, "stand-in (tests/fake_cupti.py)")
    return fake_cupti.install(None, speed=speed)


def record(seconds: float, interval_ns: int, speed: float, buffer_bytes: int | None) -> dict:
    from sitsprof.collectors.cupti_sampler import CuptiPmSampler
    from sitsprof.pmu.cupti_pm import DEFAULT_BUFFER_BYTES

    sampler = CuptiPmSampler(0, interval_ns=interval_ns, hardware_buffer_size=buffer_bytes or DEFAULT_BUFFER_BYTES)
    rss0 = _rss_mib()
    print(f"{'t s':>5} {'rss MiB':>8} {'pending peak':>12} {'drained':>10} {'expected':>10} {'overflow':>8}")
    drained, rss = 0, []
    t0 = time.monotonic()
    sampler.start()
    for second in range(1, int(seconds) + 1):  # GPU seconds: one drain each, as the recorder does
        time.sleep(max(0.0, t0 + second / speed - time.monotonic()))
        drained += len(sampler.drain().get("gpu_start_ns", ()))
        stats = sampler.stats()
        rss.append(_rss_mib())
        if second % 5 == 0 or second == 1:
            print(f"{second:5d} {rss[-1]:8.1f} {stats['pending_peak_samples']:12d} {drained:10d} "
                  f"{stats['expected_samples']:10d} {stats['overflow_samples']:8d}")
    sampler.stop()
    drained += len(sampler.drain().get("gpu_start_ns", ()))
    stats = sampler.stats()
    third = max(1, len(rss) // 3)
    stats.update({
        "drained_total": drained,
        "drained_over_expected": drained / stats["expected_samples"] if stats["expected_samples"] else None,
        "rss_start_mib": rss0, "rss_early_max_mib": max(rss[:third]), "rss_late_max_mib": max(rss[-third:]),
    })
    return stats


def loop_cost(interval_ns: int) -> float:
    """Microseconds per sample of the session's decode loop alone (per-sample CUPTI calls as no-ops)."""
    import cupti.cupti as cc

    from sitsprof.pmu.cupti_pm import PmSamplingSession

    session = PmSamplingSession(0, interval_ns=interval_ns, max_samples=50_000)
    session.start()
    try:
        time.sleep(50_000 * interval_ns / 1e9 / _SPEED)
        saved = cc.pm_sampling_counter_data_get_sample_info, cc.profiler_host_evaluate_to_gpu_values
        cc.pm_sampling_counter_data_get_sample_info = cc.profiler_host_evaluate_to_gpu_values = lambda p: None
        try:
            cpu = time.thread_time()
            n = len(session.decode())
            return 1e6 * (time.thread_time() - cpu) / n
        finally:
            cc.pm_sampling_counter_data_get_sample_info, cc.profiler_host_evaluate_to_gpu_values = saved
    finally:
        session.stop()
        session.close()


_SPEED = 1.0


def main(argv=None) -> int:
    global _SPEED
    from sitsprof.common.durations import parse_duration
    from sitsprof.pmu.cupti_pm import DEFAULT_INTERVAL_NS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stand-in", action="store_true", help="tests/fake_cupti.py instead of cupti-python")
    parser.add_argument("--seconds", type=float, default=60.0, help="GPU seconds to record (default 60)")
    parser.add_argument("--interval", default=f"{DEFAULT_INTERVAL_NS // 1000}us", help="PM sampling interval")
    parser.add_argument("--speed", type=float, default=1.0, help="stand-in only: its GPU clock runs this much faster")
    parser.add_argument("--hw-buffer", type=int, default=None, help="hardware buffer bytes (default 512 MiB)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    interval_ns = int(round(parse_duration(args.interval, positive=True) * 1e9))
    if args.stand_in:
        _SPEED = args.speed
        _stand_in(args.speed, args.hw_buffer)
    elif args.speed != 1.0:
        parser.error("--speed needs --stand-in")
    print(f"CUPTI PM sampler: {args.seconds:g} GPU s at {interval_ns / 1e3:g} us"
          + (f" (stand-in, clock x{args.speed:g})" if args.stand_in else ""))
    stats = record(args.seconds, interval_ns, _SPEED, args.hw_buffer)
    stats["loop_us_per_sample"] = loop_cost(interval_ns) if args.stand_in else None
    print(json.dumps({k: stats[k] for k in (
        "samples", "expected_samples", "drained_over_expected", "dropped", "overflow", "overflow_events",
        "overflow_samples", "host_dropped", "last_stop_reason", "stop_reasons", "pending_peak_samples",
        "rss_start_mib", "rss_early_max_mib", "rss_late_max_mib", "cpu_s", "host_us_per_sample",
        "loop_us_per_sample", "last_error")}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(stats, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
