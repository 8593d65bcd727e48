"""Median |error| and rows off by more than 2x, replay beside AIConfigurator, by model, system and TP
(docs/VALIDATION.md's MoE and SGLang tables), for the rows whose model contains one of the
given words (all rows without any):

    .venv/bin/sitsprof policy validate --silicon silicon_sample.csv --json > v.json
    .venv/bin/python bench/validation_split.py v.json MiniMax Qwen3-235B
"""
from __future__ import annotations

import collections
import json
import sys

import numpy as np


def _ratio(r, who, k):
    p, m = r.get(f"{who}_{k}_ms"), r[f"measured_{k}_ms"]
    return max(p / m, m / p) if p and m else None


def line(label, rows) -> str:
    both = [r for r in rows if r.get("aic_tpot_ms") is not None]

    def med(rs, key):
        v = [abs(r[key]) for r in rs if r.get(key) is not None]
        return f"{100 * np.median(v):.1f}%" if v else "-"

    def over(rs, who, k):
        return sum(1 for r in rs if (_ratio(r, who, k) or 0) > 2)

    return (f"| {label} | {len(rows)} | {med(rows, 'ttft_error')} | {med(rows, 'tpot_error')} | "
            f"{over(rows, 'predicted', 'ttft')} / {over(rows, 'predicted', 'tpot')} | {len(both)} | "
            f"{med(both, 'ttft_error')} / {med(both, 'aic_ttft_error')} | {med(both, 'tpot_error')} / "
            f"{med(both, 'aic_tpot_error')} | {over(both, 'aic', 'ttft')} / {over(both, 'aic', 'tpot')} |")


def main(argv) -> int:
    with open(argv[1]) as fh:
        doc = json.load(fh)
    words = argv[2:]
    rows = [r for r in doc["rows"] if r.get("predicted_tpot_ms") is not None
            and (not words or any(w in r["model"] for w in words))]
    print("| rows | n | TTFT | TPOT | > 2x (TTFT / TPOT) | with AIC | TTFT replay / AIC | TPOT replay / AIC "
          "| AIC > 2x (TTFT / TPOT) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["model"], r["system"], r["tp"])].append(r)
    for (model, system, tp), rs in sorted(groups.items()):
        print(line(f"{model} {system} TP {tp}", rs))
    for system in sorted({r["system"] for r in rows}):
        print(line(system, [r for r in rows if r["system"] == system]))
    print(line("all", rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
