"""`--model PATH/config.json` (policies/cost/models.py): KV bytes, weights and FLOPs of a model
read from its Hugging Face config, against hand arithmetic on the config's own numbers and
against the parameter counts the model cards publish.

The configs under tests/data/hf_configs are copied unchanged from AIConfigurator 0.12.0's
`aiconfigurator_core/model_configs` (Apache-2.0, NOTICE): a dense GQA model (Llama 3.1 8B),
MLA with MoE (DeepSeek V3), GQA with MoE (Qwen3 30B-A3B), and one with sliding-window layers
(gpt-oss-20b) that must be refused.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sitsprof.policies.cost.models import PRESETS, from_hf_config, get_model
from sitsprof.policies.errors import UnknownModelError

DATA = Path(__file__).resolve().parent / "data" / "hf_configs"
LLAMA = DATA / "meta-llama--Meta-Llama-3.1-8B_config.json"
DSV3 = DATA / "deepseek-ai--DeepSeek-V3_config.json"
QWEN_MOE = DATA / "Qwen--Qwen3-30B-A3B_config.json"
GPT_OSS = DATA / "openai--gpt-oss-20b_config.json"


def cfg(path: Path) -> dict:
    return json.loads(path.read_text())


def test_kv_bytes_per_token_are_the_configs_arithmetic():
    c = cfg(LLAMA)  # K and V: 2 x layers x KV heads x (hidden / heads) x 2 bytes (bf16)
    hand = 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * (c["hidden_size"] // c["num_attention_heads"]) * 2
    assert hand == 2 * 32 * 8 * 128 * 2 == 131_072
    assert get_model(LLAMA).kv_bytes_per_token == hand
    c = cfg(DSV3)  # MLA: one latent (kv_lora_rank) plus the RoPE key per layer, bf16 (kv_cache_dtype auto)
    hand = c["num_hidden_layers"] * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * 2
    assert hand == 61 * 576 * 2 == 70_272
    assert get_model(DSV3).kv_bytes_per_token == hand
    c = cfg(QWEN_MOE)  # GQA with an explicit head_dim (128, not hidden / heads = 64)
    hand = 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * c["head_dim"] * 2
    assert hand == 2 * 48 * 4 * 128 * 2 == 98_304
    assert get_model(QWEN_MOE).kv_bytes_per_token == hand


def test_kv_dtype_and_per_gpu_split():
    llama = get_model(LLAMA, kv_dtype="fp8", tp=4)
    assert llama.kv_bytes_per_token == 2 * 32 * 8 * 128 * 1
    assert llama.kv_bytes_per_token_per_gpu == 2 * 32 * 2 * 128 * 1  # 8 KV heads over 4 GPUs: 2 each
    assert get_model(LLAMA, tp=16).kv_bytes_per_token_per_gpu == 2 * 32 * 1 * 128 * 2  # replicated: one head each
    ds = get_model(DSV3, tp=8)
    assert ds.kv_bytes_per_token_per_gpu == ds.kv_bytes_per_token == 70_272  # MLA's latent whole on every GPU


def test_parameter_counts_match_the_model_cards():
    """Total and activated parameters against the published ones (the cards count the input
    embedding as activated; the spec's active count leaves the lookup out: added back here)."""
    published = {LLAMA: (8.03, 8.03), DSV3: (671.0, 37.0), QWEN_MOE: (30.5, 3.3)}
    for path, (total, activated) in published.items():
        c = cfg(path)
        spec = from_hf_config(path)
        embed_b = c["vocab_size"] * c["hidden_size"] / 1e9
        assert spec.params_total_b == pytest.approx(total, rel=0.005), path.name
        assert spec.params_active_b + embed_b == pytest.approx(activated, rel=0.02), path.name
        assert spec.flops_per_token == pytest.approx(2e9 * spec.params_active_b)


def test_dense_parameters_by_hand():
    """Llama 3.1 8B matrix by matrix: q, k, v, o; gate, up, down; two norms a layer; the final
    norm; the embedding and the (untied) LM head."""
    h, ff, layers, heads, kvh, vocab = 4096, 14336, 32, 32, 8, 128256
    hd = h // heads
    attn = h * heads * hd + 2 * h * kvh * hd + heads * hd * h
    total = layers * (attn + 3 * h * ff + 2 * h) + h + 2 * vocab * h
    spec = from_hf_config(LLAMA)
    assert spec.params_total_b * 1e9 == pytest.approx(total, rel=1e-12)
    assert spec.params_active_b * 1e9 == pytest.approx(total - vocab * h - layers * 2 * h - h, rel=1e-12)
    assert spec.weight_bytes == pytest.approx(total * 2, rel=1e-12)


def test_moe_active_experts_by_hand():
    """DeepSeek V3: 3 dense layers, then 58 MoE layers of 256 routed experts (8 active) plus one
    shared expert; MLA attention with q_lora_rank."""
    c = cfg(DSV3)
    h, L, H = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    qlr, kvlr, nope, rope, v = (c["q_lora_rank"], c["kv_lora_rank"], c["qk_nope_head_dim"], c["qk_rope_head_dim"],
                                c["v_head_dim"])
    attn = (h * qlr + qlr + qlr * H * (nope + rope)) + (h * (kvlr + rope) + kvlr) + kvlr * H * (nope + v) + H * v * h
    expert = 3 * h * c["moe_intermediate_size"]
    dense = 3 * h * c["intermediate_size"]
    k, n, moe_layers = c["first_k_dense_replace"], c["n_routed_experts"], L - c["first_k_dense_replace"]
    router = h * n
    vh = c["vocab_size"] * h
    total = L * attn + k * dense + moe_layers * (n * expert + expert + router) + (2 * L + 1) * h + 2 * vh
    active = L * attn + k * dense + moe_layers * (c["num_experts_per_tok"] * expert + expert + router) + vh
    spec = from_hf_config(DSV3)
    assert (spec.experts, spec.experts_active, spec.shared_experts, spec.moe_layers) == (256, 8, 1, 58)
    assert spec.params_total_b * 1e9 == pytest.approx(total, rel=1e-12)
    assert spec.params_active_b * 1e9 == pytest.approx(active, rel=1e-12)
    # fp8 checkpoint: weights at 1 byte but norms, embeddings, LM head and routers at 2
    assert spec.dtype == "fp8" and spec.kv_dtype == "bf16"
    at16 = (2 * L + 1) * h + 2 * c["vocab_size"] * h + moe_layers * router
    assert spec.weight_bytes == pytest.approx((total - at16) * 1 + at16 * 2, rel=1e-12)
    assert get_model(DSV3, dtype="bf16").weight_bytes == pytest.approx(total * 2, rel=1e-12)


def test_refusals_are_one_clear_line(tmp_path):
    odd = tmp_path / "config.json"  # 12 query heads, 8 KV heads: TP 6 splits the first, not the second
    odd.write_text(json.dumps({**cfg(LLAMA), "num_attention_heads": 12, "num_key_value_heads": 8,
                               "hidden_size": 1536}))
    with pytest.raises(UnknownModelError, match="KV heads"):
        get_model(odd, tp=6)
    assert get_model(odd, tp=4).kv_bytes_per_token_per_gpu == 2 * 32 * 2 * 128 * 2
    for key, value, says in (("sliding_window", 4096, "sliding"), ("hybrid_override_pattern", "M-M*", "Mamba"),
                             ("layer_types", ["full_attention", "linear_attention"], "hybrid"),
                             ("num_hidden_layers", None, "num_hidden_layers"), ("n_routed_experts", "many", "whole")):
        odd.write_text(json.dumps({**cfg(LLAMA), key: value}))
        with pytest.raises(UnknownModelError, match=says):
            get_model(odd)
    odd.write_text(json.dumps({**cfg(LLAMA), "quantization_config": {"quant_method": "awq"}}))
    with pytest.raises(UnknownModelError, match="--dtype"):
        get_model(odd)
    assert get_model(odd, dtype="bf16").dtype == "bf16"
    with pytest.raises(UnknownModelError, match="sliding"):
        get_model(GPT_OSS)
    with pytest.raises(UnknownModelError, match="no such file"):
        get_model("nowhere/config.json")
    with pytest.raises(UnknownModelError, match="attention heads"):
        get_model(LLAMA, tp=3)
    with pytest.raises(UnknownModelError, match="choose from"):
        get_model("gpt-5")
    odd.write_text("[" * 100_000 + "]" * 100_000)  # json gives up (RecursionError): refused, not a crash
    with pytest.raises(UnknownModelError, match="nested too deeply"):
        get_model(odd)
    odd.write_text("{not json")
    with pytest.raises(UnknownModelError, match="not JSON: .* at line 1; give a Hugging Face config.json"):
        get_model(odd)
    odd.write_bytes(b'{"model_type": "caf\xe9"}')  # Latin-1: the shared reader names the byte
    with pytest.raises(UnknownModelError, match=r"not UTF-8 text \(byte 19"):
        get_model(odd)


def test_presets_keep_their_numbers():
    assert get_model("qwen2-72b") is PRESETS["qwen2-72b"]
    q = get_model("qwen2-72b", dtype="fp8", kv_dtype="fp8", tp=8)
    assert q.tensor_parallel == 8 and q.kv_bytes_per_token == 80 * 2 * 8 * 128
    assert q.weight_bytes == pytest.approx(72.7e9)
    assert PRESETS["qwen2-72b"].weight_bytes == pytest.approx(72.7e9 * 2)


@pytest.mark.parametrize("path", [LLAMA, DSV3, QWEN_MOE], ids=["dense", "mla-moe", "gqa-moe"])
def test_replay_takes_a_config(path, tmp_path, capsys):
    """`policy replay TRACE --model PATH/config.json`: the step model prices that model (its
    KV bytes per GPU, its weights per GPU) and says so."""
    from sitsprof.cli.main import main
    from sitsprof.policies.serving.latency import S_KV_READ, S_WEIGHTS, StepCostModel
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    trace = write_mooncake_jsonl(generate_requests(seed=2, duration_s=20.0), tmp_path / "w.jsonl")
    tp = 8 if path == DSV3 else 1
    assert main(["policy", "replay", str(trace), "-c", "3000", "--model", str(path), "--tp", str(tp), "--gpu", "h200",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    spec = get_model(path, tp=tp)
    (row,) = doc["replay"]
    assert row["completed"] > 0 and f"{spec.name} tp={tp}" in row["latency_model"]
    sc = StepCostModel.from_calibration(None, spec).params[0]
    assert sc[S_KV_READ] == spec.kv_bytes_per_token_per_gpu
    assert sc[S_WEIGHTS] == pytest.approx(spec.weight_bytes / tp)


def test_replay_refuses_a_sliding_window_config(tmp_path, capsys):
    from sitsprof.cli.main import main
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    trace = write_mooncake_jsonl(generate_requests(seed=2, duration_s=5.0), tmp_path / "w.jsonl")
    assert main(["policy", "replay", str(trace), "--model", str(GPT_OSS)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sliding" in err[0], err


# the hf_quant_config.json nvidia/Llama-3.1-70B-Instruct-FP8 ships (aiconfigurator-core 0.12.0's copy)
MODELOPT_FP8_KV = {"producer": {"name": "modelopt", "version": "0.23.0"},
                   "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}


def test_kv_dtype_auto_follows_a_modelopt_checkpoint(tmp_path):
    """`--kv-dtype auto` is vLLM's resolution (0.14 and later): a ModelOpt checkpoint that names an
    fp8 KV cache gets one (1 byte a KV element), its weights are fp8; a block-fp8 config (Qwen's,
    MiniMax's: quant_method fp8, no KV scheme) and a ModelOpt one without a KV algorithm keep 16 bits."""
    fp8_kv = 2 * 32 * 8 * 128 * 1  # K and V x layers x KV heads x head_dim x 1 byte
    fp8_weights = get_model(LLAMA, dtype="fp8").weight_bytes
    # aiconfigurator's naming: <name>_hf_quant_config.json beside <name>_config.json
    side = tmp_path / "aic"
    side.mkdir()
    (side / "nvidia--Llama-3.1-8B-Instruct-FP8_config.json").write_text(json.dumps(cfg(LLAMA)))
    (side / "nvidia--Llama-3.1-8B-Instruct-FP8_hf_quant_config.json").write_text(json.dumps(MODELOPT_FP8_KV))
    spec = from_hf_config(side / "nvidia--Llama-3.1-8B-Instruct-FP8_config.json")
    assert (spec.kv_dtype, spec.kv_bytes_per_token, spec.dtype) == ("fp8", fp8_kv, "fp8")
    assert spec.weight_bytes == fp8_weights
    # Hugging Face's layout: hf_quant_config.json beside config.json
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps(cfg(LLAMA)))
    (hf / "hf_quant_config.json").write_text(json.dumps(MODELOPT_FP8_KV))
    assert get_model(hf / "config.json").kv_bytes_per_token == fp8_kv
    assert get_model(hf / "config.json", kv_dtype="bf16").kv_bytes_per_token == 2 * fp8_kv  # explicit wins
    # in config.json (ModelOpt 0.31+ style), the KV scheme as compressed-tensors writes it
    scheme = {"quant_method": "modelopt", "quant_algo": "FP8",
              "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}
    for q, kv in ((scheme, fp8_kv), ({**scheme, "kv_cache_scheme": None}, 2 * fp8_kv),
                  ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, 2 * fp8_kv),
                  ({**MODELOPT_FP8_KV, "quantization": {"quant_algo": "FP8"}}, 2 * fp8_kv)):
        p = tmp_path / "one_config.json"
        p.write_text(json.dumps({**cfg(LLAMA), "quantization_config": q}))
        spec = from_hf_config(p)
        assert (spec.kv_bytes_per_token, spec.dtype) == (kv, "fp8"), q
