"""Report generation for a run of 10 million latency samples: target < 10 s, file < 10 MB.

    .venv/bin/python bench/bench_report.py [--samples 10000000] [--keep DIR]

Builds a synthetic run directory (not timed; half the samples in the latency ladder, half in
the loaded-latency probe, plus the TLB, bandwidth and sampler tables), then times
`sitsprof report` (analysis with exact quantiles over every sample + HTML) and `sitsprof
calibrate` in this process. Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--keep", type=Path, default=None, help="write the run and report here and keep them")
    args = ap.parse_args(argv)

    from sitsprof.reports.fromrun import calibrate
    from sitsprof.reports.report import write_report
    from sitsprof.reports.synthetic import make_synthetic_run

    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        t0 = time.perf_counter()
        run = make_synthetic_run(where, f"bench-{args.samples}-{os.getpid()}", samples=args.samples)
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = write_report([run.path], where / "report.html")
        report_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        calibrate(run.path, where / "calibration.json")
        calibrate_s = time.perf_counter() - t0
        size = out.stat().st_size
        rows = sum(v for k, v in run.meta["tables"]["probes"].items() for v in [v["rows"]])
        result = {"latency_samples": int(rows), "build_run_s": round(built, 2), "report_s": round(report_s, 2),
                  "calibrate_s": round(calibrate_s, 2), "report_mb": round(size / 1e6, 2),
                  "cpus": os.cpu_count(), "ok": report_s < 10 and size < 10e6}
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
