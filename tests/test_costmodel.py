"""Cost model: block costs from presets and calibration, prefix-only reuse, TTFT percentiles."""
from __future__ import annotations

import numpy as np
import pytest

from sitsprof.calibration import CalibrationError, load_calibration
from sitsprof.policies.cost.costmodel import CostModel, latency_summary, ttft_from_costs
from sitsprof.policies.cost.models import PRESETS, get_model
from sitsprof.policies.errors import CostModelError, UnknownModelError
from sitsprof.policies.traces.ids import trace_from_requests


def test_kv_bytes_per_token_from_configs():
    assert get_model("qwen2-72b").kv_bytes_per_token == 2 * 80 * 8 * 128 * 2
    assert get_model("deepseek-v2").kv_bytes_per_token == 60 * (512 + 64) * 2
    assert get_model("phi-3-mini").kv_bytes_per_token == 2 * 32 * 32 * 96 * 2
    with pytest.raises(UnknownModelError) as info:
        get_model("gpt-5")
    assert info.value.exit_code == 2


def _requests(hash_ids, tenant=None, names=()):
    """Full 512-token blocks, all arriving at t=0."""
    return trace_from_requests(hash_ids, arrival_ms=[0] * len(hash_ids),
                               input_tokens=[512 * len(ids) for ids in hash_ids], tenant=tenant, tenant_names=names)


def _trace():
    return _requests([[0, 1, 2], [0, 1, 3]])


def test_hit_cost_is_kv_read_from_hbm():
    cal = load_calibration()
    cm = CostModel(cal)
    hit, miss = cm.block_costs(_trace())
    p = PRESETS["qwen2-72b"]
    expected = p.kv_bytes_per_token * 512 / (cal["bandwidth"]["hbm_read_gbs"] * 1e9 * p.tensor_parallel) + 650 / 1.98e9
    assert hit[0] == pytest.approx(expected)
    assert np.all(miss > 10 * hit)
    assert miss[2] > miss[0]  # attention over a longer prefix costs more


def test_only_the_cached_prefix_is_reused_when_recomputing():
    offsets = np.array([0, 3])
    request = np.zeros(3, dtype=np.int64)
    hit_s, miss_s = np.full(3, 1.0), np.full(3, 10.0)
    # miss, hit, hit: the two hits follow a miss, so they are recomputed
    assert ttft_from_costs(offsets, request, np.array([0, 1, 1]), hit_s, miss_s, True)[0] == 30.0
    assert ttft_from_costs(offsets, request, np.array([1, 1, 0]), hit_s, miss_s, True)[0] == 12.0
    # with host reload, resident blocks past a miss are still read from HBM
    assert ttft_from_costs(offsets, request, np.array([0, 1, 1]), hit_s, miss_s, False)[0] == 12.0


def test_more_hits_mean_lower_ttft_and_percentiles():
    trace = _trace()
    cm = CostModel()
    none = cm.request_ttft(trace, np.zeros(6, dtype=np.uint8))
    some = cm.request_ttft(trace, np.array([0, 0, 0, 1, 1, 0], dtype=np.uint8))
    assert some[0] == none[0] and some[1] < none[1]
    s = cm.summarize(trace, np.zeros(6, dtype=np.uint8))
    assert s["ttft_p50_ms"] <= s["ttft_p95_ms"] <= s["ttft_p99_ms"]
    assert s["prefill_tokens_per_s"] > 0
    assert latency_summary(np.array([1.0, 2.0]))["ttft_mean_ms"] == 1500.0


def test_stacks_use_their_own_preset():
    trace = _requests([[0, 1], [2, 3]], tenant=[0, 1], names=("qwen2-72b", "phi-3-mini"))
    hit, _ = CostModel().block_costs(trace)
    ratio = (PRESETS["qwen2-72b"].kv_bytes_per_token / 4) / PRESETS["phi-3-mini"].kv_bytes_per_token
    lat = 650 / 1.98e9
    assert (hit[0] - lat) / (hit[2] - lat) == pytest.approx(ratio)


def test_bad_configuration_is_refused():
    with pytest.raises(CostModelError):
        CostModel(miss="teleport")
    cal = load_calibration()
    del cal["bandwidth"]["host_to_device_gbs"]
    with pytest.raises(CalibrationError, match="bandwidth.host_to_device_gbs"):
        CostModel(cal, miss="reload")
    cal = load_calibration()
    del cal["compute"]
    with pytest.raises(CalibrationError, match="compute"):
        CostModel(cal)


@pytest.mark.parametrize("miss", ["recompute", "reload"])
def test_compiled_ttft_equals_the_vectorised_sum(miss):
    rng = np.random.default_rng(7)
    hash_ids = [list(rng.integers(0, 40, rng.integers(1, 9))) for _ in range(300)]
    trace = _requests(hash_ids, tenant=list(rng.integers(0, 3, 300)), names=("qwen2-72b", "deepseek-v2", "phi-3-mini"))
    hit = rng.integers(0, 2, len(trace)).astype(np.uint8)
    cm = CostModel(miss=miss)
    hit_s, miss_s = cm.block_costs(trace)
    offsets = trace.request_offsets
    expected = ttft_from_costs(offsets, np.asarray(trace.request), hit, hit_s, miss_s, miss == "recompute")
    expected += cm.decode_step(trace)
    assert np.allclose(cm.request_ttft(trace, hit), expected, rtol=1e-12)
