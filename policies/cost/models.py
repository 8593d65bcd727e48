"""Model presets: how many KV-cache bytes a token costs and how much compute its prefill takes.

Figures come from each model's published Hugging Face `config.json` (cited per preset):

- qwen2-72b: 80 layers, 8 KV heads (GQA, 64 query heads), head dim 128 -> K and V of
  80 * 8 * 128 elements per token, 320 KiB in bf16.
- deepseek-v2: 60 layers, MLA: one compressed latent of kv_lora_rank 512 plus a decoupled
  RoPE key of 64 per layer (no separate K and V) -> 60 * 576 elements, 67.5 KiB in bf16.
  236 B parameters, 21 B active per token (MoE).
- phi-3-mini: 32 layers, 32 KV heads (no GQA), head dim 96 -> 384 KiB per token in bf16.

`tensor_parallel` is how many GPUs the cost model assumes serve one replica (ideal scaling).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import UnknownModelError


@dataclass(frozen=True)
class ModelPreset:
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    kv_elems_per_token_layer: int  # elements cached per token per layer (K+V, or MLA latent)
    dtype_bytes: int
    params_active_b: float  # parameters touched per token, billions (prefill FLOPs ~ 2 * this)
    params_total_b: float  # parameters held in HBM (decode reads them each step)
    q_heads: int
    attn_dim: int  # per-head dimension attention scores/values are computed in
    tensor_parallel: int
    source: str

    @property
    def kv_bytes_per_token(self) -> int:
        return self.layers * self.kv_elems_per_token_layer * self.dtype_bytes

    def kv_bytes(self, tokens) -> float:
        return self.kv_bytes_per_token * tokens

    def to_dict(self) -> dict:
        return {**asdict(self), "kv_bytes_per_token": self.kv_bytes_per_token}


PRESETS: dict[str, ModelPreset] = {
    "qwen2-72b": ModelPreset(
        name="qwen2-72b", layers=80, kv_heads=8, head_dim=128, kv_elems_per_token_layer=2 * 8 * 128,
        dtype_bytes=2, params_active_b=72.7, params_total_b=72.7, q_heads=64, attn_dim=128,
        tensor_parallel=4, source="https://huggingface.co/Qwen/Qwen2-72B/blob/main/config.json",
    ),
    "deepseek-v2": ModelPreset(
        name="deepseek-v2", layers=60, kv_heads=1, head_dim=576, kv_elems_per_token_layer=512 + 64,
        dtype_bytes=2, params_active_b=21.0, params_total_b=236.0, q_heads=128, attn_dim=192,
        tensor_parallel=8, source="https://huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json",
    ),
    "phi-3-mini": ModelPreset(
        name="phi-3-mini", layers=32, kv_heads=32, head_dim=96, kv_elems_per_token_layer=2 * 32 * 96,
        dtype_bytes=2, params_active_b=3.8, params_total_b=3.8, q_heads=32, attn_dim=96,
        tensor_parallel=1, source="https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json",
    ),
}
DEFAULT_MODEL = "qwen2-72b"


def get_model(name: str) -> ModelPreset:
    """The preset called `name`; UnknownModelError listing the choices otherwise."""
    key = str(name).strip().lower()
    if key not in PRESETS:
        raise UnknownModelError(f"unknown model preset {name!r}; choose from {', '.join(PRESETS)}")
    return PRESETS[key]
