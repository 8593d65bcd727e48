"""The calibration as one typed object: read and validated once at the edge (the CLI's
``--calibration``, a library caller's first use), then handed down as is.

Before this object, the calibration crossed the policy half as ``None | path | dict``: each
(policy, capacity) of a sweep opened and validated the file again, and three modules read it
by key (the classic cost model, the serving step model and the tier-latency helper). Now the
figures those models price with are attributes here, each derived in one place:

- ``hbm_read_bps``, ``hbm_write_bps`` (the read figure when the file has none), ``host_bps``
  (0 when the file has none), ``hbm_latency_s`` (the HBM P50), ``flops`` (dense BF16 FLOP/s
  times the achieved fraction; ``None`` when the file has no ``compute`` section);
- ``sm_mhz``, ``sm_count`` (``None`` when the device does not say);
- ``hbm_curve``: the HBM loaded-latency curve (`LoadedCurve`), ``None`` when there is none;
- ``delay_unit_s`` and ``delay_levels`` (`DelayLevel`): the replacement-delay section;
- ``latency_ns(tier, quantile)``: any tier's latency in nanoseconds, cycles converted.

`to_json` gives the document back (a copy; `from_json(to_json())` is the same calibration),
so a calibration can still be written, shown or sent to another process as JSON. The object
pickles, so worker processes get it whole rather than a path to read again.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CalibrationError
from .io import load_calibration
from .schema import QUANTILE_KEYS, validate_calibration

__all__ = ["Calibration", "DelayLevel", "LoadedCurve", "QueueingFit", "latency_ns", "queueing_curve"]


def queueing_curve(u, l0: float, a: float, u_max: float, b: float = 1.0):
    """latency(u) = l0 + a ((1 - u/u_max)^-b - 1); inf where u >= u_max.

    The loaded-latency form a calibration carries (``fit_p50``/``fit_p99``): written here, at
    the seam, once; reports/queueing.py fits it to a run, the step model reads its parameters.
    numpy is imported here, not with the module: reading a calibration does not need it."""
    import numpy as np

    u = np.asarray(u, dtype=np.float64)
    rho = u / u_max
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(rho < 1.0, (1.0 - np.minimum(rho, 1.0)) ** -b - 1.0, np.inf)
    return l0 + a * g


@dataclass(frozen=True)
class QueueingFit:
    """A curve's queueing fit, latency(u) = l0 + a ((1 - u / u_max)^-b - 1), in the curve's unit.

    What the file holds; reports/queueing.py's fit result is this plus its goodness of fit."""

    l0: float
    a: float
    u_max: float
    b: float

    def predict(self, u):
        """Latency predicted at load `u`, an array (inf at or beyond u_max)."""
        return queueing_curve(u, self.l0, self.a, self.u_max, self.b)

    def load_at(self, latency: float) -> float:
        """The load at which the curve reaches `latency` (NaN below L0 or when a = 0)."""
        if self.a <= 0 or latency < self.l0:
            return float("nan")
        return float(self.u_max * (1.0 - (1.0 + (latency - self.l0) / self.a) ** (-1.0 / self.b)))


@dataclass(frozen=True)
class LoadedCurve:
    """The HBM loaded-latency curve: P50 latency per fraction of `peak_bps` (seconds)."""

    #: seconds per unit of the file's latency figures (cycles at sm_mhz, or ns)
    unit_s: float
    #: what the fractions are of; ``peak_given`` False: taken of ``bandwidth.hbm_read_gbs``
    peak_bps: float
    peak_given: bool
    fractions: tuple[float, ...]
    p50_s: tuple[float, ...]
    fit_p50: QueueingFit | None


@dataclass(frozen=True)
class DelayLevel:
    """One load level of the replacement-delay section (docs/replacement-delay.md), figures in
    the section's unit except the residency, which the file gives in nanoseconds."""

    bandwidth_fraction: float
    residency_time_ns: float | None
    #: (age_ns, resident_fraction) points that carry an age
    residency_curve: tuple[tuple[float, float], ...]
    #: quantile -> delay; ``None``: no re-touch missed at this level
    delay_quantiles: dict | None
    #: (edges, counts) of the delay histogram, or ``None``
    delay_histogram: tuple[tuple[float, ...], tuple[int, ...]] | None


def _tier_latencies(doc: dict, sm_mhz: float) -> dict[str, dict[str, float]]:
    """tier -> quantile -> nanoseconds (cycles * 1e3 / MHz, in that order: the same floats as before)."""
    out = {}
    for tier, entry in doc["latency"].items():
        if entry is None:
            continue
        cycles = entry["unit"] == "cycles"
        out[tier] = {q: float(v) * 1e3 / sm_mhz if cycles else float(v) for q, v in entry["quantiles"].items()}
    return out


def _curve(doc: dict, sm_mhz: float) -> LoadedCurve | None:
    curve = next((c for c in doc.get("loaded_latency", []) if c.get("tier") == "hbm"), None)
    if curve is None:
        return None
    unit_s = (1e-6 / sm_mhz) if curve["unit"] == "cycles" else 1e-9
    fit = curve.get("fit_p50")
    return LoadedCurve(
        unit_s=unit_s,
        peak_bps=float(curve.get("peak_gbs", doc["bandwidth"]["hbm_read_gbs"])) * 1e9,
        peak_given="peak_gbs" in curve,
        fractions=tuple(float(p["bandwidth_fraction"]) for p in curve["points"]),
        p50_s=tuple(float(p["quantiles"]["p50"]) * unit_s for p in curve["points"]),
        fit_p50=None if fit is None else QueueingFit(float(fit["l0"]), float(fit["a"]), float(fit["u_max"]),
                                                     float(fit["b"])),
    )


def _levels(doc: dict) -> tuple[DelayLevel, ...]:
    rd = doc.get("replacement_delay") or {}
    levels = []
    for lv in rd.get("levels") or ():
        residency = lv["residency"]
        delay = lv["delay"]
        hist = (delay or {}).get("histogram")
        levels.append(DelayLevel(
            bandwidth_fraction=float(lv["bandwidth_fraction"]),
            residency_time_ns=None if residency.get("time_ns") is None else float(residency["time_ns"]),
            residency_curve=tuple((float(p["age_ns"]), float(p["resident_fraction"]))
                                  for p in residency.get("curve", []) if "age_ns" in p),
            delay_quantiles=None if delay is None else dict(delay["quantiles"]),
            delay_histogram=None if not hist else (tuple(float(e) for e in hist["edges"]),
                                                   tuple(int(c) for c in hist["counts"])),
        ))
    return tuple(levels)


@dataclass(frozen=True, eq=False)
class Calibration:
    """A validated calibration (schema v1) and the figures derived from it (module docstring).
    Build it with `load`, `from_json` or `of`; equal when the documents are."""

    name: str
    #: provenance.kind, except ``synthetic`` whenever the file says ``synthetic: true``
    kind: str
    sm_mhz: float
    sm_count: float | None
    hbm_read_bps: float
    hbm_write_bps: float
    host_bps: float
    hbm_latency_s: float
    flops: float | None
    hbm_curve: LoadedCurve | None
    #: seconds per unit of the replacement-delay figures (0 when the section is absent)
    delay_unit_s: float
    delay_levels: tuple[DelayLevel, ...]
    _latencies: dict = field(repr=False)
    _doc: dict = field(repr=False)

    # -- building ------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> Calibration:
        """Read and validate a calibration file; ``None`` or a shipped name: that reference."""
        return cls._build(load_calibration(path))

    @classmethod
    def from_json(cls, obj: Any) -> Calibration:
        """Validate a calibration document (a dict, as `json.loads` gives it)."""
        return cls._build(copy.deepcopy(validate_calibration(obj)))

    @classmethod
    def of(cls, value: Calibration | dict | str | os.PathLike | None) -> Calibration:
        """`value` as a Calibration: itself when it is one (nothing read again), else loaded
        (None, a path or a shipped name) or validated (a dict). For library callers; the CLI
        builds its one object with `load`."""
        if isinstance(value, Calibration):
            return value
        if isinstance(value, dict):
            return cls.from_json(value)
        if value is None or isinstance(value, (str, os.PathLike)):
            return cls.load(value)
        raise CalibrationError("(calibration)", f"expected a Calibration, a path or a dict, got "
                                                f"{type(value).__name__}")

    @classmethod
    def _build(cls, doc: dict) -> Calibration:
        sm_mhz = float(doc["clocks"]["sm_mhz"])
        bw = doc["bandwidth"]
        compute = doc.get("compute")
        sm_count = doc["device"].get("sm_count")
        latencies = _tier_latencies(doc, sm_mhz)
        rd = doc.get("replacement_delay")
        return cls(
            name=doc["name"],
            kind="synthetic" if doc.get("synthetic") is True else str(doc["provenance"]["kind"]),
            sm_mhz=sm_mhz,
            sm_count=None if sm_count is None else float(sm_count),
            hbm_read_bps=float(bw["hbm_read_gbs"]) * 1e9,
            hbm_write_bps=float(bw.get("hbm_write_gbs", bw["hbm_read_gbs"])) * 1e9,
            host_bps=float(bw.get("host_to_device_gbs", 0.0)) * 1e9,
            hbm_latency_s=latencies["hbm"]["p50"] * 1e-9,
            flops=None if compute is None
            else float(compute["bf16_dense_tflops"]) * 1e12 * float(compute["achieved_fraction"]),
            hbm_curve=_curve(doc, sm_mhz),
            delay_unit_s=0.0 if not rd else ((1e-6 / sm_mhz) if rd["unit"] == "cycles" else 1e-9),
            delay_levels=_levels(doc),
            _latencies=latencies,
            _doc=doc,
        )

    # -- reading ---------------------------------------------------------------------------
    def latency_ns(self, tier: str, quantile: str = "p50") -> float:
        """A tier's latency quantile in nanoseconds (cycles converted at ``sm_mhz``); falls back
        to the highest quantile present below the one asked for (a published file may only
        give a median)."""
        q = self._latencies.get(tier)
        if q is None:
            raise CalibrationError(f"latency.{tier}", "is null in this calibration")
        if quantile not in q:
            order = QUANTILE_KEYS[: QUANTILE_KEYS.index(quantile) + 1]
            quantile = [k for k in order if k in q][-1]
        return q[quantile]

    def require_flops(self) -> float:
        """`flops`, or the error saying the file lacks what prices a recompute."""
        if self.flops is None:
            raise CalibrationError("compute", "the cost model needs compute.bf16_dense_tflops to price recompute")
        return self.flops

    def to_json(self) -> dict:
        """The validated document (a copy: the object stays as it was built)."""
        return copy.deepcopy(self._doc)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the document atomically (`write_calibration`)."""
        from .io import write_calibration

        return write_calibration(self._doc, path)

    def __eq__(self, other) -> bool:
        return isinstance(other, Calibration) and self._doc == other._doc

    def __hash__(self) -> int:
        return hash(self.name)


def latency_ns(calibration: Calibration | dict, tier: str, quantile: str = "p50") -> float:
    """`Calibration.latency_ns` of a Calibration or a calibration document."""
    return Calibration.of(calibration).latency_ns(tier, quantile)
