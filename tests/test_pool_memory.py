"""The pool from memory (policies/serving/memory.py): with no -c, the KV blocks a replica's GPUs
hold after the weights and vLLM's profiling reserve; a -c the GPU cannot hold is refused naming
the memory it needs, or replayed with a warning under --allow-oversized-pool (issue 23 item 4).
"""
from __future__ import annotations

import json
import math
import re

import pytest

from sitsprof.policies.cost.models import get_model
from sitsprof.policies.errors import ServingReplayError
from sitsprof.policies.serving import memory

GiB = 2**30

#: vLLM on one H100 (79.18 GiB), default 8192-token budget, as llm-d-benchmark publishes them
#: (config_explorer/empirical-vllm-memory-results.md): model -> (vocab_size, peak activation GiB)
LLMD_RUNS = {
    "Llama-3.1-8B": (128_256, 4.76), "Qwen3-0.6B": (151_936, 5.56),  # the fit
    "gpt-oss-20b": (201_088, 7.38), "Llama-3.3-70B-FP8 TP2": (128_256, 4.84), "Qwen3-32B": (151_936, 5.64),  # held out
}


def test_activation_constant_fitted_on_two_runs_holds_on_three():
    per = {m: act * GiB / (8192 * vocab) for m, (vocab, act) in LLMD_RUNS.items()}
    fit = (per["Llama-3.1-8B"] + per["Qwen3-0.6B"]) / 2
    assert abs(memory.ACTIVATION_BYTES - fit) < 0.005
    for model in ("gpt-oss-20b", "Llama-3.3-70B-FP8 TP2", "Qwen3-32B"):
        vocab, act = LLMD_RUNS[model]
        predicted = memory.ACTIVATION_BYTES * 8192 * vocab / GiB
        assert predicted == pytest.approx(act, rel=0.025), model


def hand_qwen2_72b_tp4_h100() -> int:
    """vLLM's arithmetic by hand: 0.9 x 79.18 GiB - weights (72.7 B params x 2 bytes / 4 GPUs) -
    activation (4.83 x 8192 tokens x 152,064 vocab) - non-torch 0.55 GiB - CUDA graphs 0.5 GiB,
    over one 16-token block's KV on one GPU (80 layers x 2 x 8 KV heads / 4 GPUs x 128 x 2 bytes)."""
    kv = 0.9 * 79.18 * GiB - 72.7e9 * 2 / 4 - 4.83 * 8192 * 152_064 - 0.55 * GiB - 0.5 * GiB
    block = 16 * 80 * 2 * (8 // 4) * 128 * 2
    return math.floor(kv / block)


def test_qwen2_72b_tp4_on_h100_by_hand():
    p = memory.plan(get_model("qwen2-72b"), 16, 8192, gpu="h100")
    assert p.block_bytes == 1_310_720
    assert p.blocks == hand_qwen2_72b_tp4_h100() == 25_194  # 403k tokens, not the 593,103 blocks of 10%
    # twice the GPUs: half the weights a GPU, half a block a GPU
    p8 = memory.plan(get_model("qwen2-72b", tp=8), 16, 8192, gpu="h100")
    assert p8.block_bytes == p.block_bytes / 2 and p8.blocks > 2 * p.blocks


def test_mla_latent_is_whole_on_every_gpu():
    ds = get_model("tests/data/hf_configs/deepseek-ai--DeepSeek-V3_config.json", tp=8)
    p = memory.plan(ds, 16, 8192, gpu="h200")
    assert p.block_bytes == 16 * 61 * 576 * 2  # not divided by 8
    with pytest.raises(ServingReplayError, match="does not fit"):
        memory.pool_blocks(memory.plan(get_model(ds, tp=1), 16, 8192, gpu="h100"))


def _trace(tmp_path):
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    return write_mooncake_jsonl(generate_requests(seed=2, duration_s=20.0), tmp_path / "w.jsonl")


def test_the_cli_sizes_the_pool_and_refuses_what_cannot_fit(tmp_path, capsys):
    from sitsprof.cli.main import main

    trace = str(_trace(tmp_path))
    assert main(["policy", "replay", trace, "--gpu", "h100", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["replay"][0]["capacity"] == hand_qwen2_72b_tp4_h100()
    assert doc["engine"]["pool"]["source"] == "memory" and doc["engine"]["tensor_parallel"] == 4
    # -c 200000 is 244 GiB of KV a GPU: refused in one line naming the memory
    assert main(["policy", "replay", trace, "--gpu", "h100", "-c", "200000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "200,000 blocks needs 244.1 GiB of KV per GPU" in err[0], err
    assert "--allow-oversized-pool" in err[0]
    assert main(["policy", "replay", trace, "--gpu", "h100", "-c", "200000", "--allow-oversized-pool", "--json"]) == 0
    out = capsys.readouterr().out
    (row,) = json.loads(out)["replay"]
    assert row["capacity"] == 200_000 and any("244.1 GiB" in w for w in row["warnings"])
    # memory as the pool: 20 GiB of KV a GPU is floor(20 GiB / 1.25 MiB) blocks
    assert main(["policy", "replay", trace, "--gpu", "h100", "-c", "20GiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["replay"][0]["capacity"] == 20 * 1024 * 1024 // 1280


@pytest.mark.parametrize("text, says", [("0GiB", "is no memory"), ("1KiB", "holds no whole block (1,310,720 bytes")])
def test_memory_that_holds_no_block_is_refused_like_c_0(text, says):
    """-c 0 is refused; so is memory too small for one block (it was taken as a 1-block pool)."""
    from sitsprof.policies.engine.capacity import parse_capacities
    from sitsprof.policies.errors import CapacityError

    with pytest.raises(CapacityError, match=re.escape(says)):
        parse_capacities(text, 1000, block_bytes=1_310_720)
    assert parse_capacities("60GiB", 1000, block_bytes=1_310_720) == [60 * 2**30 // 1_310_720]
