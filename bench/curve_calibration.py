"""A copy of the shipped hopper-published calibration with a loaded-latency curve added, for
`policy validate`'s calibration sensitivity (docs/VALIDATION.md): how much the GPU half's
measurements move the replay's predictions.

    .venv/bin/python bench/curve_calibration.py OUT.json

The curve is not a measurement: a queueing fit (reports/queueing.py's form) with the reference's
unloaded HBM latency (650 cycles at 1980 MHz, ~330 ns) and a knee at 85% of peak, steep enough
that the step model's fixed point settles at u* ~ 0.80 instead of the flat reference's 1.0: the
size of change a measured curve with an early knee would make. The file says it is synthetic.
"""
from __future__ import annotations

import json
import sys

from sitsprof.calibration import load_calibration, validate_calibration


def main(argv) -> int:
    cal = load_calibration(None)
    l0, a, u_max, b = 650.0, 330.0, 0.85, 1.0  # cycles; a: see the docstring (u* ~ 0.80)
    pts = [{"bandwidth_fraction": u, "quantiles": {"p50": l0 + a * ((1 - u / u_max) ** -b - 1)}}
           for u in (0.1, 0.3, 0.5, 0.7, 0.8)]
    cal["loaded_latency"] = [{"tier": "hbm", "unit": "cycles", "points": pts,
                              "peak_gbs": cal["bandwidth"]["hbm_read_gbs"],
                              "fit_p50": {"l0": l0, "a": a, "u_max": u_max, "b": b, "rmse": 0.0, "r2": 1.0,
                                          "n": len(pts)}}]
    cal["name"] = "hopper-published-with-knee-0.85"
    cal["label"] = ("NOT MEASURED: hopper-published with a made-up loaded-latency curve (knee at 85% of peak), "
                    "for the calibration sensitivity of policy validate")
    validate_calibration(cal)
    with open(argv[1], "w") as fh:
        json.dump(cal, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
