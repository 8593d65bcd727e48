"""The step model on a measured per-op profile (latency.py `profile=`, docs/serving-latency.md):
a step is the profile's GEMM, LM-head and all-reduce curves at its token counts, prefill
attention at the profile's rate, the KV bytes at the calibration's bandwidth and the overhead,
added; checked against the same sum done by hand with numpy."""
from __future__ import annotations

import numpy as np
import pytest

from sitsprof.policies.cost.models import get_model
from sitsprof.policies.errors import CostModelError
from sitsprof.policies.serving.latency import StepCostModel

PROFILE = {"grid_tokens": [1, 8, 64, 512, 4096], "gemm_ms": [2.0, 2.2, 3.0, 9.0, 60.0],
           "lm_head_ms": [0.05, 0.06, 0.1, 0.5, 3.0], "allreduce_ms": [0.3, 0.31, 0.4, 1.5, 9.0],
           "attn_tflops": 600.0}


@pytest.mark.parametrize("tokens,running,context,pairs", [(1, 1, 3000, 0.0), (64, 64, 64 * 2000, 0.0),
                                                           (2048, 4, 9000, 2048 * 1500.0), (6000, 8, 20000, 1e7)])
def test_profiled_step_is_the_sum_by_hand(tokens, running, context, pairs):
    spec = get_model("qwen2-72b", tp=4)
    m = StepCostModel.from_calibration(None, spec, 16, 0, profile=PROFILE)
    terms = np.zeros(5)
    got = m.step(prefill_tokens=tokens if pairs else 0, attn_token_pairs=pairs, context_tokens=context,
                 kv_write_tokens=tokens, n_running=running, table_blocks=0, terms=terms)
    g = np.array(PROFILE["grid_tokens"], dtype=float)

    def at(key, x):
        y = np.array(PROFILE[key]) * 1e-3
        if x > g[-1]:  # beyond the grid: the last segment extended
            return y[-2] + (x - g[-2]) / (g[-1] - g[-2]) * (y[-1] - y[-2])
        return float(np.interp(x, g, y))

    from sitsprof.calibration import load_calibration

    cal = load_calibration(None)
    bw = cal["bandwidth"]
    kv = spec.kv_bytes_per_token_per_gpu
    kv_bytes = context * kv + tokens * kv * bw["hbm_read_gbs"] / bw["hbm_write_gbs"]
    memory = kv_bytes / (bw["hbm_read_gbs"] * 1e9)  # the published reference: flat latency, full bandwidth
    attn = pairs * 4 * spec.layers * spec.q_heads * spec.attn_dim / (4 * 600e12)
    compute = at("gemm_ms", tokens) + at("lm_head_ms", running) + attn
    want = compute + memory + at("allreduce_ms", tokens) + 1e-3
    assert got == pytest.approx(want, rel=1e-9)
    np.testing.assert_allclose(terms, [compute, memory, 0.0, 1e-3, at("allreduce_ms", tokens)], rtol=1e-9)


def test_profile_overhead_and_bad_profiles():
    m = StepCostModel.from_calibration(None, "phi-3-mini", 16, 0, profile={**PROFILE, "overhead_ms": 0.25})
    t = np.zeros(5)
    m.step(context_tokens=100, kv_write_tokens=1, n_running=1, terms=t)
    assert t[3] == pytest.approx(0.25e-3)
    for bad in ({**PROFILE, "grid_tokens": [1, 1, 2, 3, 4]}, {**PROFILE, "gemm_ms": [1.0]},
                {**PROFILE, "attn_tflops": 0}):
        with pytest.raises(CostModelError):
            StepCostModel.from_calibration(None, "phi-3-mini", 16, 0, profile=bad)


def test_shipped_profiles_are_sane():
    """The measured curves are not monotone (a GEMM at 384 rows can be slower than at 512: tile
    quantization and kernel choice), so this checks only what holds for any measurement: positive,
    finite, a 16384-row step far dearer than a 1-row one, all-reduce 0 exactly at TP 1."""
    from sitsprof.policies.serving.validate import read_profiles

    profiles = read_profiles()
    assert len(profiles) >= 10
    for key, prof in profiles.items():
        for name in ("gemm_ms", "lm_head_ms"):
            y = np.array(prof[name])
            assert np.isfinite(y).all() and (y > 0).all(), (key, name)
        assert prof["gemm_ms"][-1] > 10 * prof["gemm_ms"][0], key  # 16384 rows compute, 1 row streams weights
        assert (np.array(prof["allreduce_ms"]) == 0).all() == key.removeprefix("sglang|").split("|")[2].startswith(
            "tp1"), key
        StepCostModel.from_calibration(None, "phi-3-mini", 16, 0, profile=prof)  # packs
