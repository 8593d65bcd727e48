"""The serving replay's step time: how long one vLLM-style engine step lasts on the calibrated GPU.

A step (one forward pass over the scheduled tokens of every running request) lasts

    max(compute, memory) + refetch + overhead

(every term is derived, cited or stated as an assumption in docs/serving-latency.md):

* **compute**: the FLOPs of the scheduled tokens, ``2 x active parameters`` per token for the
  linear layers plus ``4 x layers x q_heads x attn_dim`` per attention token pair (the cost
  model's constants, policies/cost/models.py and costmodel.py: one source), over the
  calibrated FLOP rate (``compute.bf16_dense_tflops x achieved_fraction``), per GPU of the
  preset's tensor-parallel group.
* **memory**: the bytes the step moves per GPU (the weights once, the KV of every running
  request's context, the KV it writes) at the bandwidth the calibration's loaded-latency curve
  gives at the load this step produces. The load and the latency set each other (a fixed
  point, solved by bisection): at load ``u`` (a fraction of the curve's peak bandwidth) the
  HBM latency is ``L(u)``; by Little's law the achieved bandwidth is the bytes in flight over
  the latency, ``X = Q / L(u)``, with ``Q = min(step bytes, SMs x IN_FLIGHT_BYTES_PER_SM)``;
  and ``u = X / peak``, at most 1 (no step streams faster than the best bandwidth measured).
  The memory time is ``bytes / (u* x peak)``. ``L(u)`` is the curve's queueing fit
  (reports/queueing.py) when it has one, else the curve's P50 points interpolated; without a
  curve (the hopper-published reference) the latency stays at the unloaded HBM P50 and the
  bandwidth at ``bandwidth.hbm_read_gbs``, and the model says so.
* **refetch**: each layer's attention kernel reads the running requests' block tables (int32
  entries, ``TABLE_ENTRY_BYTES``) before the KV blocks they name; between two layers the
  streaming weights and KV pass through the L2 and evict them. A table line touched one layer
  ago (``age = (compute-or-memory time) / layers``) is still in the L2 with the probability
  the calibration's residency curve gives at that age, for the load level nearest ``u*``; each
  missed line on the critical path (one sequence's table, ``ceil(table_blocks / n_running x 4 /
  128)`` lines, per layer) costs one replacement delay drawn, seeded, from that level's
  distribution (its histogram, else its quantiles). Without a ``replacement_delay`` section
  the term is 0 and the model says so (`StepCostModel.refetch`, `.notes`).
* **overhead**: a fixed per-step scheduling and launch time (``STEP_OVERHEAD_S``, an assumption).

Interface: ``StepCostModel.from_calibration(calibration, model_preset,
block_tokens, seed)``; ``.params`` goes into the replay's numba loop, which calls the @njit
``step_seconds(params, prefill_tokens, attn_token_pairs, context_tokens, kv_write_tokens,
n_running, table_blocks, rng_state, terms)``; ``terms`` (float64[4]) is ADDED to:
[compute_s, memory_s, refetch_s, overhead_s].
"""
from __future__ import annotations

import math

import numpy as np

from sitsprof.calibration import Calibration
from sitsprof.common.jit import njit

from ..errors import CostModelError

__all__ = [
    "BISECTION_STEPS",
    "C_BASE",
    "C_FRAC",
    "C_HALF",
    "C_HAS",
    "C_MU",
    "C_NB",
    "C_NPTS",
    "C_SD",
    "DEFAULT_SM_COUNT",
    "IN_FLIGHT_BYTES_PER_SM",
    "K_KNOTS",
    "L2_LINE_BYTES",
    "MAX_DRAWS",
    "MODE_FIT",
    "MODE_FLAT",
    "MODE_POINTS",
    "N_SCALARS",
    "QUANTILE_PROBS",
    "STEP_OVERHEAD_S",
    "S_A",
    "S_ATTN",
    "S_B",
    "S_INFLIGHT",
    "S_KV_READ",
    "S_KV_WRITE",
    "S_L0",
    "S_LAYERS",
    "S_LIN",
    "S_LV_B",
    "S_LV_M",
    "S_MODE",
    "S_OVERHEAD",
    "S_PEAK",
    "S_REFETCH",
    "S_UCAP",
    "S_UMAX",
    "S_USAT",
    "S_WEIGHTS",
    "TABLE_ENTRY_BYTES",
    "StepCostModel",
    "delay_moments",
    "draw_delay",
    "knots",
    "loaded_latency",
    "refetch_seconds",
    "resident_share",
    "solve_load",
    "step_seconds",
    "uniform",
]

#: Bytes a Hopper SM keeps in flight from HBM in a TMA-pipelined kernel (GEMM main loops and
#: FlashAttention-3 keep 2-4 stages of 16-48 KiB tiles in its 228 KiB of shared memory): an
#: assumption, docs/serving-latency.md.
IN_FLIGHT_BYTES_PER_SM = 64 * 1024
#: SMs when the calibration's device does not say (H100 SXM / H200: 132).
DEFAULT_SM_COUNT = 132
#: Per-step CPU scheduling, input preparation and launch time (an assumption; docs/serving-latency.md).
STEP_OVERHEAD_S = 1e-3
#: One block-table entry (vLLM's block tables are int32 block ids) and one L2 line.
TABLE_ENTRY_BYTES = 4
L2_LINE_BYTES = 128
#: Up to this many missed lines a step draws each delay; beyond, the sum of k delays is drawn
#: as a normal of mean k x mu and deviation sqrt(k) x sigma (central limit), floored at 0.
MAX_DRAWS = 32
BISECTION_STEPS = 80

# scalar slots of params[0]
(S_LIN, S_ATTN, S_WEIGHTS, S_KV_READ, S_KV_WRITE, S_PEAK, S_INFLIGHT, S_MODE, S_L0, S_A, S_UMAX, S_B, S_UCAP,
 S_OVERHEAD, S_LAYERS, S_REFETCH, S_USAT, S_LV_M, S_LV_B, S_PROF, S_ATTN_PROF, N_SCALARS) = range(22)
# rows of params[4], the per-op step profile (StepProfile): tokens grid, GEMM seconds, LM-head seconds,
# all-reduce seconds
P_GRID, P_GEMM, P_LM, P_AR = range(4)
# columns of params[3], one row per replacement-delay level: then m residency ages, m resident
# shares, b + 1 histogram edges, b cumulative shares, K quantile probabilities, K delays (seconds)
C_FRAC, C_HAS, C_NPTS, C_HALF, C_NB, C_MU, C_SD, C_BASE = range(8)
K_KNOTS = 6
MODE_FLAT, MODE_FIT, MODE_POINTS = 0, 1, 2
#: quantile knots used when a level has no histogram (inverse CDF through them; docs)
QUANTILE_PROBS = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p999": 0.999}


class StepCostModel:
    """The step time model built from one calibration and one model preset (`params` for numba)."""

    def __init__(self, params: tuple, description: str, notes: list[str], refetch: bool, seed: int,
                 levels: list[dict]):
        self.params = params
        self.description = description
        self.notes = notes
        self.refetch = refetch  # False: no replacement-delay section; the refetch term is 0
        self.seed = int(seed)
        self.levels = levels

    def rng_state(self) -> np.ndarray:
        """A fresh seeded uint64[1] state (the replay's formula)."""
        return np.array([(self.seed * 0x9E3779B97F4A7C15 + 1) % 2**64], dtype=np.uint64)

    def step(self, prefill_tokens=0, attn_token_pairs=0.0, context_tokens=0, kv_write_tokens=0, n_running=1,
             table_blocks=0, rng_state=None, terms=None) -> float:
        """One step's seconds from Python (tests, reports); the same @njit function the replay calls."""
        rng_state = self.rng_state() if rng_state is None else rng_state
        terms = np.zeros(5) if terms is None else terms
        return float(step_seconds(self.params, float(prefill_tokens), float(attn_token_pairs),
                                  float(context_tokens), float(kv_write_tokens), float(n_running),
                                  float(table_blocks), rng_state, terms))

    def load(self, step_bytes: float) -> tuple[float, float]:
        """(u*, L(u*) seconds) of a step moving `step_bytes` per GPU (the memory fixed point)."""
        return tuple(float(x) for x in solve_load(self.params[0], self.params[1], self.params[2], float(step_bytes)))

    @classmethod
    def from_calibration(cls, calibration=None, model_preset=None, block_tokens: int = 16, seed: int = 0,
                         overhead_s: float = STEP_OVERHEAD_S, profile: dict | None = None) -> StepCostModel:
        """The model on `calibration` (a `Calibration`, used as is; a path, dict or None is read
        once here) for `model_preset` (a preset or its name); `profile`: a measured per-op step
        profile (`pack_profile`; docs/serving-latency.md "Measured per-op profile") that replaces
        the roofline's compute and weight terms and adds the TP all-reduce."""
        from ..cost.models import DEFAULT_MODEL, ModelPreset, get_model

        if profile is not None and profile.get("overhead_ms") is not None:
            overhead_s = float(profile["overhead_ms"]) * 1e-3  # the profile's own per-step overhead
        g = Calibration.of(calibration)
        p = model_preset if isinstance(model_preset, ModelPreset) else get_model(model_preset or DEFAULT_MODEL)
        if int(block_tokens) < 1:
            raise CostModelError(f"block_tokens {block_tokens}: must be at least 1 (16 is vLLM's default)")
        if not (isinstance(overhead_s, (int, float)) and math.isfinite(overhead_s) and overhead_s >= 0):
            raise CostModelError(f"step overhead {overhead_s!r} s: must be a non-negative number of seconds")
        flops = g.require_flops()
        tp = float(p.tensor_parallel)
        notes: list[str] = []

        sc = np.zeros(N_SCALARS)
        sc[S_LIN] = 2e9 * p.params_active_b / (flops * tp)
        sc[S_ATTN] = 4.0 * p.layers * p.q_heads * p.attn_dim / (flops * tp)
        sc[S_WEIGHTS] = p.weight_bytes / tp
        # per GPU: dense attention's KV heads split over the group, MLA's latent read whole by each
        kv_gpu = p.kv_bytes_per_token_per_gpu
        sc[S_KV_READ] = kv_gpu
        # a written byte costs what reading hbm_read/hbm_write bytes costs (the curve is a read curve)
        sc[S_KV_WRITE] = kv_gpu * (g.hbm_read_bps / g.hbm_write_bps)
        if p.dtype_bytes < 2:
            notes.append(f"{p.dtype} weights: their bytes are priced at {p.dtype_bytes} byte each, their FLOPs at the "
                         "calibration's bf16 rate (it holds no fp8 tensor-core rate)")
        sm_count = g.sm_count
        if sm_count is None:
            sm_count = DEFAULT_SM_COUNT
            notes.append(f"device.sm_count not in the calibration: {DEFAULT_SM_COUNT} SMs assumed (H100/H200)")
        sc[S_INFLIGHT] = float(sm_count) * IN_FLIGHT_BYTES_PER_SM
        sc[S_OVERHEAD] = float(overhead_s)
        sc[S_LAYERS] = float(p.layers)

        curve = g.hbm_curve
        cu = np.zeros(1)
        cl = np.zeros(1)
        hbm_s = g.hbm_latency_s
        if curve is None:
            sc[S_MODE] = MODE_FLAT
            sc[S_PEAK] = g.hbm_read_bps
            sc[S_L0] = hbm_s
            sc[S_UCAP] = 1.0
            notes.append("no loaded-latency curve in the calibration: HBM latency held at its unloaded P50 "
                         f"({hbm_s * 1e9:.0f} ns), bandwidth capped at hbm_read_gbs")
            curve_text = "flat latency (no loaded-latency curve)"
        else:
            to_s = curve.unit_s
            sc[S_PEAK] = curve.peak_bps
            if not curve.peak_given:
                notes.append("the loaded-latency curve does not say its peak: its fractions are taken of hbm_read_gbs")
            fit = curve.fit_p50
            if fit is not None:
                sc[S_MODE] = MODE_FIT
                sc[S_L0], sc[S_A], sc[S_UMAX], sc[S_B] = fit.l0 * to_s, fit.a * to_s, fit.u_max, fit.b
                sc[S_UCAP] = min(1.0, fit.u_max * (1.0 - 1e-9))
                curve_text = (f"loaded latency: queueing fit L0 {fit.l0 * to_s * 1e9:.0f} ns, "
                              f"u_max {fit.u_max:.3f}, b {fit.b:g}")
            else:
                sc[S_MODE] = MODE_POINTS
                cu = np.array(curve.fractions, dtype=np.float64)
                cl = np.array(curve.p50_s, dtype=np.float64)
                sc[S_L0] = cl[0]
                sc[S_UCAP] = min(1.0, float(cu[-1]))
                notes.append("the loaded-latency curve has no queueing fit: its P50 points are interpolated and the "
                             f"load capped at the last measured fraction ({cu[-1]:.3f})")
                curve_text = f"loaded latency: {len(cu)} P50 points"

        # a step with at least the in-flight bytes has Q = that: its load is one number, solved once
        sc[S_USAT] = solve_load(sc, cu, cl, sc[S_INFLIGHT])[0]
        levels, arrays, refetch_note = _levels(g)
        sc[S_REFETCH] = 1.0 if levels else 0.0
        if refetch_note:
            notes.append(refetch_note)
        lv, sc[S_LV_M], sc[S_LV_B] = _pack(arrays)
        # one 1-D and three small 2-D/1-D float arrays: few references for numba to count per call
        prof = np.zeros((4, 2))
        prof_text = ""
        if profile is not None:
            prof = pack_profile(profile)
            sc[S_PROF] = 1.0
            sc[S_ATTN_PROF] = 4.0 * p.layers * p.q_heads * p.attn_dim / (float(profile["attn_tflops"]) * 1e12 * tp)
            prof_text = f"; per-op profile: {profile.get('name', 'measured')}"
        params = (sc, cu, cl, lv, prof)
        description = (f"step model: {g.name} ({g.kind}), {p.name} tp={p.tensor_parallel}{prof_text}; {curve_text}; "
                       + (f"refetch priced from {len(levels)} replacement-delay level(s)" if levels
                          else "refetch term 0 (no replacement-delay distribution in the calibration)")
                       + f"; overhead {overhead_s * 1e3:g} ms/step")
        return cls(params, description, notes, bool(levels), seed, levels)


def pack_profile(profile: dict) -> np.ndarray:
    """A per-op profile ({"grid_tokens", "gemm_ms", "lm_head_ms", "allreduce_ms"}, per GPU, the
    whole step's layers summed; bench/op_profiles.py) as the float64[4, G] params[4] (seconds)."""
    grid = np.asarray(profile["grid_tokens"], dtype=np.float64)
    rows = [np.asarray(profile[k], dtype=np.float64) * 1e-3 for k in ("gemm_ms", "lm_head_ms", "allreduce_ms")]
    if len(grid) < 2 or np.any(np.diff(grid) <= 0) or any(r.shape != grid.shape or np.any(r < 0) for r in rows):
        raise CostModelError("a step profile needs an increasing token grid and one non-negative time per point")
    if not (float(profile.get("attn_tflops") or 0) > 0):
        raise CostModelError("a step profile needs attn_tflops, the measured causal-prefill attention rate")
    return np.vstack([grid, *rows])


@njit(cache=True)
def profile_at(prof, row, x):
    """params[4]'s row at x tokens: linear between grid points, and beyond the last two."""
    g = prof[P_GRID]
    n = g.shape[0]
    if x <= g[0]:
        return prof[row, 0] * (x / g[0]) if x > 0 else 0.0
    i = 1
    while i < n - 1 and g[i] < x:
        i += 1
    return prof[row, i - 1] + (x - g[i - 1]) / (g[i] - g[i - 1]) * (prof[row, i] - prof[row, i - 1])


def _levels(cal: Calibration):
    """Per load level arrays for the refetch term, padded: (fraction, has delay, residency ages,
    resident fractions, points, half-life, histogram edges, cumulative shares, bins, quantile
    probabilities, quantile values), all in seconds; [] and a note when there is none."""
    empty = (np.zeros(1), np.zeros(1, dtype=np.int64), np.zeros((1, 1)), np.zeros((1, 1)),
             np.zeros(1, dtype=np.int64), np.full(1, np.nan), np.zeros((1, 2)), np.zeros((1, 1)),
             np.zeros(1, dtype=np.int64), np.full((1, K_KNOTS), 2.0), np.zeros((1, K_KNOTS)), np.zeros(1),
             np.zeros(1))
    if not cal.delay_levels:
        return [], empty, ("no replacement_delay section in the calibration: the refetch term is 0 "
                           "(calibrate from a run with the loaded-latency probe to price it)")
    to_s = cal.delay_unit_s
    lvls = sorted(cal.delay_levels, key=lambda lv: lv.bandwidth_fraction)
    if not any(lv.delay_quantiles is not None for lv in lvls):
        return [], empty, "the replacement_delay section has no level with a missed re-touch: the refetch term is 0"
    n = len(lvls)
    curves = [lv.residency_curve for lv in lvls]
    m = max([len(c) for c in curves] + [1])
    frac = np.array([lv.bandwidth_fraction for lv in lvls], dtype=np.float64)
    has = np.array([lv.delay_quantiles is not None for lv in lvls], dtype=np.int64)
    ages = np.zeros((n, m))
    res = np.zeros((n, m))
    npts = np.zeros(n, dtype=np.int64)
    half = np.full(n, np.nan)
    hists = [lv.delay_histogram for lv in lvls]
    b = max([len(h[1]) for h in hists if h] + [1])
    edges = np.zeros((n, b + 1))
    cum = np.zeros((n, b))
    nb = np.zeros(n, dtype=np.int64)
    qp = np.zeros((n, len(QUANTILE_PROBS) + 1))
    qv = np.zeros((n, len(QUANTILE_PROBS) + 1))
    mu = np.zeros(n)
    sd = np.zeros(n)
    for i, lv in enumerate(lvls):
        for j, (age_ns, resident) in enumerate(curves[i]):
            ages[i, j] = age_ns * 1e-9
            res[i, j] = resident
        npts[i] = len(curves[i])
        if lv.residency_time_ns is not None:
            half[i] = lv.residency_time_ns * 1e-9
        if lv.delay_quantiles is None:
            continue
        h = hists[i]
        if h and sum(h[1]) > 0:
            k = len(h[1])
            edges[i, : k + 1] = np.asarray(h[0], dtype=np.float64) * to_s
            c = np.cumsum(np.asarray(h[1], dtype=np.float64))
            cum[i, :k] = c / c[-1]
            nb[i] = k
        probs, vals = knots(lv.delay_quantiles)
        qp[i, : len(probs)] = probs
        qv[i, : len(vals)] = np.asarray(vals) * to_s
        qp[i, len(probs):] = 2.0  # unused slots (beyond probability 1)
        assert qp.shape[1] == K_KNOTS
        mu[i], sd[i] = delay_moments(edges[i], cum[i], int(nb[i]), qp[i], qv[i])
    return lvls, (frac, has, ages, res, npts, half, edges, cum, nb, qp, qv, mu, sd), ""


def _pack(arrays) -> tuple[np.ndarray, int, int]:
    """The level arrays as one float64 table (columns C_* then the padded blocks), with m and b."""
    frac, has, ages, res, npts, half, edges, cum, nb, qp, qv, mu, sd = arrays
    n, m = ages.shape
    b = cum.shape[1]
    lv = np.zeros((n, C_BASE + 2 * m + 2 * b + 1 + 2 * K_KNOTS))
    lv[:, C_FRAC], lv[:, C_HAS], lv[:, C_NPTS], lv[:, C_HALF] = frac, has, npts, half
    lv[:, C_NB], lv[:, C_MU], lv[:, C_SD] = nb, mu, sd
    o = C_BASE
    for block in (ages, res, edges, cum, qp, qv):
        lv[:, o: o + block.shape[1]] = block
        o += block.shape[1]
    return lv, float(m), float(b)


def delay_moments(edges, cum, nb: int, qp, qv) -> tuple[float, float]:
    """Mean and deviation of the distribution `draw_delay` samples: the histogram's (uniform
    inside each bin), else the quantile knots' inverse CDF integrated over 100000 probabilities."""
    if nb > 0:
        w = np.diff(np.concatenate([[0.0], cum[:nb]]))
        lo, hi = edges[:nb], edges[1: nb + 1]
        mean = float(np.sum(w * (lo + hi) / 2))
        second = float(np.sum(w * (lo * lo + lo * hi + hi * hi) / 3))
    else:
        r = (np.arange(100_000) + 0.5) / 100_000
        used = qp <= 1.0
        v = np.maximum(np.interp(r, qp[used], qv[used]), 0.0)
        mean, second = float(v.mean()), float((v * v).mean())
    return mean, math.sqrt(max(second - mean * mean, 0.0))


def knots(q: dict) -> tuple[list[float], list[float]]:
    """Inverse-CDF knots of a delay from its quantiles: the given ones, and below the median the
    upper half mirrored (probability 0.1 at ``2 p50 - p90``, floored at 0; docs/serving-latency.md)."""
    probs, vals = [], []
    p50 = float(q["p50"])
    low = max(0.0, 2 * p50 - float(q["p90"])) if "p90" in q else p50
    probs.append(0.1)
    vals.append(min(low, p50))
    for key, prob in QUANTILE_PROBS.items():
        if key in q:
            probs.append(prob)
            vals.append(max(float(q[key]), vals[-1]))
    return probs, vals


# ---------------------------------------------------------------- numba


@njit(cache=True)
def uniform(rng_state):
    """The next U[0, 1) of a splitmix64 stream kept in rng_state[0] (uint64)."""
    s = rng_state[0] + np.uint64(0x9E3779B97F4A7C15)
    rng_state[0] = s
    z = s
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def loaded_latency(sc, cu, cl, u):
    """HBM latency (seconds) at load u (a fraction of the curve's peak)."""
    mode = int(sc[S_MODE])
    if mode == MODE_FIT:
        rho = u / sc[S_UMAX]
        if rho >= 1.0:
            return np.inf
        return sc[S_L0] + sc[S_A] * ((1.0 - rho) ** (-sc[S_B]) - 1.0)
    if mode == MODE_POINTS:
        n = cu.shape[0]
        if u <= cu[0]:
            return cl[0]
        for i in range(1, n):
            if u <= cu[i]:
                w = (u - cu[i - 1]) / (cu[i] - cu[i - 1])
                return cl[i - 1] + w * (cl[i] - cl[i - 1])
        return cl[n - 1]
    return sc[S_L0]


@njit(cache=True)
def solve_load(sc, cu, cl, step_bytes):
    """(u*, L(u*)): the load at which u = min(Q / (L(u) x peak), u_cap), Q = min(bytes, in-flight
    bytes); the right side falls as u rises (L rises), so the crossing is unique: bisection."""
    cap = sc[S_UCAP]
    if step_bytes <= 0.0:
        return 0.0, loaded_latency(sc, cu, cl, 0.0)
    if step_bytes >= sc[S_INFLIGHT] and sc[S_USAT] > 0.0:
        return sc[S_USAT], loaded_latency(sc, cu, cl, sc[S_USAT])
    q = min(step_bytes, sc[S_INFLIGHT])
    peak = sc[S_PEAK]
    lat = loaded_latency(sc, cu, cl, cap)
    if q / (lat * peak) >= cap:
        return cap, lat
    lo = 0.0
    hi = cap
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        if q / (loaded_latency(sc, cu, cl, mid) * peak) > mid:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13:
            break
    u = 0.5 * (lo + hi)
    return u, loaded_latency(sc, cu, cl, u)


@njit(cache=True)
def resident_share(lv, m, i, age):
    """Share of L2 lines still resident `age` seconds after their touch at level i: the residency
    curve (linear from 1 at age 0 to its first point, log-age interpolation between points, flat
    beyond), else the half-life 2^(-age / time), else 0 (every line evicted)."""
    n = int(lv[i, C_NPTS])
    a = C_BASE          # ages
    r = C_BASE + m      # resident shares
    if n > 0:
        if age <= lv[i, a]:
            if lv[i, a] <= 0.0:
                return lv[i, r]
            return 1.0 + (lv[i, r] - 1.0) * age / lv[i, a]
        for j in range(1, n):
            if age <= lv[i, a + j]:
                a0 = np.log(max(lv[i, a + j - 1], 1e-12))
                a1 = np.log(max(lv[i, a + j], 1e-12))
                w = 1.0 if a1 <= a0 else (np.log(age) - a0) / (a1 - a0)
                return lv[i, r + j - 1] + w * (lv[i, r + j] - lv[i, r + j - 1])
        return lv[i, r + n - 1]
    half = lv[i, C_HALF]
    if half == half and half > 0.0:
        return 2.0 ** (-age / half)
    return 0.0


@njit(cache=True)
def draw_delay(lv, m, b, i, rng_state):
    """One replacement delay (seconds, >= 0) of level i: from its histogram (a bin by its share,
    uniform inside), else by inverse CDF through its quantile knots."""
    e = C_BASE + 2 * m           # edges
    c = e + b + 1                # cumulative shares
    qp = c + b                   # knot probabilities
    qv = qp + K_KNOTS            # knot delays
    r = uniform(rng_state)
    k = int(lv[i, C_NB])
    if k > 0:
        lo_b = 0  # the first bin whose cumulative share exceeds r (binary search)
        top = k - 1
        while lo_b < top:
            mid = (lo_b + top) // 2
            if lv[i, c + mid] <= r:
                lo_b = mid + 1
            else:
                top = mid
        lo = lv[i, c + lo_b - 1] if lo_b > 0 else 0.0
        w = (r - lo) / (lv[i, c + lo_b] - lo) if lv[i, c + lo_b] > lo else 0.5
        v = lv[i, e + lo_b] + w * (lv[i, e + lo_b + 1] - lv[i, e + lo_b])
    else:
        v = lv[i, qv]
        if r > lv[i, qp]:
            for j in range(1, K_KNOTS):
                if lv[i, qp + j] > 1.0:
                    break
                if r <= lv[i, qp + j]:
                    v = lv[i, qv + j - 1] + ((r - lv[i, qp + j - 1]) / (lv[i, qp + j] - lv[i, qp + j - 1])
                                             * (lv[i, qv + j] - lv[i, qv + j - 1]))
                    break
                v = lv[i, qv + j]
    return max(v, 0.0)


@njit(cache=True)
def refetch_seconds(sc, lv, u, base_s, n_running, table_blocks, rng_state):
    """The step's block-table re-fetch stall (module docstring)."""
    if sc[S_REFETCH] == 0.0 or n_running <= 0.0 or table_blocks <= 0.0:
        return 0.0
    m = int(sc[S_LV_M])
    b = int(sc[S_LV_B])
    best = 0
    for i in range(1, lv.shape[0]):
        if abs(lv[i, C_FRAC] - u) < abs(lv[best, C_FRAC] - u):
            best = i
    if lv[best, C_HAS] == 0.0:
        return 0.0
    layers = sc[S_LAYERS]
    evicted = 1.0 - resident_share(lv, m, best, base_s / layers)
    if evicted <= 0.0:
        return 0.0
    lines = np.ceil(table_blocks / n_running * TABLE_ENTRY_BYTES / L2_LINE_BYTES)
    expected = layers * lines * min(evicted, 1.0)
    k = int(np.floor(expected))
    if uniform(rng_state) < expected - k:
        k += 1
    if k > MAX_DRAWS:  # the sum of k delays by the central limit: exact mean and variance
        u1 = max(uniform(rng_state), 1e-300)
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * uniform(rng_state))
        return max(k * lv[best, C_MU] + np.sqrt(k) * lv[best, C_SD] * z, 0.0)
    total = 0.0
    for _ in range(k):
        total += draw_delay(lv, m, b, best, rng_state)
    return total


@njit(cache=True)
def step_seconds(params, prefill_tokens, attn_token_pairs, context_tokens, kv_write_tokens, n_running,
                 table_blocks, rng_state, terms):
    """Seconds of one engine step; adds [compute, memory, refetch, overhead] to `terms`."""
    sc = params[0]
    linear_tokens = max(float(kv_write_tokens), float(prefill_tokens))  # every scheduled token, decode too
    if sc[S_PROF] > 0.0:
        return _profiled_step(params, linear_tokens, attn_token_pairs, context_tokens, kv_write_tokens, n_running,
                              table_blocks, rng_state, terms)
    compute = linear_tokens * sc[S_LIN] + attn_token_pairs * sc[S_ATTN]
    step_bytes = sc[S_WEIGHTS] + context_tokens * sc[S_KV_READ] + kv_write_tokens * sc[S_KV_WRITE]
    u, _lat = solve_load(sc, params[1], params[2], step_bytes)
    memory = step_bytes / (u * sc[S_PEAK]) if step_bytes > 0.0 else 0.0
    base = max(compute, memory)
    refetch = refetch_seconds(sc, params[3], u, base, float(n_running), float(table_blocks), rng_state)
    overhead = sc[S_OVERHEAD]
    terms[0] += compute
    terms[1] += memory
    terms[2] += refetch
    terms[3] += overhead
    return base + refetch + overhead


@njit(cache=True)
def _profiled_step(params, tokens, attn_token_pairs, context_tokens, kv_write_tokens, n_running, table_blocks,
                   rng_state, terms):
    """A step priced by the measured per-op profile (docs/serving-latency.md): the layers' GEMMs
    at `tokens` rows (their weight reads inside the measured time), the LM head at one row a
    running request, prefill attention at the measured FlashAttention rate, the KV reads and
    writes at the calibration's loaded bandwidth, the TP all-reduces; kernels of a layer run
    one after another, so the terms add. terms[4] (when present) gets the all-reduce."""
    sc = params[0]
    prof = params[4]
    gemm = profile_at(prof, P_GEMM, tokens) + profile_at(prof, P_LM, n_running)
    compute = gemm + attn_token_pairs * sc[S_ATTN_PROF]
    comm = profile_at(prof, P_AR, tokens)
    kv_bytes = context_tokens * sc[S_KV_READ] + kv_write_tokens * sc[S_KV_WRITE]
    memory = 0.0
    u = sc[S_USAT]
    if kv_bytes > 0.0:
        u, _lat = solve_load(sc, params[1], params[2], kv_bytes)
        memory = kv_bytes / (u * sc[S_PEAK])
    refetch = refetch_seconds(sc, params[3], u, compute + memory, float(n_running), float(table_blocks), rng_state)
    overhead = sc[S_OVERHEAD]
    terms[0] += compute
    terms[1] += memory
    terms[2] += refetch
    terms[3] += overhead
    if terms.shape[0] > 4:
        terms[4] += comm
    return compute + memory + comm + refetch + overhead
