"""MoE rows of `policy validate` (bench/op_profiles.py's MoE term, docs/VALIDATION.md "MoE"):
the MoE curve looked up at the per-GPU expert slice (interpolated between measured slices), the
EP kernel under expert parallelism, the expected active experts against a Monte Carlo of random
routing, the shipped MoE profiles' shape (few experts' weights at one token, all of them by a few
dozen), and the rows with data parallelism refused with their reason."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sitsprof.policies.serving import validate as v
from sitsprof.policies.serving.silicon import SiliconRow

BENCH = Path(__file__).resolve().parents[1] / "bench" / "op_profiles.py"


@pytest.fixture(scope="module")
def ops():
    spec = importlib.util.spec_from_file_location("op_profiles_under_test", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _table(ops):
    """A synthetic moe_perf table: Triton TP curves for inter 1024 at TP 4 and 8 (per-GPU 256 and
    128), an EP curve at EP 4, and a row of another distribution that must be ignored."""
    rows = []
    for m in ops.GRID:
        rows.append(dict(kernel_source=ops.MOE_TP_KERNEL, moe_dtype="fp8_block", hidden_size=3072, inter_size=1024,
                         topk=8, num_experts=256, moe_tp_size=4, moe_ep_size=1, distribution=ops.MOE_DISTRIBUTION,
                         num_tokens=m, latency=0.02 + 1e-4 * m))
        rows.append(dict(kernel_source=ops.MOE_TP_KERNEL, moe_dtype="fp8_block", hidden_size=3072, inter_size=1024,
                         topk=8, num_experts=256, moe_tp_size=8, moe_ep_size=1, distribution=ops.MOE_DISTRIBUTION,
                         num_tokens=m, latency=0.01 + 0.5e-4 * m))
        rows.append(dict(kernel_source=ops.MOE_EP_KERNEL, moe_dtype="fp8_block", hidden_size=3072, inter_size=1536,
                         topk=8, num_experts=256, moe_tp_size=1, moe_ep_size=4, distribution=ops.MOE_DISTRIBUTION,
                         num_tokens=m, latency=0.03 + 2e-4 * m))
        rows.append(dict(kernel_source=ops.MOE_TP_KERNEL, moe_dtype="fp8_block", hidden_size=3072, inter_size=1024,
                         topk=8, num_experts=256, moe_tp_size=4, moe_ep_size=1, distribution="balanced",
                         num_tokens=m, latency=99.0))
    return pd.DataFrame(rows)


def test_moe_curve_interpolates_the_per_gpu_slice(ops):
    df = _table(ops)
    g = np.array(ops.GRID, dtype=float)
    # 1536 / 8 = 192 per GPU: halfway between the measured 128 (1024 / 8) and 256 (1024 / 4)
    got = ops.moe_curve(df, 3072, 1536, 8, 256, moe_tp=8, moe_ep=1)
    np.testing.assert_allclose(got, 0.5 * (0.02 + 1e-4 * g) + 0.5 * (0.01 + 0.5e-4 * g), rtol=1e-12)
    # a measured slice is read as is
    np.testing.assert_allclose(ops.moe_curve(df, 3072, 1024, 8, 256, moe_tp=4, moe_ep=1), 0.02 + 1e-4 * g)
    # expert parallelism reads the EP kernel's curve at that EP size, whole experts
    np.testing.assert_allclose(ops.moe_curve(df, 3072, 1536, 8, 256, moe_tp=1, moe_ep=4), 0.03 + 2e-4 * g)
    # outside the measured slices, another shape, an unmeasured EP size: no curve
    assert ops.moe_curve(df, 3072, 1536, 8, 256, moe_tp=1, moe_ep=1) is None  # 1536 per GPU > 256
    assert ops.moe_curve(df, 4096, 1536, 8, 128, moe_tp=4, moe_ep=1) is None
    assert ops.moe_curve(df, 3072, 1536, 8, 256, moe_tp=1, moe_ep=8) is None


@pytest.mark.parametrize("m,topk,experts,ep", [(1, 8, 128, 1), (4, 8, 256, 4), (16, 8, 128, 2), (64, 8, 256, 1)])
def test_active_experts_against_random_routing(ops, m, topk, experts, ep):
    rng = np.random.default_rng(7)
    trials = 4000
    local = experts // ep
    seen = np.zeros(trials)
    for t in range(trials):
        picks = np.concatenate([rng.choice(experts, topk, replace=False) for _ in range(m)])
        seen[t] = len(np.unique(picks[picks < local]))  # this GPU holds experts 0 .. local-1
    want = ops.active_experts(m, topk, experts, ep)
    assert seen.mean() == pytest.approx(want, rel=0.02, abs=0.05)


def test_shipped_moe_profiles_read_few_experts_at_one_token():
    profiles = v.read_profiles()
    moe = {k: p for k, p in profiles.items() if "moe_ms" in p}
    assert {k.removeprefix("sglang|").split("|")[1] for k in moe} == {"MiniMaxAI/MiniMax-M2.5",
                                                                       "Qwen/Qwen3-235B-A22B-FP8"}
    assert any(k.startswith("sglang|") for k in moe)  # SGLang's own fused MoE table too
    for key, p in moe.items():
        grid = p["grid_tokens"]
        moe_ms, act = np.array(p["moe_ms"]), np.array(p["moe_active_experts"])
        assert (np.array(p["gemm_ms"]) > moe_ms).all(), key  # the experts are part of the GEMM term
        assert key.endswith(f"|ep{p['moe']['moe_ep']}") == (p["moe"]["moe_ep"] > 1), key
        assert act[-1] == pytest.approx(p["moe"]["experts_per_gpu"]) and (np.diff(act) >= 0).all(), key
        # one token reads its top-k experts (per GPU: at most 8); by 64 tokens nearly every local
        # expert is read, and the measured kernel time says so: at least 3x the one-token time
        assert act[0] <= 8 and act[grid.index(64)] > 0.85 * p["moe"]["experts_per_gpu"], key
        assert moe_ms[grid.index(64)] > 3 * moe_ms[0], key
        # past the point where all weights are read, time grows with tokens (compute)
        assert moe_ms[-1] > 10 * moe_ms[grid.index(64)], key
        assert (np.array(p["allreduce_ms"]) > 0).all(), key


def _row(**kw):
    base = dict(id="x", backend="vllm", backend_version="0.18.0", model="MiniMaxAI/MiniMax-M2.5", system="h200_sxm",
                precision="fp8", mode="agg", isl=1024, osl=64, concurrency=4, tp=8, measured_ttft_ms=106.4,
                measured_tpot_ms=8.0)
    raw = {"moe_tp_size": "8", "moe_ep_size": "1", "attention_dp_size": "1"}
    raw.update(kw.pop("raw", {}))
    return SiliconRow(**{**base, **kw}, raw=raw)


def test_ep_key_and_data_parallel_rows():
    assert v.profile_key(_row()) == "h200_sxm|MiniMaxAI/MiniMax-M2.5|tp8|fp8"
    ep = _row(tp=4, system="h100_sxm", raw={"moe_tp_size": "1", "moe_ep_size": "4"})
    assert v.profile_key(ep) == "h100_sxm|MiniMaxAI/MiniMax-M2.5|tp4|fp8|ep4"
    dp = _row(model="Qwen/Qwen3-235B-A22B-FP8", tp=2, raw={"moe_tp_size": "4", "moe_ep_size": "1",
                                                            "attention_dp_size": ""})
    assert "data parallelism" in v.unmodellable(dp) and "2 engines" in v.unmodellable(dp)
    assert v.unmodellable(_row()) is None and v.unmodellable(ep) is None


def test_an_moe_row_replays_on_its_profile():
    doc = v.replay_row(_row(), {**_cal()}, profiles=v.read_profiles(), overhead_s=v.PROFILED_OVERHEAD_S)
    assert "reason" not in doc, doc.get("reason")
    assert doc["predicted_tpot_ms"] > 0 and doc["term_share"]["allreduce"] > 0
    assert "MiniMax-M2.5|tp8" in doc["latency_model"]
    # the same row at TP 4 with EP 4 on an H100 has its own (EP) profile
    ep = v.replay_row(_row(tp=4, system="h100_sxm", raw={"moe_tp_size": "1", "moe_ep_size": "4"}), _cal(),
                      profiles=v.read_profiles(), overhead_s=v.PROFILED_OVERHEAD_S)
    assert "reason" not in ep and "|ep4" in ep["latency_model"]


def _cal():
    from sitsprof.calibration import load_calibration

    return load_calibration(None)
