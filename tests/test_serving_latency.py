"""The serving replay's step latency model (policies/serving/latency.py, docs/serving-latency.md).

Sensitivity: two calibrations that differ only in the loaded-latency curve, and two that differ
only in the replacement-delay distribution, give different step times, by exactly what a hand
computation written here says on a crafted two-request step, and different P99 TTFT through
the replay. The memory fixed point is checked against its closed form (b = 1 is a quadratic)
and against a dense grid; more context never makes a step faster; the published reference
has no replacement section, so its refetch term is 0 and the model says so.
"""
from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from sitsprof.calibration import load_calibration, validate_calibration
from sitsprof.policies.cost.models import PRESETS, ModelPreset
from sitsprof.policies.serving import latency
from sitsprof.policies.serving.latency import IN_FLIGHT_BYTES_PER_SM, STEP_OVERHEAD_S, StepCostModel

MHZ = 1980.0
PEAK_GBS = 4000.0
PHI = PRESETS["phi-3-mini"]  # tensor_parallel 1: the hand computations need no division by tp


def _cal(fit=None, points=None, delay=None, residency=None, fraction=0.9):
    """The published reference plus a loaded-latency curve (a queueing fit, or P50 points only)
    and, when `delay` is given, a one-level replacement_delay section."""
    cal = copy.deepcopy(load_calibration())
    cal["name"] = "test-calibration"
    if fit is not None or points is not None:
        pts = points or [(0.0, fit["l0"]), (0.5, fit["l0"] * 1.1), (0.9, fit["l0"] * 2)]
        curve = {"tier": "hbm", "unit": "cycles", "peak_gbs": PEAK_GBS,
                 "points": [{"bandwidth_fraction": f, "quantiles": {"p50": lat}} for f, lat in pts]}
        if fit is not None:
            curve["fit_p50"] = dict(fit)
        cal["loaded_latency"] = [curve]
    if delay is not None:
        cal["replacement_delay"] = {"unit": "cycles", "levels": [{
            "level": 1, "bandwidth_fraction": fraction, "hit_cycles": 300.0,
            "residency": residency or {"time_ns": 1.0, "bound": "<",
                                       "curve": [{"age_ns": 1.0, "resident_fraction": 0.0}]},
            "delay": delay}]}
    return validate_calibration(cal)


def _constant_delay(cycles):
    """A delay distribution with every quantile equal (no histogram): every draw is `cycles`."""
    return {"quantiles": {k: cycles for k in ("p50", "p90", "p95", "p99", "p999")}, "samples": 100,
            "histogram": None}


FIT_A = {"l0": 600.0, "a": 40.0, "u_max": 0.95, "b": 1.0}
FIT_B = {"l0": 600.0, "a": 80.0, "u_max": 0.90, "b": 1.0}

# The crafted case: two decode requests, 1000 and 3000 tokens of context, one token each.
CTX = (1000, 3000)
TWO = {"prefill_tokens": 0, "attn_token_pairs": 0.0, "context_tokens": sum(CTX), "kv_write_tokens": 2,
       "n_running": 2, "table_blocks": sum(math.ceil(c / 16) for c in CTX)}


def _hand_fixed_point_b1(q_bytes, l0_s, a_s, u_max, peak_bps):
    """u with u * peak * L(u) = Q for L(u) = l0 + a * rho / (1 - rho), rho = u / u_max:
    multiplied out, (a - l0) peak / u_max * u^2 + (l0 peak + Q / u_max) u - Q = 0."""
    c2 = (a_s - l0_s) * peak_bps / u_max
    c1 = l0_s * peak_bps + q_bytes / u_max
    return 2.0 * q_bytes / (c1 + math.sqrt(c1 * c1 + 4.0 * c2 * q_bytes))


def _hand_two_request_memory_s(fit):
    """The crafted step's memory seconds, by hand (docs/serving-latency.md, 'memory')."""
    ref = load_calibration()
    kv = PHI.kv_bytes_per_token  # 32 layers x 2 x 32 heads x 96 x 2 bytes = 393216
    assert kv == 393216
    write_scale = ref["bandwidth"]["hbm_read_gbs"] / ref["bandwidth"]["hbm_write_gbs"]
    step_bytes = PHI.params_total_b * 1e9 * PHI.dtype_bytes + sum(CTX) * kv + 2 * kv * write_scale
    q = min(step_bytes, ref["device"]["sm_count"] * IN_FLIGHT_BYTES_PER_SM)  # 132 SMs x 64 KiB
    to_s = 1e-6 / MHZ
    u = _hand_fixed_point_b1(q, fit["l0"] * to_s, fit["a"] * to_s, fit["u_max"], PEAK_GBS * 1e9)
    return step_bytes / (u * PEAK_GBS * 1e9)


def _hand_compute_s(tokens):
    ref = load_calibration()
    flops = ref["compute"]["bf16_dense_tflops"] * 1e12 * ref["compute"]["achieved_fraction"]
    return tokens * 2e9 * PHI.params_active_b / flops


def test_loaded_latency_curve_changes_the_step_by_the_hand_computed_amount():
    a = StepCostModel.from_calibration(_cal(fit=FIT_A), "phi-3-mini", 16, 0)
    b = StepCostModel.from_calibration(_cal(fit=FIT_B), "phi-3-mini", 16, 0)
    ta, tb = np.zeros(4), np.zeros(4)
    step_a, step_b = a.step(**TWO, terms=ta), b.step(**TWO, terms=tb)
    assert step_a != step_b
    mem_a, mem_b = _hand_two_request_memory_s(FIT_A), _hand_two_request_memory_s(FIT_B)
    assert ta[1] == pytest.approx(mem_a, rel=1e-9) and tb[1] == pytest.approx(mem_b, rel=1e-9)
    assert ta[0] == pytest.approx(_hand_compute_s(2), rel=1e-12)
    assert ta[0] < ta[1]  # a two-token decode step is memory-bound: the step is memory + overhead
    assert step_b - step_a == pytest.approx(mem_b - mem_a, rel=1e-9)
    assert step_a == pytest.approx(mem_a + STEP_OVERHEAD_S, rel=1e-9)
    assert ta[2] == 0.0 and ta[3] == STEP_OVERHEAD_S  # no replacement section: no refetch
    # the steeper, earlier-saturating curve B streams slower
    assert step_b > step_a


def test_replacement_delay_changes_the_step_by_the_hand_computed_amount():
    c = StepCostModel.from_calibration(_cal(fit=FIT_A, delay=_constant_delay(350.0)), "phi-3-mini", 16, 0)
    d = StepCostModel.from_calibration(_cal(fit=FIT_A, delay=_constant_delay(700.0)), "phi-3-mini", 16, 0)
    assert c.refetch and d.refetch
    tc, td = np.zeros(4), np.zeros(4)
    step_c, step_d = c.step(**TWO, terms=tc), d.step(**TWO, terms=td)
    # By hand: every table line is evicted (resident share 0 beyond 1 ns), one sequence's table
    # is ceil(251 / 2 entries x 4 bytes / 128-byte lines) = 4 lines, read by each of 32 layers:
    # 128 missed lines, each 350 (C) or 700 (D) cycles at 1980 MHz.
    lines = math.ceil(TWO["table_blocks"] / TWO["n_running"] * 4 / 128)
    assert lines == 4
    missed = PHI.layers * lines
    assert tc[2] == pytest.approx(missed * 350.0 / (MHZ * 1e6), rel=1e-12)
    assert td[2] == pytest.approx(missed * 700.0 / (MHZ * 1e6), rel=1e-12)
    assert step_d - step_c == pytest.approx(missed * 350.0 / (MHZ * 1e6), rel=1e-9)
    assert tc[1] == td[1] and tc[0] == td[0]  # nothing else moved
    assert step_c == pytest.approx(_hand_two_request_memory_s(FIT_A) + tc[2] + STEP_OVERHEAD_S, rel=1e-9)


TINY = ModelPreset(name="tiny", layers=4, kv_heads=2, head_dim=64, kv_elems_per_token_layer=256, dtype_bytes=2,
                   params_active_b=0.001, params_total_b=0.001, q_heads=4, attn_dim=64, tensor_parallel=1,
                   source="test")


@pytest.mark.parametrize("preset,draws", [(TINY, 16), (PHI, 128)], ids=["drawn-one-by-one", "central-limit"])
def test_sampled_delays_follow_the_histogram(preset, draws):
    """Draws from a level's histogram: bins by their share, uniform inside. Per step the sum of
    its k missed lines' delays has mean k mu and variance k sigma^2 (mu, sigma of the histogram,
    computed here with numpy), whether drawn one by one (k <= MAX_DRAWS) or as the central
    limit's normal (k > MAX_DRAWS). Seeded: the same seed, the same sums."""
    hist = {"edges": [100.0, 200.0, 400.0, 1000.0], "counts": [10, 60, 30]}
    delay = {"quantiles": {"p50": 300.0, "p90": 800.0}, "samples": 100, "histogram": hist}
    m = StepCostModel.from_calibration(_cal(fit=FIT_A, delay=delay), preset, 16, 7)
    assert preset.layers * 4 == draws and (draws > latency.MAX_DRAWS) == (preset is PHI)
    edges, counts = np.array(hist["edges"]), np.array(hist["counts"], dtype=float)
    w = counts / counts.sum()
    lo, hi = edges[:-1], edges[1:]
    mu = float(np.sum(w * (lo + hi) / 2))
    var = float(np.sum(w * ((lo + hi) / 2 - mu) ** 2 + w * (hi - lo) ** 2 / 12))
    steps = 3000

    def sums(seed):
        rng = np.array([seed], dtype=np.uint64)
        out = np.empty(steps)
        for n in range(steps):
            t = np.zeros(4)
            m.step(**TWO, rng_state=rng, terms=t)
            out[n] = t[2] * MHZ * 1e6  # cycles
        return out

    got = sums(11)
    assert got.mean() == pytest.approx(draws * mu, rel=0.01)
    assert got.var() == pytest.approx(draws * var, rel=0.1)
    assert np.array_equal(sums(11), got) and not np.array_equal(sums(12), got)


def test_quantile_knots_when_there_is_no_histogram():
    probs, vals = latency.knots({"p50": 300.0, "p90": 400.0, "p99": 900.0})
    assert probs == [0.1, 0.5, 0.9, 0.99] and vals == [200.0, 300.0, 400.0, 900.0]  # 2 p50 - p90 = 200
    probs, vals = latency.knots({"p50": 100.0, "p90": 400.0})
    assert vals[0] == 0.0  # the mirrored low end is floored at 0: a refetch never saves time


@pytest.mark.parametrize("fit", [FIT_A, FIT_B, {"l0": 300.0, "a": 5.0, "u_max": 1.2, "b": 2.0},
                                 {"l0": 900.0, "a": 0.0, "u_max": 0.8, "b": 1.0}])
def test_fixed_point_converges(fit):
    """The bisection lands on the fixed point u = min(Q / (L(u) peak), cap): the residual is
    ~0, and for b = 1 u is the quadratic's root; small steps are latency-bound (time L(u*)),
    large ones stream at u* x peak."""
    m = StepCostModel.from_calibration(_cal(fit=fit), "phi-3-mini", 16, 0)
    sc, cu, cl = m.params[0], m.params[1], m.params[2]
    peak = PEAK_GBS * 1e9
    cap = min(1.0, fit["u_max"] * (1 - 1e-9))
    to_s = 1e-6 / MHZ
    inflight = 132 * IN_FLIGHT_BYTES_PER_SM
    for nbytes in (4096.0, 1e5, 1e6, 4e6, float(inflight), 1e8, 7.6e9):
        u, lat = m.load(nbytes)
        q = min(nbytes, inflight)
        rhs = min(q / (latency.loaded_latency(sc, cu, cl, u) * peak), cap)
        assert abs(u - rhs) <= 1e-9 * max(u, 1e-12) or u == cap, (nbytes, u, rhs)
        assert 0 < u <= cap
        if fit["b"] == 1.0:
            hand = min(_hand_fixed_point_b1(q, fit["l0"] * to_s, fit["a"] * to_s, fit["u_max"], peak), cap)
            assert u == pytest.approx(hand, rel=1e-9)
        if nbytes <= inflight and u < cap:  # every byte in flight at once: the step takes L(u*)
            assert nbytes / (u * peak) == pytest.approx(lat, rel=1e-9)


def test_fixed_point_on_points_only_matches_a_dense_grid():
    pts = [(0.0, 600.0), (0.3, 640.0), (0.6, 720.0), (0.85, 1100.0), (0.93, 2000.0)]
    m = StepCostModel.from_calibration(_cal(points=pts), "phi-3-mini", 16, 0)
    assert any("no queueing fit" in n for n in m.notes)
    peak = PEAK_GBS * 1e9
    grid = np.linspace(0, 0.93, 2_000_001)
    lat_grid = np.interp(grid, [p[0] for p in pts], [p[1] * 1e-6 / MHZ for p in pts])
    for q in (2e5, 1e6, 3e6, 8e6):
        u, _ = m.load(q)
        rhs = np.minimum(q / (lat_grid * peak), 0.93)
        crossing = grid[np.argmin(np.abs(rhs - grid))]
        assert u == pytest.approx(crossing, abs=2e-6)


def _monotone(model, base, key, values, rng_seed=0):
    times = []
    for v in values:
        args = dict(base)
        args[key] = v
        times.append(model.step(**args, rng_state=np.array([rng_seed], dtype=np.uint64)))
    return times


def test_more_context_never_makes_a_step_faster():
    tiny = TINY
    contexts = [0, 1, 10, 100, 1000, 10_000, 100_000, 1_000_000, 10_000_000]
    base = {"prefill_tokens": 64, "attn_token_pairs": 64 * 100.0, "kv_write_tokens": 64, "n_running": 4,
            "table_blocks": 40}
    for cal in (None, _cal(fit=FIT_A), _cal(fit=FIT_B, delay=_constant_delay(500.0)),
                _cal(points=[(0.0, 600.0), (0.5, 700.0), (0.9, 1500.0)])):
        for preset in (tiny, "phi-3-mini", "qwen2-72b"):
            m = StepCostModel.from_calibration(cal, preset, 16, 0)
            times = _monotone(m, base, "context_tokens", contexts)
            assert all(b >= a for a, b in zip(times, times[1:])), (preset, times)
            assert times[-1] > times[0]


def test_published_reference_has_no_refetch_and_says_so():
    m = StepCostModel.from_calibration(None, "qwen2-72b", 16, 0)
    assert not m.refetch
    assert any("no replacement_delay section" in n for n in m.notes)
    assert any("no loaded-latency curve" in n for n in m.notes)
    assert "refetch term 0" in m.description
    terms = np.zeros(4)
    m.step(0, 0.0, 256 * 2000, 256, 256, 256 * 125, terms=terms)
    assert terms[2] == 0.0
    # flat latency, plenty in flight: the memory term is the bytes over hbm_read_gbs exactly
    ref = load_calibration()
    p = PRESETS["qwen2-72b"]
    bw = ref["bandwidth"]
    nbytes = (p.params_total_b * 1e9 * p.dtype_bytes + 256 * 2000 * p.kv_bytes_per_token
              + 256 * p.kv_bytes_per_token * bw["hbm_read_gbs"] / bw["hbm_write_gbs"]) / p.tensor_parallel
    assert terms[1] == pytest.approx(nbytes / (bw["hbm_read_gbs"] * 1e9), rel=1e-12)


def test_a_calibrated_run_prices_the_load_and_the_refetch(tmp_path):
    """End to end: `calibrate` on a generated run (reports/synthetic.py: a model of a GPU, not a
    measurement) writes the curve's fit and peak and the replacement section, and the step model
    reads all three: the load saturates below the fit's u_max, table lines are re-fetched."""
    from sitsprof.reports.fromrun import calibrate
    from sitsprof.reports.synthetic import make_synthetic_run

    run = make_synthetic_run(tmp_path, "cal", seed=2, samples=20_000)
    path, cal = calibrate(run.path, tmp_path / "cal.json")
    m = StepCostModel.from_calibration(str(path), "qwen2-72b", 16, 0)
    assert m.refetch and not m.notes, m.notes
    fit = cal["loaded_latency"][0]["fit_p50"]
    u, lat = m.load(1e10)
    assert 0.5 < u < min(fit["u_max"], 1.0)
    assert lat > fit["l0"] * 1e-6 / cal["clocks"]["sm_mhz"]  # loaded: slower than unloaded
    terms = np.zeros(4)
    m.step(0, 0.0, 64 * 2000, 64, 64, 64 * 125, terms=terms)
    assert terms[2] > 0.0 and terms[1] > terms[2]
    assert "synthetic" in m.description and "refetch priced" in m.description


def test_bad_model_inputs_are_one_line_errors():
    from sitsprof.policies.errors import PolicyEngineError

    with pytest.raises(PolicyEngineError, match="block_tokens 0"):
        StepCostModel.from_calibration(None, None, 0, 0)
    with pytest.raises(PolicyEngineError, match="overhead"):
        StepCostModel.from_calibration(None, None, 16, 0, overhead_s=-1.0)


# -- through the replay ----------------------------------------------------------------------


def _scheduler():
    try:
        from sitsprof.policies.serving import scheduler
    except ImportError as exc:  # S2's replay is another engineer's module
        pytest.skip(f"policies/serving/scheduler.py is not importable yet ({exc})")
    if not hasattr(scheduler, "run_replay"):
        pytest.skip("policies/serving/scheduler.py has no run_replay yet")
    if scheduler.step_seconds is not latency.step_seconds:
        pytest.skip("the replay does not call latency.step_seconds yet")
    return scheduler


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    """200 requests in the Mooncake format: 8 shared 2-block prefixes, bursts of arrivals."""
    from sitsprof.policies.traces.detect import read_trace

    rng = np.random.default_rng(5)
    path = tmp_path_factory.mktemp("trace") / "small.jsonl"
    lines, next_id = [], 100
    for i in range(200):
        blocks = int(rng.integers(2, 8))
        prefix = [2 * (i % 8), 2 * (i % 8) + 1]
        ids = prefix + list(range(next_id, next_id + blocks - 2))
        next_id += blocks - 2
        tokens = blocks * 512 - int(rng.integers(0, 400))
        lines.append(json.dumps({"timestamp": int(i // 20) * 500, "input_length": tokens,
                                 "output_length": int(rng.integers(20, 120)), "hash_ids": ids}))
    path.write_text("\n".join(lines) + "\n")
    return read_trace(path)


def _p99_ttft(scheduler, trace, cal):
    res = scheduler.run_replay(trace, policy="lru", capacity=4000, block_tokens=16, calibration=cal,
                               model="phi-3-mini", seed=1)
    s = res.summary()
    assert s["completed"] == 200
    return s["ttft_p99_ms"], s


def test_replay_p99_ttft_moves_with_the_curve_and_the_delay(small_trace):
    scheduler = _scheduler()
    a, sa = _p99_ttft(scheduler, small_trace, _cal(fit=FIT_A))
    b, _ = _p99_ttft(scheduler, small_trace, _cal(fit=FIT_B))
    assert a != b and b > a  # the slower curve B queues the tail longer
    assert sa["term_share"]["refetch"] == 0.0
    c, sc = _p99_ttft(scheduler, small_trace, _cal(fit=FIT_A, delay=_constant_delay(350.0)))
    d, _ = _p99_ttft(scheduler, small_trace, _cal(fit=FIT_A, delay=_constant_delay(3500.0)))
    assert c != d and d > c
    assert sc["term_share"]["refetch"] > 0.0


def test_mutated_sections_are_refused_in_one_line_or_priced_finitely():
    """Seeded mutations of the curve and the replacement section (wrong types, signs, huge and
    tiny numbers, nulls, deleted keys): the schema refuses each with a CalibrationError naming a
    field, or the step model prices a finite, positive step from it. Never another exception."""
    import random

    from sitsprof.calibration import CalibrationError

    base = _cal(fit=FIT_A, delay={"quantiles": {"p50": 300.0, "p90": 400.0, "p999": 900.0}, "samples": 10,
                                  "histogram": {"edges": [0.0, 300.0, 1000.0], "counts": [3, 7]}})
    base["replacement_delay"]["levels"].append(copy.deepcopy(base["replacement_delay"]["levels"][0]))
    base["replacement_delay"]["levels"][1].update(level=2, bandwidth_fraction=0.3)
    rng = random.Random(4)
    values = [None, True, "x", [], {}, -1, 0, 0.0, 1e-300, 1e300, float("nan"), 2, 0.5, 1.5, 1e6, -1e-9, [1.0]]

    def leaves(obj, path=()):
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield path + (k,)
                yield from leaves(v, path + (k,))
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                yield path + (i,)
                yield from leaves(v, path + (i,))

    paths = [p for p in leaves(base) if p[0] in ("loaded_latency", "replacement_delay")]
    refused = priced = 0
    for _ in range(400):
        cal = copy.deepcopy(base)
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(paths)
            holder = cal
            try:
                for k in path[:-1]:
                    holder = holder[k]
                if rng.random() < 0.15 and isinstance(holder, dict):
                    holder.pop(path[-1], None)
                else:
                    holder[path[-1]] = rng.choice(values)
            except (KeyError, IndexError, TypeError):
                continue
        try:
            validate_calibration(cal)
        except CalibrationError as exc:
            assert "\n" not in str(exc) and exc.exit_code == 2
            refused += 1
            continue
        m = StepCostModel.from_calibration(cal, "phi-3-mini", 16, 0)
        t = m.step(**TWO)
        assert math.isfinite(t) and t > 0, (t, m.description)
        priced += 1
    assert refused > 50 and priced > 20
