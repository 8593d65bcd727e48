"""Model specs: how many KV-cache bytes a token costs, how many weight bytes a GPU holds and how
much compute a token takes -- from a preset name or a Hugging Face `config.json`.

Presets (figures from each model's published `config.json`, cited per preset; kept as they
were so every earlier replay and cost figure is unchanged):

- qwen2-72b: 80 layers, 8 KV heads (GQA, 64 query heads), head dim 128 -> K and V of
  80 * 8 * 128 elements per token, 320 KiB in bf16.
- deepseek-v2: 60 layers, MLA: one compressed latent of kv_lora_rank 512 plus a decoupled
  RoPE key of 64 per layer (no separate K and V) -> 60 * 576 elements, 67.5 KiB in bf16.
  236 B parameters, 21 B active per token (MoE).
- phi-3-mini: 32 layers, 32 KV heads (no GQA), head dim 96 -> 384 KiB per token in bf16.

A `config.json` (`--model PATH`, a file or the folder holding it) is read by `from_hf_config`:

- **KV per token per layer**: dense attention caches K and V, ``2 x num_key_value_heads x
  head_dim`` elements (head_dim from the config, else hidden_size / num_attention_heads);
  MLA (DeepSeek V2/V3: the config has ``kv_lora_rank``) caches one latent of
  ``kv_lora_rank + qk_rope_head_dim`` elements, as vLLM's MLA backends do.
- **Parameters** are counted matrix by matrix from the config (attention, MLP, experts,
  router, norms, embeddings, LM head unless tied); the multi-token-prediction layers of
  DeepSeek V3 (``num_nextn_predict_layers``) are not counted, as vLLM does not load them
  without speculative decoding. MoE layers: ``n_routed_experts`` / ``num_experts`` /
  ``num_local_experts`` experts of ``moe_intermediate_size`` (Mixtral: ``intermediate_size``),
  ``num_experts_per_tok`` of them active, plus shared experts (``n_shared_experts``, Qwen's
  ``shared_expert_intermediate_size``); dense layers where ``first_k_dense_replace``,
  ``moe_layer_freq``, ``decoder_sparse_step`` or ``mlp_only_layers`` say so.
- **Active parameters per token** (the FLOPs: 2 per parameter per token for the linear layers)
  are the parameters a token's forward pass multiplies: all but the input embedding (a
  lookup) and the experts the router did not pick. The LM head is counted for every token
  (exact for decode; an upper bound for prefill, where vLLM computes logits for the last
  token only).
- **Precision**: weights at ``--dtype`` (default: fp8 when the config's quantization_config is
  fp8, else its torch_dtype), except the embeddings, LM head, norms and routers, which fp8
  checkpoints and vLLM's fp8 quantization keep at 16 bits; KV at ``--kv-dtype`` (default
  ``auto`` as vLLM resolves it, `_checkpoint_kv_dtype`: fp8 where a ModelOpt checkpoint says its
  KV cache is fp8, else the model's 16-bit dtype). A ModelOpt ``hf_quant_config.json`` beside the
  config.json (``<name>_hf_quant_config.json`` beside ``<name>_config.json`` in
  aiconfigurator's naming) is read as its quantization_config when the config has none.
- **Refused with one line** (not modelled): sliding-window attention, hybrid layers (linear
  attention, Mamba, chunked or mixed ``layer_types``), sparse attention with an indexer
  (DeepSeek V3.2, GLM-5: ``index_topk``), and quantizations other than fp8 unless ``--dtype``
  says what width to price the weights at. The MLP is taken as gated (three matrices).

`tensor_parallel` is how many GPUs serve one replica (ideal scaling of compute and bandwidth);
`--tp` sets it (a preset's own value otherwise, 1 for a config). Per GPU, dense attention's KV
heads are split (at least one each, as vLLM replicates them when TP exceeds the KV heads),
MLA's latent is held whole on every GPU, and the weights are split evenly.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from sitsprof.common.jsonin import JsonFileError, read_json_file

from ..errors import UnknownModelError

__all__ = [
    "DEFAULT_MODEL",
    "DTYPE_BYTES",
    "DTYPE_CHOICES",
    "PRESETS",
    "ModelPreset",
    "from_hf_config",
    "get_model",
    "load_hf_config",
]

#: bytes per element of the precisions --dtype / --kv-dtype take
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}
DTYPE_CHOICES = ("auto", "bf16", "fp16", "fp8")
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "bf16", "float": "bf16"}


@dataclass(frozen=True)
class ModelPreset:
    """One model as the cost and step models see it (a preset, or read from a config.json)."""

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    kv_elems_per_token_layer: int  # elements cached per token per layer (K+V, or MLA latent)
    dtype_bytes: int  # bytes per weight element (--dtype); KV too unless kv_dtype_bytes says
    params_active_b: float  # parameters touched per token, billions (prefill FLOPs ~ 2 * this)
    params_total_b: float  # parameters held in HBM (decode reads them each step)
    q_heads: int
    attn_dim: int  # per-head dimension attention scores/values are computed in
    tensor_parallel: int
    source: str
    kv_dtype_bytes: int | None = None  # bytes per KV element (--kv-dtype); None: dtype_bytes
    attention: str = "gqa"  # "gqa" (K and V per KV head) or "mla" (one latent, whole on every GPU)
    params_16bit_b: float = 0.0  # of params_total_b, held at 16 bits whatever --dtype (embeddings, norms)
    experts: int = 0  # routed experts per MoE layer (0: dense)
    experts_active: int = 0  # routed experts a token uses
    shared_experts: int = 0
    moe_layers: int = 0
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    vocab_size: int = 0  # the LM head's width (the profiling run's logits: serving/memory.py); 0 unknown

    @property
    def kv_element_bytes(self) -> int:
        return self.dtype_bytes if self.kv_dtype_bytes is None else self.kv_dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one token holds in the whole tensor-parallel group."""
        return self.layers * self.kv_elems_per_token_layer * self.kv_element_bytes

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """KV bytes one token holds on each GPU of the group: MLA's latent whole on every GPU,
        dense attention's KV heads split (at least one head a GPU)."""
        if self.attention == "mla":
            return float(self.kv_bytes_per_token)
        heads = max(1, self.kv_heads // max(1, self.tensor_parallel))
        return self.kv_bytes_per_token * heads / self.kv_heads

    def kv_bytes(self, tokens) -> float:
        return self.kv_bytes_per_token * tokens

    @property
    def weight_bytes(self) -> float:
        """Weight bytes of the whole model: params_16bit_b at 2 bytes, the rest at dtype_bytes."""
        rest = self.params_total_b - self.params_16bit_b
        return (rest * self.dtype_bytes + self.params_16bit_b * 2) * 1e9

    @property
    def weight_bytes_per_gpu(self) -> float:
        return self.weight_bytes / self.tensor_parallel

    @property
    def active_weight_bytes(self) -> float:
        """Weight bytes one token's forward pass multiplies (active experts only)."""
        share = self.params_active_b / self.params_total_b if self.params_total_b > 0 else 1.0
        return self.weight_bytes * min(share, 1.0)

    @property
    def flops_per_token(self) -> float:
        """Linear-layer FLOPs of one token (2 per active parameter), attention's context term apart."""
        return 2e9 * self.params_active_b

    @property
    def attn_flops_per_token_pair(self) -> float:
        """Attention FLOPs of one (query token, context token) pair: QK^T and PV, 4 x layers x heads x dim."""
        return 4.0 * self.layers * self.q_heads * self.attn_dim

    def with_settings(self, dtype: str | None = None, kv_dtype: str | None = None,
                      tp: int | None = None) -> ModelPreset:
        """This model at another weight precision, KV precision or tensor-parallel size
        (None or "auto": unchanged)."""
        spec = self
        if kv_dtype not in (None, "auto"):
            spec = replace(spec, kv_dtype_bytes=_dtype_bytes(kv_dtype, "--kv-dtype"), kv_dtype=kv_dtype)
        elif spec.kv_dtype_bytes is None:
            spec = replace(spec, kv_dtype_bytes=spec.dtype_bytes)
        if dtype not in (None, "auto"):
            spec = replace(spec, dtype_bytes=_dtype_bytes(dtype, "--dtype"), dtype=dtype)
        if tp is not None:
            spec = replace(spec, tensor_parallel=_check_tp(spec, tp))
        return spec

    def to_dict(self) -> dict:
        return {**asdict(self), "kv_bytes_per_token": self.kv_bytes_per_token,
                "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
                "weight_bytes": self.weight_bytes, "weight_bytes_per_gpu": self.weight_bytes_per_gpu,
                "active_weight_bytes": self.active_weight_bytes, "flops_per_token": self.flops_per_token}

    def describe(self) -> str:
        """One line: what the replay prices (for tables and --help examples)."""
        moe = (f", MoE {self.experts_active}/{self.experts} experts" + (f" + {self.shared_experts} shared"
               if self.shared_experts else "")) if self.experts else ""
        return (f"{self.name}: {self.layers} layers, {self.attention.upper()}{moe}, "
                f"{self.params_total_b:.1f} B params ({self.params_active_b:.1f} B active), weights {self.dtype} "
                f"{self.weight_bytes / 2**30:.1f} GiB, KV {self.kv_dtype} "
                f"{self.kv_bytes_per_token / 1024:g} KiB/token, TP {self.tensor_parallel}")


#: the name the issue and the code use for any model, preset or config-derived
ModelSpec = ModelPreset


PRESETS: dict[str, ModelPreset] = {
    "qwen2-72b": ModelPreset(
        name="qwen2-72b", layers=80, kv_heads=8, head_dim=128, kv_elems_per_token_layer=2 * 8 * 128,
        dtype_bytes=2, params_active_b=72.7, params_total_b=72.7, q_heads=64, attn_dim=128,
        tensor_parallel=4, source="https://huggingface.co/Qwen/Qwen2-72B/blob/main/config.json", vocab_size=152_064,
    ),
    "deepseek-v2": ModelPreset(
        name="deepseek-v2", layers=60, kv_heads=1, head_dim=576, kv_elems_per_token_layer=512 + 64,
        dtype_bytes=2, params_active_b=21.0, params_total_b=236.0, q_heads=128, attn_dim=192,
        tensor_parallel=8, source="https://huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json",
        attention="mla", experts=160, experts_active=6, shared_experts=2, moe_layers=59, vocab_size=102_400,
    ),
    "phi-3-mini": ModelPreset(
        name="phi-3-mini", layers=32, kv_heads=32, head_dim=96, kv_elems_per_token_layer=2 * 32 * 96,
        dtype_bytes=2, params_active_b=3.8, params_total_b=3.8, q_heads=32, attn_dim=96,
        tensor_parallel=1, source="https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json",
        vocab_size=32_064,
    ),
}
DEFAULT_MODEL = "qwen2-72b"


def get_model(name, dtype: str | None = None, kv_dtype: str | None = None, tp: int | None = None) -> ModelPreset:
    """The model `name` names: a preset, or a path to a Hugging Face config.json (or the folder
    holding one), at the given precisions and tensor-parallel size; UnknownModelError otherwise."""
    if isinstance(name, ModelPreset):
        return name.with_settings(dtype, kv_dtype, tp)
    key = str(name).strip().lower()
    if key in PRESETS:
        spec = PRESETS[key]
        return spec if (dtype, kv_dtype, tp) == (None, None, None) else spec.with_settings(dtype, kv_dtype, tp)
    path = Path(str(name)).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return from_hf_config(path, dtype=dtype, kv_dtype=kv_dtype, tp=tp)
    looks_like_path = any(s in str(name) for s in ("/", "\\", ".json"))
    if looks_like_path:
        raise UnknownModelError(f"--model {name}: no such file (give a preset, {', '.join(PRESETS)}, or the path of "
                                "a Hugging Face config.json or of the folder holding one)")
    raise UnknownModelError(f"unknown model preset {name!r}; choose from {', '.join(PRESETS)}, or give the path of "
                            "a Hugging Face config.json")


def _dtype_bytes(text: str, flag: str) -> int:
    key = str(text).strip().lower()
    if key not in DTYPE_BYTES:
        raise UnknownModelError(f"{flag} {text}: choose from {', '.join(DTYPE_CHOICES)}")
    return DTYPE_BYTES[key]


def _check_tp(spec: ModelPreset, tp) -> int:
    """`tp` if vLLM could shard this model over that many GPUs: the query heads divide evenly,
    and the KV heads divide evenly or are replicated (TP a multiple of them)."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise UnknownModelError(f"--tp {tp}: must be a whole number of GPUs, at least 1")
    if spec.q_heads % tp:
        raise UnknownModelError(f"--tp {tp}: {spec.name}'s {spec.q_heads} attention heads do not split evenly over "
                                f"{tp} GPUs (vLLM refuses it); choose a divisor of {spec.q_heads}")
    if spec.attention == "gqa" and spec.kv_heads % tp and tp % spec.kv_heads:
        raise UnknownModelError(f"--tp {tp}: {spec.name}'s {spec.kv_heads} KV heads neither split over nor "
                                f"replicate evenly on {tp} GPUs (vLLM refuses it); choose a divisor or multiple of "
                                f"{spec.kv_heads}")
    return tp


def _name_from_path(path: Path) -> str:
    """`org--Model_config.json` (the naming of AIConfigurator's model_configs) -> org/Model;
    `Model/config.json` -> Model."""
    stem = path.stem
    if stem == "config":
        return path.resolve().parent.name or stem
    if stem.endswith("_config"):
        stem = stem[: -len("_config")]
    return stem.replace("--", "/")


def load_hf_config(path) -> dict:
    """The config.json at `path` as a dict (its `text_config` for a multimodal wrapper)."""
    path = Path(path)
    try:
        raw = read_json_file(path)
    except JsonFileError as exc:
        raise UnknownModelError(f"--model {path}: {exc.problem}; give a Hugging Face config.json") from None
    if not isinstance(raw, dict):
        raise UnknownModelError(f"--model {path}: a config.json holds one JSON object; this holds "
                                f"{type(raw).__name__}")
    cfg = raw
    if isinstance(raw.get("text_config"), dict):  # multimodal wrappers: the language model's config
        cfg = dict(raw["text_config"])
        for key in ("torch_dtype", "quantization_config", "tie_word_embeddings"):
            if key not in cfg and key in raw:
                cfg[key] = raw[key]
    if cfg.get("quantization_config") is None:
        # ModelOpt 0.29 and before write the quantization config to a separate hf_quant_config.json,
        # which vLLM then takes as the quantization_config (vllm 0.14.0
        # vllm/transformers_utils/config.py:686-696; 0.12.0: 612-622)
        side = path.with_name("hf_quant_config.json" if path.name == "config.json"
                              else path.name[: -len("config.json")] + "hf_quant_config.json")
        if path.name.endswith("config.json") and side.is_file():
            try:
                quant = read_json_file(side)
            except JsonFileError as exc:
                raise UnknownModelError(f"--model {path}: {side.name}: {exc.problem}") from None
            if isinstance(quant, dict):
                cfg = {**cfg, "quantization_config": quant}
    return cfg


#: ModelOpt's FP8 algorithms for the weights (vllm 0.14.0
#: vllm/transformers_utils/model_arch_config_convertor.py:146-160, which names them "modelopt")
_MODELOPT_FP8 = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO")


def _modelopt_method(q: dict) -> str:
    """The quant_method vLLM gives a quantization_config: a ModelOpt producer's nested
    ``quantization.quant_algo`` makes it "modelopt" / "modelopt_fp4" (the convertor cited above)."""
    method = str(q.get("quant_method", "")).lower()
    producer = q.get("producer")
    inner = q.get("quantization")
    if isinstance(producer, dict) and producer.get("name") == "modelopt" and isinstance(inner, dict):
        algo = str(inner.get("quant_algo", "")).upper()
        if algo in _MODELOPT_FP8:
            return "modelopt"
        if algo == "NVFP4":
            return "modelopt_fp4"
    return method


def _checkpoint_kv_dtype(cfg: dict) -> str | None:
    """The KV dtype ``kv_cache_dtype=auto`` resolves to from the checkpoint: "fp8" where a ModelOpt
    quantization_config names an fp8 KV cache (``kv_cache_scheme`` / ``kv_cache_quant_algo``, at its
    top level or under ``quantization``), else None (the model's dtype).

    vLLM does this from 0.14.0 (vllm/utils/torch_utils.py:239-319, `get_kv_cache_quant_algo_string`
    and `resolve_kv_cache_dtype_string`, called for the CacheConfig at vllm/engine/arg_utils.py:1398);
    0.12.0 and 0.13.0 do not: their CacheConfig takes ``--kv-cache-dtype`` as given
    (vllm 0.12.0 vllm/engine/arg_utils.py:1397) and ``auto`` is the model's dtype
    (vllm/utils/torch_utils.py:196-201). Only ModelOpt configs are read; a plain fp8 config
    (``quant_method: fp8``, Qwen's and MiniMax's block fp8) keeps a 16-bit KV cache."""
    q = cfg.get("quantization_config")
    if not isinstance(q, dict) or not _modelopt_method(q).startswith("modelopt"):
        return None
    inner = q.get("quantization") if isinstance(q.get("quantization"), dict) else q
    kv = (inner.get("kv_cache_scheme") or q.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
          or q.get("kv_cache_quant_algo"))
    if isinstance(kv, dict):
        fp8 = kv.get("dynamic") is False and kv.get("num_bits") == 8 and kv.get("type") == "float"
        return "fp8" if fp8 else None
    return "fp8" if isinstance(kv, str) and kv.lower() == "fp8" else None


def _refusal(cfg: dict) -> str | None:
    """Why this config's attention is not modelled (None: it is: every layer full attention)."""
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and any(t != "full_attention" for t in layer_types):
        kinds = sorted({str(t) for t in layer_types if t != "full_attention"})
        return (f"hybrid layers ({', '.join(kinds)} beside full attention): their KV per token differs by layer "
                "and is not modelled")
    blocks = cfg.get("layers_block_type")
    if isinstance(blocks, list) and any(t != "attention" for t in blocks if t not in ("moe", "mlp")):
        return "hybrid Mamba/attention layers (layers_block_type) are not modelled"
    for key, what in (("hybrid_override_pattern", "hybrid Mamba/attention layers"),
                      ("index_topk", "sparse attention with a lightning indexer (its own KV cache)"),
                      ("ssm_state_size", "state-space (Mamba) layers"),
                      ("full_attention_interval", "hybrid linear/full attention layers"),
                      ("sliding_window_pattern", "interleaved sliding-window layers"),
                      ("attention_chunk_size", "chunked local attention layers"),
                      ("linear_num_value_heads", "linear attention layers")):
        if cfg.get(key) not in (None, [], ""):
            return f"{what} ({key}) are not modelled"
    window = cfg.get("sliding_window")
    use = cfg.get("use_sliding_window")
    if window not in (None, 0, False) and use is not False:
        return (f"sliding-window attention (sliding_window {window}) keeps only the last window's KV, which the "
                "replay does not model")
    if cfg.get("is_encoder_decoder"):
        return "encoder-decoder models are not modelled"
    return None


def _need(cfg: dict, key: str, path, *alternatives: str):
    for k in (key, *alternatives):
        v = cfg.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return v
    names = " or ".join((key, *alternatives))
    raise UnknownModelError(f"--model {path}: the config has no positive {names}; is it a decoder-only "
                            "Hugging Face config.json?")


def _int(cfg: dict, key: str, default: int, path) -> int:
    """cfg[key] as a whole number (default when absent or null); a clear refusal otherwise."""
    v = cfg.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < 0:
        raise UnknownModelError(f"--model {path}: {key} is {v!r}, not a whole number; is it a Hugging Face "
                                "config.json?")
    return int(v)


def _weight_dtype(cfg: dict, path) -> str | None:
    """The weights' precision the config states: fp8 for an fp8 quantization_config, else its
    torch_dtype; None for another quantization (the caller asks for --dtype)."""
    q = cfg.get("quantization_config")
    if isinstance(q, dict):
        method = str(q.get("quant_method", "")).lower()
        algo = str(q.get("quant_algo", "")).lower()
        if _modelopt_method(q) == "modelopt":
            return "fp8"
        if method == "fp8" or algo == "fp8" or (method == "compressed-tensors" and "float-quantized" in
                                                 str(q.get("format", ""))):
            return "fp8"
        return None
    return _TORCH_DTYPES.get(str(cfg.get("torch_dtype", cfg.get("dtype", "bfloat16"))).lower(), "bf16")


def from_hf_config(path, dtype: str | None = None, kv_dtype: str | None = None, tp: int | None = None,
                   name: str | None = None) -> ModelPreset:
    """The ModelPreset of a Hugging Face config.json (module docstring: what is counted how)."""
    path = Path(path)
    cfg = load_hf_config(path)
    why = _refusal(cfg)
    if why:
        raise UnknownModelError(f"--model {path}: {why}; give a config whose layers are all full attention "
                                "(dense GQA or MLA)")
    h = int(_need(cfg, "hidden_size", path, "d_model", "n_embd"))
    n_layers = int(_need(cfg, "num_hidden_layers", path, "n_layer", "num_layers"))
    n_heads = int(_need(cfg, "num_attention_heads", path, "n_head"))
    vocab = int(_need(cfg, "vocab_size", path))
    kv_heads = int(cfg.get("num_key_value_heads") or n_heads)
    model_type = str(cfg.get("model_type", "")).lower()

    # -- attention (per layer)
    if cfg.get("kv_lora_rank"):
        attention = "mla"
        kvlr = int(cfg["kv_lora_rank"])
        rope = int(_need(cfg, "qk_rope_head_dim", path))
        nope = int(_need(cfg, "qk_nope_head_dim", path))
        v_dim = int(cfg.get("v_head_dim") or nope)
        qlr = int(cfg.get("q_lora_rank") or 0)
        q_params = (h * qlr + qlr + qlr * n_heads * (nope + rope)) if qlr else h * n_heads * (nope + rope)
        attn_params = q_params + h * (kvlr + rope) + kvlr + kvlr * n_heads * (nope + v_dim) + n_heads * v_dim * h
        kv_elems, kv_heads_eff, head_dim, attn_dim = kvlr + rope, 1, kvlr + rope, nope + rope
    else:
        attention = "gqa"
        head_dim = int(cfg.get("head_dim") or h // n_heads)
        bias = cfg.get("attention_bias", model_type in ("qwen2", "qwen2_moe"))
        attn_params = (h * n_heads * head_dim + 2 * h * kv_heads * head_dim + n_heads * head_dim * h
                       + ((n_heads + 2 * kv_heads) * head_dim if bias else 0))
        kv_elems, kv_heads_eff, attn_dim = 2 * kv_heads * head_dim, kv_heads, head_dim

    # -- MLP / experts (per layer)
    n_experts = (_int(cfg, "n_routed_experts", 0, path) or _int(cfg, "num_experts", 0, path)
                 or _int(cfg, "num_local_experts", 0, path))
    top_k = _int(cfg, "num_experts_per_tok", 0, path) or _int(cfg, "experts_per_token", 0, path)
    dense_ff = _int(cfg, "dense_intermediate_size", 0, path) or _int(cfg, "intermediate_size", 0, path)
    moe_layer = [False] * n_layers
    if n_experts:
        if not top_k:
            raise UnknownModelError(f"--model {path}: {n_experts} experts but no num_experts_per_tok")
        first_dense = _int(cfg, "first_k_dense_replace", 0, path)
        freq = cfg.get("moe_layer_freq")
        step = _int(cfg, "decoder_sparse_step", 1, path)
        only_mlp = set(cfg.get("mlp_only_layers") or [])
        if isinstance(freq, list):  # one flag a layer (MiniMax M3)
            if len(freq) != n_layers:
                raise UnknownModelError(f"--model {path}: moe_layer_freq lists {len(freq)} layers, the model has "
                                        f"{n_layers}")
            moe_layer = [bool(f) for f in freq]
        else:
            freq = _int(cfg, "moe_layer_freq", 1, path)
            moe_layer = [i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in only_mlp
                         for i in range(n_layers)]
    n_moe = sum(moe_layer)
    if n_moe < n_layers and not dense_ff:
        _need(cfg, "intermediate_size", path)
    expert_ff = _int(cfg, "moe_intermediate_size", 0, path) or _int(cfg, "intermediate_size", 0, path)
    if n_moe and not expert_ff:
        _need(cfg, "moe_intermediate_size", path)
    n_shared = _int(cfg, "n_shared_experts", 0, path)
    shared_size = _int(cfg, "shared_intermediate_size", 0, path)  # MiniMax M3: each shared expert's width
    shared_ff = n_shared * (shared_size or expert_ff) + _int(cfg, "shared_expert_intermediate_size", 0, path)
    shared_gate = h if cfg.get("shared_expert_intermediate_size") else 0  # Qwen MoE's shared-expert gate
    dense_mlp = 3 * h * dense_ff  # gated MLP: gate, up, down
    expert = 3 * h * expert_ff
    moe_total = n_experts * expert + 3 * h * shared_ff + shared_gate + h * n_experts
    moe_active = top_k * expert + 3 * h * shared_ff + shared_gate + h * n_experts

    norms = 2 * h * n_layers + h
    embed = vocab * h
    lm_head = 0 if cfg.get("tie_word_embeddings", False) else vocab * h
    mlp_total = n_moe * moe_total + (n_layers - n_moe) * dense_mlp
    mlp_active = n_moe * moe_active + (n_layers - n_moe) * dense_mlp
    total = n_layers * attn_params + mlp_total + norms + embed + lm_head
    # the matrices a token multiplies: not the input embedding (a lookup), the LM head always
    active = n_layers * attn_params + mlp_active + vocab * h
    at_16 = norms + embed + lm_head + n_moe * (h * n_experts + shared_gate)

    wdtype = dtype if dtype not in (None, "auto") else _weight_dtype(cfg, path)
    if wdtype is None:
        method = cfg["quantization_config"].get("quant_method") or cfg["quantization_config"].get("quant_algo")
        raise UnknownModelError(f"--model {path}: weights quantized as {method}, which is not modelled; add "
                                "--dtype fp8 or --dtype bf16 to price the weights at that width")
    base = _TORCH_DTYPES.get(str(cfg.get("torch_dtype", cfg.get("dtype", "bfloat16"))).lower(), "bf16")
    kdtype = kv_dtype if kv_dtype not in (None, "auto") else (_checkpoint_kv_dtype(cfg) or base)
    spec = ModelPreset(
        name=name or _name_from_path(path), layers=n_layers, kv_heads=kv_heads_eff, head_dim=head_dim,
        kv_elems_per_token_layer=kv_elems, dtype_bytes=_dtype_bytes(wdtype, "--dtype"),
        params_active_b=active / 1e9, params_total_b=total / 1e9, q_heads=n_heads, attn_dim=attn_dim,
        tensor_parallel=1, source=str(path), kv_dtype_bytes=_dtype_bytes(kdtype, "--kv-dtype"), attention=attention,
        params_16bit_b=at_16 / 1e9, experts=n_experts, experts_active=top_k if n_experts else 0,
        shared_experts=n_shared + (1 if cfg.get("shared_expert_intermediate_size") else 0), moe_layers=n_moe,
        dtype=wdtype, kv_dtype=kdtype, vocab_size=vocab,
    )
    if tp is not None:
        spec = replace(spec, tensor_parallel=_check_tp(spec, tp))
    assert math.isfinite(spec.params_total_b)
    return spec
