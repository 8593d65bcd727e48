"""`policy validate --backend sglang` (policies/serving/sglang_validate.py): SGLang's KV pool by its
memory rule done by hand, its rows replayed on SGLang's per-op profiles with prefill-alone batches,
the other engine's rows listed with the reason, the CLI flag."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sitsprof.calibration import load_calibration
from sitsprof.policies.cost.models import from_hf_config
from sitsprof.policies.serving import sglang_validate as sg
from sitsprof.policies.serving import validate as v
from sitsprof.policies.serving.silicon import SiliconRow

EXCERPT = Path(__file__).parent / "data" / "silicon_excerpt.csv"


def test_sglang_pool_by_hand():
    spec = from_hf_config(v.config_path("Qwen/Qwen3-32B"), dtype=None, tp=2)
    h100 = v.SYSTEMS["h100_sxm"]
    # 81559 MiB is below 90 GiB: SGLang reserves (9.5 + TP/2) GiB, the weights take the rest of the fraction
    free = 81559 * 2**20 - (9.5 + 1) * 2**30 - spec.weight_bytes_per_gpu
    assert sg.sglang_pool_blocks(spec, h100, 2) == int(free // (spec.kv_bytes_per_token_per_gpu * 16))
    h200 = v.SYSTEMS["h200_sxm"]  # 140.4 GiB: (12 + TP/2) GiB
    assert sg.sglang_reserved_bytes(h200.memory_bytes, 4) == 14 * 2**30
    assert sg.sglang_reserved_bytes(200 * 2**30, 8) == 32 * 2**30


def _row(backend="sglang", **kw):
    base = dict(id="r", backend=backend, backend_version="0.5.1.post1", model="Qwen/Qwen3-32B", system="h100_sxm",
                precision="", mode="agg", isl=1024, osl=128, concurrency=16, tp=4, measured_ttft_ms=492.76,
                measured_tpot_ms=10.55)
    return SiliconRow(**{**base, **kw}, raw={"moe_tp_size": "1", "moe_ep_size": "1"})


def test_an_sglang_row_replays_on_sglangs_profile_with_prefill_alone_batches():
    profiles = v.read_profiles()
    row = _row()
    assert v.profile_key(row) == "sglang|h100_sxm|Qwen/Qwen3-32B|tp4|bf16" and v.profile_key(row) in profiles
    cal = load_calibration(None)
    got = v.replay_row(row, cal, profiles=profiles, overhead_s=v.PROFILED_OVERHEAD_S, backend="sglang")
    assert "reason" not in got and got["predicted_ttft_ms"] > 0 and got["term_share"]["allreduce"] > 0
    assert "sglang|h100_sxm" in got["latency_model"]
    # the same row under the vLLM rules on the same profile: other batches, other figures
    import sitsprof.policies.serving.sglang_validate as mod

    engine = mod.sglang_engine
    try:
        mod.sglang_engine = lambda tp: {**engine(tp), "prefill_first": False}
        mixed = v.replay_row(row, cal, profiles=profiles, overhead_s=v.PROFILED_OVERHEAD_S, backend="sglang")
    finally:
        mod.sglang_engine = engine
    assert mixed["predicted_tpot_ms"] != pytest.approx(got["predicted_tpot_ms"], rel=1e-6)
    # each engine's validation lists the other's rows with the reason
    assert "replays sglang rows" in v.unmodellable(_row(backend="vllm"), "sglang")
    assert "only vLLM" in v.unmodellable(row)


def test_cli_backend_sglang():
    from click.testing import CliRunner

    from sitsprof.cli.main import cli

    res = CliRunner().invoke(cli, ["policy", "validate", "--silicon", str(EXCERPT), "--backend", "sglang", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["backend"] == "sglang" and doc["rows"] and all(r["backend"] == "sglang" for r in doc["rows"])
