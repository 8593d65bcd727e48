"""The per-step overhead of the profiled step model, fitted on one system's silicon rows and
reported on the other's (the issue's rule for any constant chosen by looking at measured rows).

    .venv/bin/python bench/validate_overhead.py SILICON_CSV OUT.json [ms ...] [--backend sglang]

Replays the vLLM aggregated H100/H200 rows once per candidate overhead (default 0.5 1 2 3 ms),
then for each half (h200_sxm, h100_sxm) picks the candidate with the least median |TPOT error|
on that half and reports both halves' medians at it. Writes every run's rows and the fit.
"""
from __future__ import annotations

import json
import sys

import numpy as np

from sitsprof.policies.serving.silicon import read_silicon
from sitsprof.policies.serving.validate import selected, validate


def med(rows, key):
    v = [abs(r[key]) for r in rows if r.get(key) is not None]
    return float(np.median(v)) if v else None


def main(argv) -> int:
    argv = list(argv)
    backend = "vllm"
    if "--backend" in argv:  # the SGLang rows (policy validate --backend sglang)
        i = argv.index("--backend")
        backend = argv[i + 1]
        del argv[i:i + 2]
    silicon, out = argv[1], argv[2]
    grid = [float(x) for x in argv[3:]] or [0.5, 1.0, 2.0, 3.0]
    rows = selected(read_silicon(silicon), backend=backend)
    runs = {}
    for ms in grid:
        doc = validate(rows, overhead_s=ms * 1e-3, backend=backend)
        runs[ms] = [r for r in doc["rows"] if "predicted_tpot_ms" in r]
        print(f"overhead {ms} ms: median |TPOT| {med(runs[ms], 'tpot_error'):.3f}, "
              f"|TTFT| {med(runs[ms], 'ttft_error'):.3f}", file=sys.stderr)
    # the shipped TTFT statistic (validate.BENCH_RUN; the "after first round" keys keep their old name:
    # since bench/validate_ttft.py it is 12 rounds timed from the start burst) beside every request's mean
    for ms in grid:
        for r in runs[ms]:
            p = r.get("predicted_ttft_ms")
            r["ttft_after_first_round_error"] = p / r["measured_ttft_ms"] - 1 if p is not None else None
            q = r.get("predicted_ttft_every_request_ms")
            r["ttft_error"] = q / r["measured_ttft_ms"] - 1 if q is not None else None
    fit = {}
    for fit_on, report_on in (("h200_sxm", "h100_sxm"), ("h100_sxm", "h200_sxm")):
        best = min(grid, key=lambda ms: med([r for r in runs[ms] if r["system"] == fit_on], "tpot_error"))
        res = {}
        for half in (fit_on, report_on):
            sub = [r for r in runs[best] if r["system"] == half]
            res[half] = {"rows": len(sub), "median_abs_tpot_error": med(sub, "tpot_error"),
                         "median_abs_ttft_error": med(sub, "ttft_error"),
                         "median_abs_ttft_after_first_round_error": med(sub, "ttft_after_first_round_error")}
        # which TTFT statistic (every request, or after the first round) fits the fit half better
        sub = [r for r in runs[best] if r["system"] == fit_on]
        res["ttft_statistic"] = ("after first round" if med(sub, "ttft_after_first_round_error")
                                 < med(sub, "ttft_error") else "every request")
        fit[f"fit on {fit_on}"] = {"overhead_ms": best, **res}
    with open(out, "w") as fh:
        json.dump({"grid_ms": grid, "fit": fit, "runs": {str(k): v for k, v in runs.items()}}, fh, indent=1)
    print(json.dumps(fit, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
