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


def _pool_by_hand(model, tp, memory_mib, fraction, dtype=None):
    """The pool in 16-token blocks as SGLang's profile_max_num_token gives it, with the whole GPU
    free at start: free * mem_fraction_static - weights, in whole tokens."""
    spec = from_hf_config(v.config_path(model), dtype=dtype, tp=tp)
    rest = memory_mib * 2**20 * fraction - spec.weight_bytes_per_gpu
    return spec, int(rest // spec.kv_bytes_per_token_per_gpu) // 16


@pytest.mark.parametrize("model, system, tp, version, reserved_mib, fraction", [
    # 0.5.8.post1 server_args.py:988-1031 on an H100 (81559 MiB), TP 1: 512 + 8192 x 1.5 +
    # 256 x 2 + 1/8 x 1024 = 13440 MiB; (81559 - 13440) / 81559 = 0.83521 -> 0.835
    ("Qwen/Qwen3-32B", "h100_sxm", 1, "0.5.8.post1", 13440, 0.835),
    # 0.5.1.post1 server_args.py:374-376 on an H100, TP 4: (9.5 + 4/2) GiB = 11776 MiB; 0.85561 -> 0.856
    ("Qwen/Qwen3-32B", "h100_sxm", 4, "0.5.1.post1", 11776, 0.856),
    # 0.5.1.post1, TP 2: (9.5 + 1) GiB = 10752 MiB; 0.86817 -> 0.868
    ("Qwen/Qwen3-32B", "h100_sxm", 2, "0.5.1.post1", 10752, 0.868),
    # 0.5.6.post2 server_args.py:848-890 on an H200 (143771 MiB), TP 8: 512 + 12288 + 512 x 2 +
    # 8/8 x 1024 = 14848 MiB; 0.89672 -> 0.897
    ("meta-llama/Llama-3.1-8B-Instruct", "h200_sxm", 8, "0.5.6.post2", 14848, 0.897),
    # 0.5.6.post2, TP 2: 512 + 12288 + 256 x 2 + 256 = 13568 MiB; 0.90563 -> 0.906
    ("Qwen/Qwen3-235B-A22B-FP8", "h200_sxm", 2, "0.5.6.post2", 13568, 0.906),
])
def test_sglang_pool_by_hand(model, system, tp, version, reserved_mib, fraction):
    sys_ = v.SYSTEMS[system]
    mib = sys_.memory_bytes // 2**20
    assert sg.sglang_reserved_mib(mib, tp, version) == reserved_mib
    assert sg.sglang_mem_fraction_static(sys_.memory_bytes, tp, version) == fraction
    spec, blocks = _pool_by_hand(model, tp, mib, fraction)
    assert blocks > 0 and sg.sglang_pool_blocks(spec, sys_, tp, version) == blocks


def test_the_rule_follows_the_release():
    # Qwen3-32B at TP 1 on an H100: 0.5.8.post1's reserve (13.1 GiB) leaves a smaller pool than the
    # 0.5.2 table's (9.5 + 1/2) GiB: about 3 GiB, 12k tokens of 256 KiB
    spec = from_hf_config(v.config_path("Qwen/Qwen3-32B"), dtype=None, tp=1)
    h100 = v.SYSTEMS["h100_sxm"]
    new, old = (sg.sglang_pool_blocks(spec, h100, 1, ver) for ver in ("0.5.8.post1", "0.5.2"))
    assert 22_000 < new * 16 < 23_000 and 34_000 < old * 16 < 36_000
    assert sg.sglang_reserved_mib(81559, 1, "0.5.2") == 10 * 1024
    assert sg.sglang_reserved_mib(81559, 1, "0.5.3") == 13440
    # a build without a release number is newer than every release read: the newest rule
    assert sg.sglang_reserved_mib(143771, 4, "nightly-dev") == sg.sglang_reserved_mib(143771, 4, "0.5.8.post1") == 14336
    assert sg.sglang_version("0.5.8.post1") == (0, 5, 8, 1) and sg.sglang_version("glm5-hopper") is None
    # above 160 GiB: 0.5.1.post1's flat 32 GiB, the new rule's 16k chunk and 512 graphs
    assert sg.sglang_reserved_mib(180 * 1024, 8, "0.5.1.post1") == 32 * 1024
    assert sg.sglang_reserved_mib(180 * 1024, 8, "0.5.8.post1") == 512 + 16384 * 1.5 + 1024 + 1024
    # a context held before the weights load shrinks the pool by the fraction of it
    ctx = sg.sglang_pool_blocks(spec, h100, 1, "0.5.8.post1", context_bytes=2**30)
    block = 16 * spec.kv_bytes_per_token_per_gpu
    assert abs((new - ctx) * block - 0.835 * 2**30) < 2 * block


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
