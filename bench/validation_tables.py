"""Markdown tables of a `policy validate --json` document by model and system (docs/VALIDATION.md).

    .venv/bin/sitsprof policy validate --json > v.json && .venv/bin/python bench/validation_tables.py v.json
"""
from __future__ import annotations

import collections
import json
import sys

import numpy as np


def med(rows, key):
    v = [abs(r[key]) for r in rows if r.get(key) is not None]
    return f"{100 * np.median(v):.1f}%" if v else "-"


def main(argv) -> int:
    if argv[1] == "-":
        doc = json.load(sys.stdin)
    else:
        with open(argv[1]) as fh:
            doc = json.load(fh)
    rows = [r for r in doc["rows"] if r.get("predicted_tpot_ms") is not None]
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["model"], r["system"], r["precision"] or "bf16")].append(r)
    print("| model | system | precision | rows | TTFT replay | TTFT AIC | TPOT replay | TPOT AIC | worst ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (model, system, prec), g in sorted(groups.items()) + [(("all", "", ""), rows)]:
        worst = max(max(r[f"predicted_{k}_ms"] / r[f"measured_{k}_ms"], r[f"measured_{k}_ms"] / r[f"predicted_{k}_ms"])
                    for r in g for k in ("ttft", "tpot"))
        print(f"| {model} | {system} | {prec} | {len(g)} | {med(g, 'ttft_error')} | {med(g, 'aic_ttft_error')} | "
              f"{med(g, 'tpot_error')} | {med(g, 'aic_tpot_error')} | {worst:.2f}x |")
    reasons = collections.Counter(r["reason"] for r in doc["rows"] if "reason" in r)
    print()
    print("| rows not replayed | reason |")
    print("| --- | --- |")
    for why, n in reasons.most_common():
        print(f"| {n} | {why} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
