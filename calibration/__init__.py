"""The calibration file: the one seam between the measuring half (probes, collectors,
reports) and the policy half of sitsprof.

`reports` builds calibrations from runs and writes them through this package; `policies`
reads them through it, as one typed `Calibration` (typed.py) loaded and validated once.
It imports nothing of sitsprof but `common`, so neither half has to
import the other to agree on the file.
"""
from __future__ import annotations

from .errors import CalibrationError
from .io import DATA_DIR, REFERENCE, load_calibration, reference_path, write_calibration
from .schema import (
    BANDWIDTH_KEYS,
    LATENCY_UNITS,
    PROVENANCE_KINDS,
    QUANTILE_KEYS,
    SCHEMA,
    SCHEMA_VERSION,
    TIERS,
    validate_calibration,
)
from .typed import Calibration, DelayLevel, LoadedCurve, QueueingFit, latency_ns, queueing_curve

__all__ = [
    "BANDWIDTH_KEYS",
    "DATA_DIR",
    "LATENCY_UNITS",
    "PROVENANCE_KINDS",
    "QUANTILE_KEYS",
    "REFERENCE",
    "SCHEMA",
    "SCHEMA_VERSION",
    "TIERS",
    "Calibration",
    "CalibrationError",
    "DelayLevel",
    "LoadedCurve",
    "QueueingFit",
    "latency_ns",
    "queueing_curve",
    "load_calibration",
    "reference_path",
    "validate_calibration",
    "write_calibration",
]
