"""Latencies read out of a calibration in the unit the cost model prices in (nanoseconds),
whatever unit the file recorded them in.
"""
from __future__ import annotations

from .errors import CalibrationError
from .schema import QUANTILE_KEYS


def latency_ns(calibration: dict, tier: str, quantile: str = "p50") -> float:
    """A tier's latency quantile in nanoseconds (cycles are converted with clocks.sm_mhz).

    Falls back to the highest quantile present below the one asked for (a published file
    may only give a median).
    """
    entry = calibration["latency"].get(tier)
    if entry is None:
        raise CalibrationError(f"latency.{tier}", "is null in this calibration")
    q = entry["quantiles"]
    if quantile not in q:
        order = QUANTILE_KEYS[: QUANTILE_KEYS.index(quantile) + 1]
        quantile = [k for k in order if k in q][-1]
    value = float(q[quantile])
    if entry["unit"] == "cycles":
        value = value * 1e3 / float(calibration["clocks"]["sm_mhz"])
    return value
