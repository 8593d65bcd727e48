"""How the silicon table's benchmarks ran, as far as TTFT shows it: the choices fitted on one
system's rows and reported on the other's (the issue's rule for any choice made by looking at
measured rows; docs/VALIDATION.md, "TTFT").

    .venv/bin/python bench/validate_ttft.py SILICON_CSV OUT.json

Replays the vLLM aggregated H100/H200 rows once per candidate `BenchRun` (validate.py,
`CANDIDATES`): the step token budget rule (vLLM's default 8192, or AIConfigurator's generator
rule batch + ISL + 1500), the mean frontend delay (0 to 8 ms) and the TTFT statistic: the
rounds a client runs and the leading ones left out (4 less the first; AIConfigurator's aiperf
template, 22 less 2 of warm-up; 8 to 20 with the start's burst kept, a run without warm-up;
the long runs only for a few candidates, they take minutes each), all at the shipped per-step
overhead. For each half (h200_sxm, h100_sxm) it picks the candidate with the
least median |TTFT error| on that half (ties: fewer rows off by more than 2x) and reports both
halves at it. Writes every candidate's per-half figures and the two picks.
"""
from __future__ import annotations

import json
import sys

import numpy as np

from sitsprof.policies.serving.silicon import read_silicon
from sitsprof.policies.serving.validate import BenchRun, selected, validate

#: (budget rule, mean frontend delay ms, rounds, warm-up rounds)
CANDIDATES = (("vllm", 0.0, 4, 1), ("vllm", 2.0, 4, 1), ("vllm", 0.0, 12, 0),
              ("aic", 0.0, 4, 1), ("aic", 1.0, 4, 1), ("aic", 2.0, 4, 1), ("aic", 4.0, 4, 1), ("aic", 8.0, 4, 1),
              ("aic", 2.0, 22, 2),
              ("aic", 1.0, 8, 0), ("aic", 1.0, 12, 0), ("aic", 4.0, 12, 0), ("aic", 1.0, 16, 0), ("aic", 1.0, 20, 0))
HALVES = ("h200_sxm", "h100_sxm")


def figures(rows: list[dict]) -> dict:
    """Median |TTFT| and |TPOT| error and the rows whose TTFT is off by more than 2x."""
    pred = [r for r in rows if r.get("predicted_ttft_ms") is not None]
    ratio = [r["predicted_ttft_ms"] / r["measured_ttft_ms"] for r in pred]
    return {"rows": len(pred),
            "median_abs_ttft_error": float(np.median([abs(x - 1) for x in ratio])) if ratio else None,
            "median_abs_tpot_error": (float(np.median([abs(r["tpot_error"]) for r in pred])) if pred else None),
            "ttft_over_2x": int(sum(1 for x in ratio if x > 2 or x < 0.5))}


def main(argv) -> int:
    silicon, out = argv[1], argv[2]
    rows = selected(read_silicon(silicon))
    runs = []
    for budget, delay, rounds, warm in CANDIDATES:
        bench = BenchRun(rounds=rounds, warmup_rounds=warm, frontend_delay_s=delay * 1e-3, batched_tokens=budget)
        doc = validate(rows, bench=bench)
        per = {h: figures([r for r in doc["rows"] if r["system"] == h]) for h in HALVES}
        per["all"] = figures(doc["rows"])
        runs.append({"batched_tokens": budget, "frontend_delay_ms": delay, "rounds": rounds, "warmup_rounds": warm,
                     **per})
        print(f"{budget:4} {delay:3g} ms {rounds:2}/{warm}: " + "  ".join(
            f"{h} |TTFT| {per[h]['median_abs_ttft_error']:.3f} >2x {per[h]['ttft_over_2x']}" for h in (*HALVES, "all")),
            file=sys.stderr)
    fit = {}
    for fit_on, report_on in (HALVES, HALVES[::-1]):
        best = min(runs, key=lambda c: (c[fit_on]["median_abs_ttft_error"], c[fit_on]["ttft_over_2x"]))
        fit[f"fit on {fit_on}"] = {k: best[k] for k in ("batched_tokens", "frontend_delay_ms", "rounds",
                                                           "warmup_rounds")}
        fit[f"fit on {fit_on}"].update({fit_on: best[fit_on], f"{report_on} (held out)": best[report_on],
                                        "all": best["all"]})
    with open(out, "w") as fh:
        json.dump({"fit": fit, "candidates": runs}, fh, indent=1)
    print(json.dumps(fit, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
