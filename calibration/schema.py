"""Calibration files, schema v1: the GPU figures the policy engine's cost model runs on.

A calibration file is JSON. It says which device and clocks it describes, where its numbers
came from (measured here by the probes, or published elsewhere with citations), and:

- ``latency``: one entry per tier (``l1``, ``l2_near``, ``l2_far``, ``hbm``, ``tlb_miss``),
  each ``{"unit": "cycles"|"ns", "quantiles": {"p50": .., "p90": .., "p99": ..},
  "histogram": {"edges": [...], "counts": [...]} | null, "source": "<source id>"}``, or
  ``null`` when nothing is known for that tier (then ``provenance.missing`` must say why).
- ``bandwidth``: GB/s figures; ``hbm_read_gbs`` is required, others optional.
- ``loaded_latency``: curves of latency quantiles per fraction of peak bandwidth; a curve may
  say the peak its fractions are of (``peak_gbs``) and carry its queueing fit
  (``fit_p50``/``fit_p99``: ``l0``, ``a``, ``u_max``, ``b`` of reports/queueing.py, validated).
- ``replacement_delay`` (optional; files without it load): per load level the bandwidth
  fraction (0..1.5), the same-load hit, the L2 residency (``time_ns``, ``bound``, ``curve``)
  and the delay distribution of missed re-touches (quantiles p50..p999, non-decreasing, p50
  required, none below minus the hit; histogram) in the section's ``unit`` (cycles or ns);
  docs/calibration.md and docs/replacement-delay.md.
- ``compute`` (optional): dense BF16 TFLOPS and the fraction of it prefill achieves.

``validate_calibration`` refuses a bad file with a ``CalibrationError`` whose message starts
with the dotted path of the offending field (``latency.hbm.quantiles.p99: ...``).

Every figure must also be physically plausible (`RANGES`, documented with the reasons in
docs/calibration.md): the cost model multiplies and divides these numbers, so a
``hbm_read_gbs`` of 5e-324 or an ``sm_mhz`` of 1e-308 is not a fast or slow GPU but an
overflow to infinity, and a ``--json`` document that cannot be JSON. The bounds are wide
(a decade or more past any GPU sitsprof knows) so they catch typos and corruption, never a
real device:

- bandwidth 1 GB/s .. 100 TB/s: a PCIe Gen1 x1 link moves ~0.25 GB/s, nothing a cost model
  prices is slower than 1 GB/s; H200 HBM3e is 4.8 TB/s and its L2 a few tens of TB/s;
- latency 1 .. 1e6 cycles or ns: an L1 hit is ~30 cycles, a loaded TLB miss a few thousand;
  a million cycles (0.5 ms at 2 GHz) is a preempted thread, not a memory access; histogram
  edges may reach 1e9 (the timer wraps long before);
- clocks: SM 100 .. 5000 MHz (Hopper idles at ~345 MHz and boosts to 1980); memory
  100 .. 30000 MHz (HBM3e reports 3201, GDDR6X ~10500);
- device: sm_count 1 .. 10000, l2_bytes and memory_bytes 1 byte .. 1 PiB;
- compute: BF16 dense 0.1 .. 100000 TFLOPS (H200: 989).
"""
from __future__ import annotations

import math
from typing import Any

from .errors import CalibrationError

__all__ = [
    "BANDWIDTH_KEYS",
    "FIT_B_MAX",
    "FIT_KEYS",
    "FIT_U_MAX",
    "LATENCY_UNITS",
    "PROVENANCE_KINDS",
    "QUANTILE_KEYS",
    "RANGES",
    "RESIDENCY_BOUNDS",
    "RESIDENCY_NS_MAX",
    "SCHEMA",
    "SCHEMA_VERSION",
    "TIERS",
    "validate_calibration",
]

SCHEMA = "sitsprof.calibration"
SCHEMA_VERSION = 1
TIERS = ("l1", "l2_near", "l2_far", "hbm", "tlb_miss")
QUANTILE_KEYS = ("p50", "p90", "p95", "p99", "p999")
#: "synthetic": built by `calibrate` from a generated run (reports/synthetic.py), never a measurement
PROVENANCE_KINDS = ("measured", "published", "synthetic")
LATENCY_UNITS = ("cycles", "ns")
BANDWIDTH_KEYS = ("hbm_read_gbs", "hbm_write_gbs", "hbm_copy_gbs", "l2_read_gbs", "host_to_device_gbs")
#: queueing fits a loaded-latency curve may carry (reports/queueing.py), per quantile
FIT_KEYS = ("fit_p50", "fit_p99")
#: the fit searches u_max up to 50 x the highest load (fit_queueing's max_ratio) of at most 1.5
FIT_U_MAX = 75.0
FIT_B_MAX = 10.0  # the fitted exponent is searched in [0.2, 5]; 10 leaves room, catches corruption
#: an L2 line's residency: the L2 (tens of MB) turns over in microseconds under load and in
#: about a second at the slowest trickle anyone measures; 1e9 ns (1 s) is far beyond both
RESIDENCY_NS_MAX = 1e9
RESIDENCY_BOUNDS = ("=", "<", ">", "none")

#: (low, high, unit) of each kind of figure; the reasons are in the module docstring.
RANGES = {
    "bandwidth": (1.0, 100_000.0, "GB/s"),
    "latency": (1.0, 1e6, "cycles or ns"),
    "histogram_edge": (0.0, 1e9, "cycles or ns"),
    "sm_mhz": (100.0, 5000.0, "MHz"),
    "memory_mhz": (100.0, 30_000.0, "MHz"),
    "sm_count": (1.0, 10_000.0, "SMs"),
    "bytes": (1.0, 2.0**50, "bytes"),
    "tflops": (0.1, 100_000.0, "TFLOPS"),
}


def _fail(field: str, problem: str):
    raise CalibrationError(field, problem)


def _obj(value: Any, field: str) -> dict:
    if not isinstance(value, dict):
        _fail(field, f"must be an object, got {type(value).__name__}")
    return value


def _need(obj: dict, key: str, field: str) -> Any:
    if key not in obj:
        _fail(f"{field}.{key}" if field else key, "is required")
    return obj[key]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text)} characters)"


def _number(value: Any, field: str, minimum: float = 0.0, strict: bool = False, kind: str | None = None) -> float:
    """`value` as a float: a finite number above `minimum`, inside `RANGES[kind]` when given."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(field, f"must be a finite number, got {_shown(value)}")
    if isinstance(value, int) and abs(value) > 1e300:  # float() of it would overflow
        _fail(field, f"{_shown(value)} is out of range")
    if not math.isfinite(value):
        _fail(field, f"must be a finite number, got {value!r}")
    if value < minimum or (strict and value == minimum):
        _fail(field, f"must be {'>' if strict else '>='} {minimum:g}, got {value!r}")
    if kind is not None:
        low, high, unit = RANGES[kind]
        if not low <= value <= high:
            _fail(field, f"{value:g} is not a plausible {unit} figure (schema v1 takes {low:g} to {high:g}; "
                         "see docs/calibration.md)")
    return float(value)


def _string(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(field, f"must be a non-empty string, got {value!r}")
    return value


def _quantiles(value: Any, field: str) -> None:
    q = _obj(value, field)
    if "p50" not in q:
        _fail(f"{field}.p50", "is required")
    previous = None
    for key in QUANTILE_KEYS:
        if key in q:
            v = _number(q[key], f"{field}.{key}", strict=True, kind="latency")
            if previous is not None and v < previous[1]:
                _fail(f"{field}.{key}", f"{v:g} is below {previous[0]} = {previous[1]:g}; quantiles must not decrease")
            previous = (key, v)
    for key in q:
        if key not in QUANTILE_KEYS:
            _fail(f"{field}.{key}", f"unknown quantile; use one of {', '.join(QUANTILE_KEYS)}")


def _histogram(value: Any, field: str) -> None:
    if value is None:
        return
    h = _obj(value, field)
    edges = _need(h, "edges", field)
    counts = _need(h, "counts", field)
    if not isinstance(edges, list) or len(edges) < 2:
        _fail(f"{field}.edges", "must be a list of at least 2 bin edges")
    for i, e in enumerate(edges):
        _number(e, f"{field}.edges[{i}]", kind="histogram_edge")
        if i and e <= edges[i - 1]:
            _fail(f"{field}.edges[{i}]", "bin edges must increase strictly")
    if not isinstance(counts, list) or len(counts) != len(edges) - 1:
        _fail(f"{field}.counts", f"must be a list of len(edges)-1 = {len(edges) - 1} counts")
    for i, c in enumerate(counts):
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            _fail(f"{field}.counts[{i}]", f"must be a non-negative integer, got {_shown(c)}")
        if c > 2**63 - 1:
            _fail(f"{field}.counts[{i}]", f"{_shown(c)} is beyond the 64-bit integer range")


def _sources(provenance: dict) -> set[str]:
    ids = set()
    sources = provenance.get("sources", [])
    if not isinstance(sources, list):
        _fail("provenance.sources", "must be a list")
    for i, s in enumerate(sources):
        s = _obj(s, f"provenance.sources[{i}]")
        ids.add(_string(_need(s, "id", f"provenance.sources[{i}]"), f"provenance.sources[{i}].id"))
        _string(_need(s, "citation", f"provenance.sources[{i}]"), f"provenance.sources[{i}].citation")
    return ids


def _check_source(entry: dict, field: str, kind: str, ids: set[str]) -> None:
    if kind == "published":
        src = _string(_need(entry, "source", field), f"{field}.source")
        if src not in ids:
            _fail(f"{field}.source", f"{src!r} is not an id in provenance.sources")


def validate_calibration(obj: Any) -> dict:
    """Check a calibration object against schema v1; return it, or raise naming the field."""
    obj = _obj(obj, "(top level)")
    if obj.get("schema") != SCHEMA:
        _fail("schema", f"must be {SCHEMA!r}, got {obj.get('schema')!r}")
    if obj.get("schema_version") != SCHEMA_VERSION:
        _fail("schema_version", f"must be {SCHEMA_VERSION}, got {obj.get('schema_version')!r}")
    _string(_need(obj, "name", ""), "name")

    device = _obj(_need(obj, "device", ""), "device")
    _string(_need(device, "name", "device"), "device.name")
    for key in ("sm_count", "l2_bytes", "memory_bytes"):
        if key in device:
            _number(device[key], f"device.{key}", strict=True, kind="sm_count" if key == "sm_count" else "bytes")

    clocks = _obj(_need(obj, "clocks", ""), "clocks")
    _number(_need(clocks, "sm_mhz", "clocks"), "clocks.sm_mhz", strict=True, kind="sm_mhz")
    if "memory_mhz" in clocks:
        _number(clocks["memory_mhz"], "clocks.memory_mhz", strict=True, kind="memory_mhz")
    if not isinstance(_need(clocks, "locked", "clocks"), bool):
        _fail("clocks.locked", "must be true or false")

    provenance = _obj(_need(obj, "provenance", ""), "provenance")
    kind = _need(provenance, "kind", "provenance")
    if kind not in PROVENANCE_KINDS:
        _fail("provenance.kind", f"must be one of {', '.join(PROVENANCE_KINDS)}, got {kind!r}")
    _string(_need(provenance, "created_at", "provenance"), "provenance.created_at")
    ids = _sources(provenance)
    if kind == "published" and not ids:
        _fail("provenance.sources", "a published calibration must cite at least one source")
    if kind in ("measured", "synthetic"):
        _string(_need(provenance, "run", "provenance"), "provenance.run")
    # Synthetic figures are never shown as measured: the flags must agree with the kind.
    if obj.get("synthetic") is True and kind != "synthetic":
        _fail("provenance.kind", f"a calibration with synthetic: true must say kind 'synthetic', got {kind!r} "
                                 "(rebuild it with sitsprof calibrate)")
    if obj.get("measured") is True and kind != "measured":
        _fail("measured", f"cannot be true for provenance.kind {kind!r}: only a measured calibration is measured")
    missing = provenance.get("missing", {})
    if not isinstance(missing, dict):
        _fail("provenance.missing", "must be an object: tier -> why it is absent")

    latency = _obj(_need(obj, "latency", ""), "latency")
    for tier in TIERS:
        field = f"latency.{tier}"
        if tier not in latency:
            _fail(field, "is required (null, with provenance.missing saying why, when unknown)")
        entry = latency[tier]
        if entry is None:
            if tier == "hbm":
                _fail(field, "cannot be null: the cost model needs the HBM latency")
            if not isinstance(missing.get(tier), str):
                _fail(f"provenance.missing.{tier}", f"must say why {field} is null")
            continue
        entry = _obj(entry, field)
        unit = _need(entry, "unit", field)
        if unit not in LATENCY_UNITS:
            _fail(f"{field}.unit", f"must be one of {', '.join(LATENCY_UNITS)}, got {unit!r}")
        _quantiles(_need(entry, "quantiles", field), f"{field}.quantiles")
        if kind in ("measured", "synthetic") and entry.get("histogram") is None:
            _fail(f"{field}.histogram", "a measured calibration must carry the histogram")
        _histogram(entry.get("histogram"), f"{field}.histogram")
        _check_source(entry, field, kind, ids)
    for tier in latency:
        if tier not in TIERS:
            _fail(f"latency.{tier}", f"unknown tier; use {', '.join(TIERS)}")

    bandwidth = _obj(_need(obj, "bandwidth", ""), "bandwidth")
    _number(_need(bandwidth, "hbm_read_gbs", "bandwidth"), "bandwidth.hbm_read_gbs", strict=True, kind="bandwidth")
    for key, value in bandwidth.items():
        if key == "source":
            _check_source(bandwidth, "bandwidth", kind, ids)
        elif key == "note":
            continue
        elif key not in BANDWIDTH_KEYS:
            _fail(f"bandwidth.{key}", f"unknown figure; use {', '.join(BANDWIDTH_KEYS)}")
        else:
            _number(value, f"bandwidth.{key}", strict=True, kind="bandwidth")

    curves = _need(obj, "loaded_latency", "")
    if not isinstance(curves, list):
        _fail("loaded_latency", "must be a list of curves (empty when none are known)")
    for i, curve in enumerate(curves):
        field = f"loaded_latency[{i}]"
        curve = _obj(curve, field)
        if _need(curve, "tier", field) not in TIERS:
            _fail(f"{field}.tier", f"must be one of {', '.join(TIERS)}")
        if _need(curve, "unit", field) not in LATENCY_UNITS:
            _fail(f"{field}.unit", f"must be one of {', '.join(LATENCY_UNITS)}")
        points = _need(curve, "points", field)
        if not isinstance(points, list) or not points:
            _fail(f"{field}.points", "must be a non-empty list")
        last = -1.0
        for j, point in enumerate(points):
            pf = f"{field}.points[{j}]"
            point = _obj(point, pf)
            frac = _number(_need(point, "bandwidth_fraction", pf), f"{pf}.bandwidth_fraction")
            if frac > 1.5:
                _fail(f"{pf}.bandwidth_fraction", f"{frac:g} is not a fraction of peak (0..1.5)")
            if frac <= last:
                _fail(f"{pf}.bandwidth_fraction", "fractions must increase along the curve")
            last = frac
            _quantiles(_need(point, "quantiles", pf), f"{pf}.quantiles")
        if "peak_gbs" in curve:  # what the fractions are of (the saturator's best); absent: bandwidth.hbm_read_gbs
            _number(curve["peak_gbs"], f"{field}.peak_gbs", strict=True, kind="bandwidth")
        for key in FIT_KEYS:
            if curve.get(key) is not None:
                _queueing_fit(curve[key], f"{field}.{key}")

    if "compute" in obj:
        compute = _obj(obj["compute"], "compute")
        _number(_need(compute, "bf16_dense_tflops", "compute"), "compute.bf16_dense_tflops", strict=True,
                kind="tflops")
        frac = _number(_need(compute, "achieved_fraction", "compute"), "compute.achieved_fraction", strict=True)
        if frac > 1:
            _fail("compute.achieved_fraction", f"must be at most 1, got {frac:g}")
        _check_source(compute, "compute", kind, ids)
    if "replacement_delay" in obj:
        _replacement_delay(obj["replacement_delay"])
    return obj


def _queueing_fit(value: Any, field: str) -> None:
    """A loaded-latency curve's queueing fit (reports/queueing.py): latency(u) = l0 + a *
    ((1 - u / u_max) ** -b - 1) in the curve's unit, u a fraction of peak bandwidth."""
    fit = _obj(value, field)
    _number(_need(fit, "l0", field), f"{field}.l0", strict=True, kind="latency")
    a = _number(_need(fit, "a", field), f"{field}.a")
    if a > RANGES["latency"][1]:
        _fail(f"{field}.a", f"{a:g} is not a plausible latency scale (0 to {RANGES['latency'][1]:g})")
    u_max = _number(_need(fit, "u_max", field), f"{field}.u_max", strict=True)
    if u_max > FIT_U_MAX:
        _fail(f"{field}.u_max", f"{u_max:g} is not a fraction of peak the fit searches (0 to {FIT_U_MAX:g})")
    b = _number(_need(fit, "b", field), f"{field}.b", strict=True)
    if b > FIT_B_MAX:
        _fail(f"{field}.b", f"{b:g} is not a plausible queueing exponent (0 to {FIT_B_MAX:g}; 1 is M/M/1)")


def _delay_quantiles(value: Any, field: str, hit: float) -> None:
    """Replacement-delay quantiles: p50 required, known keys, non-decreasing, each at least
    -`hit` (a missed line's latency minus the same-load hit cannot be below minus that hit) and at
    most the latency range."""
    q = _obj(value, field)
    if "p50" not in q:
        _fail(f"{field}.p50", "is required")
    for key in q:
        if key not in QUANTILE_KEYS:
            _fail(f"{field}.{key}", f"unknown quantile; use one of {', '.join(QUANTILE_KEYS)}")
    previous = None
    for key in QUANTILE_KEYS:
        if key in q:
            v = _number(q[key], f"{field}.{key}", minimum=-hit)
            if v > RANGES["latency"][1]:
                _fail(f"{field}.{key}", f"{v:g} is not a plausible delay (at most {RANGES['latency'][1]:g})")
            if previous is not None and v < previous[1]:
                _fail(f"{field}.{key}", f"{v:g} is below {previous[0]} = {previous[1]:g}; quantiles must not decrease")
            previous = (key, v)


def _replacement_delay(value: Any) -> None:
    """``replacement_delay`` (optional; docs/replacement-delay.md): ``unit``, and ``levels``, each
    with a distinct ``level``, ``bandwidth_fraction`` (0..1.5), ``hit_cycles`` (a latency),
    ``residency`` (``time_ns`` in [0, 1e9] or null, ``bound`` one of ``RESIDENCY_BOUNDS``,
    ``curve`` of ``resident_fraction`` in 0..1 at non-decreasing ``age_ns``) and ``delay`` (null
    when no re-touch missed, else ``quantiles`` p50..p999 (a low one may be negative, a miss
    faster than the median hit, but never below minus that hit), ``samples`` and ``histogram``)."""
    field = "replacement_delay"
    entry = _obj(value, field)
    if _need(entry, "unit", field) not in LATENCY_UNITS:
        _fail(f"{field}.unit", f"must be one of {', '.join(LATENCY_UNITS)}")
    levels = _need(entry, "levels", field)
    if not isinstance(levels, list):
        _fail(f"{field}.levels", "must be a list")
    seen: set[int] = set()
    for i, lv in enumerate(levels):
        f = f"{field}.levels[{i}]"
        lv = _obj(lv, f)
        level = _need(lv, "level", f)
        if isinstance(level, bool) or not isinstance(level, int) or level < 0:
            _fail(f"{f}.level", f"must be a non-negative integer, got {level!r}")
        if level in seen:
            _fail(f"{f}.level", f"level {level} appears twice; one entry per load level")
        seen.add(level)
        frac = _number(_need(lv, "bandwidth_fraction", f), f"{f}.bandwidth_fraction")
        if frac > 1.5:
            _fail(f"{f}.bandwidth_fraction", f"{frac:g} is not a fraction of peak (0..1.5)")
        hit = _number(_need(lv, "hit_cycles", f), f"{f}.hit_cycles", strict=True, kind="latency")
        residency = _obj(_need(lv, "residency", f), f"{f}.residency")
        if residency.get("time_ns") is not None:
            t = _number(residency["time_ns"], f"{f}.residency.time_ns")
            if t > RESIDENCY_NS_MAX:
                _fail(f"{f}.residency.time_ns", f"{t:g} ns is not a plausible L2 residency (0 to "
                                                f"{RESIDENCY_NS_MAX:g} ns: the L2 turns over in milliseconds)")
        if residency.get("bound", "=") not in RESIDENCY_BOUNDS:
            _fail(f"{f}.residency.bound", f"must be one of {', '.join(RESIDENCY_BOUNDS)}, got {residency['bound']!r}")
        curve = residency.get("curve", [])
        if not isinstance(curve, list):
            _fail(f"{f}.residency.curve", "must be a list of points")
        last_age = -1.0
        for j, point in enumerate(curve):
            pf = f"{f}.residency.curve[{j}]"
            point = _obj(point, pf)
            r = _number(_need(point, "resident_fraction", pf), f"{pf}.resident_fraction")
            if r > 1:
                _fail(f"{pf}.resident_fraction", f"must be at most 1, got {r:g}")
            if "age_ns" in point:
                age = _number(point["age_ns"], f"{pf}.age_ns")
                if age > RESIDENCY_NS_MAX:
                    _fail(f"{pf}.age_ns", f"{age:g} ns is beyond {RESIDENCY_NS_MAX:g} ns")
                if age < last_age:
                    _fail(f"{pf}.age_ns", "the curve's ages must not decrease")
                last_age = age
        delay = _need(lv, "delay", f)
        if delay is not None:
            delay = _obj(delay, f"{f}.delay")
            _delay_quantiles(_need(delay, "quantiles", f"{f}.delay"), f"{f}.delay.quantiles", hit)
            _histogram(delay.get("histogram"), f"{f}.delay.histogram")
