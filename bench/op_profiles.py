"""Per-step operation profiles for `policy validate`, from aiconfigurator-core's measured per-op tables.

Run where aiconfigurator-core 0.12.0 and pandas are installed (not a sitsprof dependency):

    /tmp/aic/bin/python bench/op_profiles.py > policies/data/op_profiles.json
    /tmp/aic/bin/python bench/op_profiles.py balanced > /tmp/op_balanced.json   # MoE routing sensitivity

For every (system, model, TP, precision) of a dense model among the silicon table's vLLM
aggregated H100/H200 rows, at a grid of tokens per step M, per GPU, in milliseconds:

* ``gemm_ms[M]``: the layer's four linear GEMMs (QKV, O, gate+up, down; N and K per GPU of the
  TP group) summed over the layers, each looked up in ``systems/data/<system>/gemm/vllm/
  0.24.0/gemm_perf.parquet`` (torch linear for bf16, CutlassFP8ScaledMMLinearKernel for fp8):
  the measured curve over M at the four grid (N, K) corners around the shape, interpolated
  linearly in M, then bilinearly in N and K.
* ``lm_head_ms[M]``: the LM head (bf16) at M = the requests sampling a token this step.
* ``allreduce_ms[M]``: two all-reduces a layer (after attention and after the MLP, Megatron-style
  TP) of M x hidden bf16 elements, from ``comm/vllm/0.24.0/custom_allreduce_perf.parquet`` (the
  CUDA-graph variant up to 512 tokens, vLLM's largest captured batch, eager above; messages
  over 8 MiB from ``comm/nccl/<newest>/nccl_perf.parquet``, all_reduce in half precision, as
  vLLM hands those to NCCL), linear in message size between measured sizes; 0 at TP 1.
* ``attn_tflops``: FlashAttention-3's achieved rate on causal prefill at the model's heads per
  GPU (``attention/vllm/0.24.0/context_attention_perf.parquet``: 4 x heads x dim x isl^2 / 2 FLOPs
  per sequence over the latency, median over batch 1-4 and isl 2048-16384).

MoE models (MiniMax-M2.5, Qwen3-235B-A22B-FP8: block-fp8 checkpoints, ``weight_block_size``
[128, 128]) get the same four curves, the layer being what vLLM runs (`moe_terms`):

* attention QKV and O in ``gemm_ms`` at the per-tensor CUTLASS fp8 curve (the dense fp8 models'
  kernel) standing in for vLLM's block-scaled fp8 linear (W8A8BlockFp8LinearOp): the same
  1-byte weights and fp8 tensor-core rate, plus one scale per 128 x 128 weight block. The
  table's own block-fp8 rows cannot serve: ``DeepGemmFp8BlockScaledMMKernel`` is flat at
  ~85 us from M = 32 to 1024 whatever the shape (a per-call floor, not a GEMM's scaling),
  ``FlashInferFp8BlockScaledMMKernel`` stops at M = 17 (~60 us) and
  ``CutlassFp8BlockScaledMMKernel`` covers only N or K <= 64;
* the router (``gate``, replicated on every GPU, not quantized: bf16 torch linear at N = experts,
  K = hidden; MiniMax-M2 builds it in fp32, vllm/model_executor/models/minimax_m2.py, priced at
  the larger of the bf16 curve and its FLOPs at the 67 TFLOPS fp32 rate of the H100/H200
  datasheets, no fp32 table being shipped);
* the experts in ``gemm_ms`` too (kept apart as ``moe_ms``): ``moe/vllm/0.24.0/moe_perf.parquet``, block
  fp8, at the step's token count, as measured with the router's choices spread as AIConfigurator
  spreads them by default (``power_law_1.01``: sdk/config.py ``workload_distribution`` with
  alpha 1.01). Under TP (vLLM's default: each GPU holds every expert's 1/TP slice) the fused
  Triton MoE kernel's curves at per-GPU intermediate size (inter / moe_tp) measured for the
  model's hidden size, expert count and top-k, linear in that size between the two nearest
  (MiniMax-M2.5 at TP 8: 192, between the measured 128 and 256); under expert parallelism
  (``--enable-expert-parallel``, moe_ep GPUs of E / ep whole experts each) the curve measured at
  that EP size (FlashInfer CUTLASS, the table's only EP kernel for block fp8). The measured time
  at M tokens includes reading the weights of the experts the M tokens were routed to: a few at
  small M (top-k of them for one token), every local expert once M x top-k covers them
  (``moe_active_experts``: the expected distinct experts per GPU, balanced routing);
* all-reduce: two a layer as for a dense model (vLLM all-reduces the MoE output over the TP group
  with or without EP when there is no data parallelism), plus MiniMax-M2's QK-norm: one all-reduce
  a layer of M x 2 fp32 variances at TP > 1 (MiniMaxText01RMSNormTP.forward_qk).

Rows whose MoE group is wider than the attention TP (moe_tp x moe_ep > tp: vLLM data parallelism)
get no profile. Keys of EP profiles end in ``|ep<N>``.
"""
from __future__ import annotations

import csv
import json
import sys
from importlib.resources import files

import numpy as np
import pandas as pd

GRID = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192,
        12288, 16384]
CONFIG_ALIASES = {"meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
                  "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
                  "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B"}
GRAPH_MAX_TOKENS = 512
#: vLLM's custom all-reduce serves messages up to 8 MiB (CustomAllreduce max_size, vllm/distributed/
#: device_communicators/custom_all_reduce.py); larger ones go to NCCL
CUSTOM_AR_MAX_BYTES = 8192 * 1024


def root():
    """The installed aiconfigurator-core (looked up when used, so the pure helpers import without it)."""
    return files("aiconfigurator_core")


def table(system, op, name, backend="vllm", version="0.24.0"):
    return pd.read_parquet(str(root() / "systems" / "data" / system / op / backend / version / name))


class Gemm:
    def __init__(self, df):
        self.curves = {(int(n), int(k)): (g.sort_values("m").m.to_numpy(float), g.sort_values("m").latency.to_numpy())
                       for (n, k), g in df.groupby(["n", "k"])}
        self.ns = sorted({n for n, _ in self.curves})
        self.ks = sorted({k for _, k in self.curves})

    def at(self, m, n, k):
        def bracket(v, grid):
            v = min(max(v, grid[0]), grid[-1])
            i = int(np.searchsorted(grid, v))
            if grid[min(i, len(grid) - 1)] == v:
                return grid[min(i, len(grid) - 1)], grid[min(i, len(grid) - 1)], 0.0
            lo, hi = grid[i - 1], grid[i]
            return lo, hi, (v - lo) / (hi - lo)

        n0, n1, wn = bracket(n, self.ns)
        k0, k1, wk = bracket(k, self.ks)

        def c(nn, kk):
            ms, lat = self.curves[(nn, kk)]
            return float(np.interp(m, ms, lat))

        lo = c(n0, k0) * (1 - wk) + c(n0, k1) * wk
        hi = c(n1, k0) * (1 - wk) + c(n1, k1) * wk
        return lo * (1 - wn) + hi * wn


#: vLLM's router kept in fp32 (ReplicatedLinear(params_dtype=torch.float32)): model_type -> True
ROUTER_FP32 = {"minimax_m2"}
#: FP32 (non-tensor) peak of the H100 SXM and H200 SXM datasheets, teraFLOPS
FP32_TFLOPS = 67.0
MOE_DISTRIBUTION = "power_law_1.01"
MOE_TP_KERNEL = "vllm_fp8moe_triton_tritonexperts"
MOE_EP_KERNEL = "vllm_fp8moe_flashinfer_cutlass_flashinferexperts"


def moe_curve(df, h, inter, topk, experts, moe_tp, moe_ep, distribution=MOE_DISTRIBUTION):
    """The measured block-fp8 MoE layer time (ms) over GRID for one GPU of the group, or None
    when the table does not bracket the shape (module docstring)."""
    sel = df[(df.moe_dtype == "fp8_block") & (df.hidden_size == h) & (df.topk == topk) & (df.num_experts == experts)
             & (df.distribution == distribution)]

    def on_grid(g):
        g = g.sort_values("num_tokens")
        return np.interp(GRID, g.num_tokens.to_numpy(float), g.latency.to_numpy())

    if moe_ep > 1:
        g = sel[(sel.kernel_source == MOE_EP_KERNEL) & (sel.inter_size == inter) & (sel.moe_tp_size == 1)
                & (sel.moe_ep_size == moe_ep)]
        return [float(v) for v in on_grid(g)] if len(g) else None
    sel = sel[(sel.kernel_source == MOE_TP_KERNEL) & (sel.moe_ep_size == 1)]
    curves = {}
    for (i, t), g in sel.groupby(["inter_size", "moe_tp_size"]):
        curves.setdefault(i / t, on_grid(g))  # the kernel sees only the per-GPU slice
    want = inter / moe_tp
    sizes = sorted(curves)
    if not sizes or want < sizes[0] or want > sizes[-1]:
        return None
    j = int(np.searchsorted(sizes, want))
    if sizes[j] == want:
        return [float(v) for v in curves[want]]
    lo, hi = sizes[j - 1], sizes[j]
    w = (want - lo) / (hi - lo)
    return [float(v) for v in curves[lo] * (1 - w) + curves[hi] * w]


def active_experts(m, topk, experts, moe_ep):
    """Expected distinct experts one GPU's weights are read for at m tokens, balanced routing:
    each local expert is missed by a token with probability 1 - topk / experts."""
    return experts / moe_ep * (1.0 - (1.0 - topk / experts) ** m)


def moe_terms(system, cfg, tp, moe_tp, moe_ep, gemm_fp8, gemm_bf16, moe_table, distribution=MOE_DISTRIBUTION):
    """(gemm_ms, moe_ms, extra all-reduce elements per token per layer, notes) of an MoE model, or
    None with no measured MoE curve for its shape (module docstring)."""
    h, L, qh = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    kvh = cfg.get("num_key_value_heads", qh)
    hd = cfg.get("head_dim") or h // qh
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
    topk = cfg["num_experts_per_tok"]
    inter = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    moe = moe_curve(moe_table, h, inter, topk, experts, moe_tp, moe_ep, distribution)
    if moe is None:
        return None
    q_n = (qh // tp + 2 * max(kvh // tp, 1)) * hd
    fp32_router = cfg.get("model_type") in ROUTER_FP32
    gemm = []
    for m in GRID:
        attn = gemm_fp8.at(m, q_n, h) + gemm_fp8.at(m, h, qh // tp * hd)
        router = gemm_bf16.at(m, experts, h)
        if fp32_router:
            router = max(router, 2.0 * m * experts * h / (FP32_TFLOPS * 1e12) * 1e3)
        gemm.append(L * (attn + router))
    moe_ms = [L * v for v in moe]
    # MiniMax-M2's QK-norm all-reduces M x 2 fp32 variances a layer: 4 bf16-sized elements a token
    extra_ar = 4 if (cfg.get("model_type") == "minimax_m2" and tp > 1) else 0
    return [g + e for g, e in zip(gemm, moe_ms)], moe_ms, extra_ar


def moe_keys(rows):
    """(system, model, tp, precision, moe_tp, moe_ep) of the MoE rows the profiles can serve:
    the MoE group is the attention TP group (no data parallelism)."""
    out = set()
    for r in rows:
        tp = int(float(r["tp_size"] or 1))
        mtp, mep = int(float(r["moe_tp_size"] or 1)), int(float(r["moe_ep_size"] or 1))
        if mtp * mep == tp and int(float(r["attention_dp_size"] or 1)) == 1:
            out.add((r["system"], r["model_path"], tp, r["precision"], mtp, mep))
    return out


def allreduce_curve(system, comms, tp, elements_per_token, layers, per_layer=2, backend="vllm"):
    """`per_layer` all-reduces a layer of M x elements_per_token bf16 elements, ms over GRID: the
    engine's custom all-reduce table (its CUDA-graph variant up to the engine's largest graphed
    batch, eager above), NCCL half past CUSTOM_AR_MAX_BYTES; 0 at TP 1."""
    if tp <= 1 or elements_per_token <= 0:
        return [0.0] * len(GRID)
    version, graph_max = (SGLANG_VERSION, sglang_graph_max_bs(tp)) if backend == "sglang" else ("0.24.0",
                                                                                                GRAPH_MAX_TOKENS)
    if (system, backend) not in comms:
        nccl = root() / "systems" / "data" / system / "comm" / "nccl"
        newest = max((d.name for d in nccl.iterdir()), key=lambda t: tuple(int(x) for x in t.split(".")))
        comms[(system, backend)] = (table(system, "comm", "custom_allreduce_perf.parquet", backend, version),
                                    pd.read_parquet(str(nccl / newest / "nccl_perf.parquet")))
    c, nc = comms[(system, backend)]
    ar = []
    for m in GRID:
        if m * elements_per_token * 2 > CUSTOM_AR_MAX_BYTES:
            v = nc[(nc.num_gpus == tp) & (nc.op_name == "all_reduce") & (nc.nccl_dtype == "half")]
        else:
            v = c[(c.num_gpus == tp) & (c.backend == f"{backend}_{'graph' if m <= graph_max else 'eager'}")]
        v = v.sort_values("message_size")
        ar.append(per_layer * layers * float(np.interp(m * elements_per_token, v.message_size.to_numpy(float),
                                                         v.latency.to_numpy())))
    return ar


def attention_rate(system, attn, qh, kvh, hd):
    """FlashAttention-3's median causal-prefill TFLOPS at these heads per GPU, and its point count."""
    if system not in attn:
        attn[system] = table(system, "attention", "context_attention_perf.parquet")
    a = attn[system]
    sel = a[(a.num_heads == qh) & (a.num_key_value_heads == kvh) & (a.head_dim == hd)
            & (a.attn_dtype == "bfloat16") & (a.kv_cache_dtype == "bfloat16") & (a.batch_size <= 4)
            & (a.isl >= 2048) & (a.window_size == 0)]
    rates = 4.0 * sel.num_heads * sel.head_dim * sel.isl ** 2 / 2 * sel.batch_size / (sel.latency * 1e-3) / 1e12
    return (float(rates.median()) if len(rates) else None), int(len(rates))


def gemm_table(gemms, system, kernel, dtype):
    if (system, kernel) not in gemms:
        g = table(system, "gemm", "gemm_perf.parquet")
        gemms[(system, kernel)] = Gemm(g[(g.kernel_source == kernel) & (g.gemm_dtype == dtype)])
    return gemms[(system, kernel)]


def read_config(model):
    return json.loads((root() / "model_configs" / (CONFIG_ALIASES.get(model, model).replace("/", "--")
                                                  + "_config.json")).read_text())


def is_moe(cfg):
    return any(cfg.get(k) for k in ("num_experts", "n_routed_experts", "num_local_experts"))


#: SGLang's per-op tables (the wheel's newest SGLang version with every table the step needs)
SGLANG_VERSION = "0.5.14"
#: SGLang's GEMM per weight format: DeepGEMM for block fp8 (its default on Hopper), sgl-kernel's
#: fp8 scaled-mm for per-tensor fp8, torch linear for bf16
SGLANG_GEMM = {"fp8_block": ("sglang_deepgemm_gemm_nt_f8f8bf16", "fp8_block"),
               "fp8": ("sglang_sgl_kernel_fp8_scaled_mm", "fp8"), "bf16": ("sglang_torch_linear", "bfloat16")}
SGLANG_MOE_KERNEL = "sglang_fused_moe_triton"


def sglang_graph_max_bs(tp):
    """SGLang's largest CUDA-graph decode batch on an 80-160 GB GPU (server_args
    _handle_gpu_memory_settings: 256 below TP 4, else 512); prefill (extend) batches run eager."""
    return 256 if tp < 4 else 512


def sglang_profiles(rows, distribution=MOE_DISTRIBUTION):
    """Profiles of the SGLang aggregated H100/H200 rows the step model can price (dense, or MoE with
    the experts over the TP group), keyed ``sglang|system|model|tpN|precision``: the same terms as
    vLLM's from SGLang's own tables (module docstring), FlashAttention-3 (``fa3``) prefill rates."""
    def n(r, col):
        return int(float(r[col] or 1))

    keys = sorted({(r["system"], r["model_path"], n(r, "tp_size"), r["precision"], r["gemm_quant_mode"] or "bf16",
                    n(r, "moe_tp_size"), n(r, "moe_ep_size")) for r in rows if n(r, "attention_dp_size") == 1})
    gemms, comms, attn, moes, out = {}, {}, {}, {}, {}
    for system, model, tp, prec, gq, moe_tp, moe_ep in keys:
        try:
            cfg = read_config(model)
        except FileNotFoundError:
            continue
        if gq not in SGLANG_GEMM or "hidden_size" not in cfg or cfg.get("layer_types") or cfg.get("kv_lora_rank"):
            continue  # another weight format, a nested (multimodal) config, hybrid attention, MLA: not priced
        h, L, qh = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
        kvh = cfg.get("num_key_value_heads", qh)
        hd = cfg.get("head_dim") or h // qh
        if (system, gq) not in gemms:
            g = table(system, "gemm", "gemm_perf.parquet", "sglang", SGLANG_VERSION)
            for q, (k, dt) in SGLANG_GEMM.items():
                gemms[(system, q)] = Gemm(g[(g.kernel_source == k) & (g.gemm_dtype == dt)])
        G, B = gemms[(system, gq)], gemms[(system, "bf16")]
        q_n = (qh // tp + 2 * max(kvh // tp, 1)) * hd
        attn_shapes = [(q_n, h), (h, qh // tp * hd)]
        entry = {}
        if is_moe(cfg):
            if moe_ep != 1 or moe_tp != tp or gq != "fp8_block":
                continue
            if system not in moes:
                m = table(system, "moe", "moe_perf.parquet", "sglang", SGLANG_VERSION)
                moes[system] = m[m.kernel_source == SGLANG_MOE_KERNEL]
            experts = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
            inter = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
            sel = moes[system]
            sel = sel[(sel.moe_dtype == "fp8_block") & (sel.hidden_size == h) & (sel.inter_size == inter)
                      & (sel.topk == cfg["num_experts_per_tok"]) & (sel.num_experts == experts)
                      & (sel.moe_tp_size == moe_tp) & (sel.moe_ep_size == 1) & (sel.distribution == distribution)]
            if not len(sel):
                continue
            sel = sel.sort_values("num_tokens")
            moe_ms = [L * float(v) for v in np.interp(GRID, sel.num_tokens.to_numpy(float), sel.latency.to_numpy())]
            gemm_ms = [L * (sum(G.at(m, n, k) for n, k in attn_shapes) + B.at(m, experts, h)) + e
                       for m, e in zip(GRID, moe_ms)]
            entry = {"moe_ms": moe_ms,
                     "moe_active_experts": [active_experts(m, cfg["num_experts_per_tok"], experts, 1) for m in GRID],
                     "moe": {"kernel": SGLANG_MOE_KERNEL, "distribution": distribution, "moe_tp": moe_tp,
                             "moe_ep": 1, "experts_per_gpu": experts, "inter_per_gpu": inter / moe_tp}}
        else:
            ff = cfg["intermediate_size"]
            shapes = attn_shapes + [(2 * ff // tp, h), (h, ff // tp)]
            gemm_ms = [L * sum(G.at(m, n, k) for n, k in shapes) for m in GRID]
        if system not in attn:
            a = table(system, "attention", "context_attention_perf.parquet", "sglang", SGLANG_VERSION)
            attn[system] = a[a.kernel_source == "fa3"]
        rate, points = attention_rate(system, attn, qh // tp, max(kvh // tp, 1), hd)
        out[f"sglang|{system}|{model}|tp{tp}|{prec or 'bf16'}"] = {
            "gemm_ms": gemm_ms, "lm_head_ms": [B.at(m, cfg["vocab_size"] // tp, h) for m in GRID],
            "allreduce_ms": allreduce_curve(system, comms, tp, h, L, backend="sglang"), "attn_tflops": rate,
            "attn_points": points,
            **entry, "gemm_kernel": SGLANG_GEMM[gq][0]}
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    distribution = argv[0] if argv else MOE_DISTRIBUTION  # the MoE table's routing (balanced, power_law_1.2)
    rows = [r for r in csv.DictReader((root() / "systems" / "silicon_sample.csv").open(newline=""))
            if r["backend"] == "vllm" and r["mode"] == "agg" and r["system"] in ("h100_sxm", "h200_sxm")]
    keys = sorted({(r["system"], r["model_path"], int(r["tp_size"] or 1), r["precision"]) for r in rows})
    gemms, comms, attn, moes = {}, {}, {}, {}
    out = {"grid_tokens": GRID, "source": "aiconfigurator-core 0.12.0 systems/data/<system>/{gemm,comm,attention}"
           "/vllm/0.24.0 (measured per-op tables), bench/op_profiles.py", "profiles": {}}
    for system, model, tp, prec in keys:
        cfg = read_config(model)
        if is_moe(cfg) or prec not in ("", "fp8"):
            continue
        h, L, qh = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
        kvh = cfg.get("num_key_value_heads", qh)
        hd = cfg.get("head_dim") or h // qh
        ff, vocab = cfg["intermediate_size"], cfg["vocab_size"]
        G = (gemm_table(gemms, system, "CutlassFP8ScaledMMLinearKernel", "fp8") if prec == "fp8"
             else gemm_table(gemms, system, "torch.nn.functional.linear", "bfloat16"))
        B = gemm_table(gemms, system, "torch.nn.functional.linear", "bfloat16")
        q_n = (qh // tp + 2 * max(kvh // tp, 1)) * hd
        shapes = [(q_n, h), (h, qh // tp * hd), (2 * ff // tp, h), (h, ff // tp)]
        gemm_ms = [L * sum(G.at(m, n, k) for n, k in shapes) for m in GRID]
        lm_ms = [B.at(m, vocab // tp, h) for m in GRID]
        rate, points = attention_rate(system, attn, qh // tp, max(kvh // tp, 1), hd)
        out["profiles"][f"{system}|{model}|tp{tp}|{prec or 'bf16'}"] = {
            "gemm_ms": gemm_ms, "lm_head_ms": lm_ms, "allreduce_ms": allreduce_curve(system, comms, tp, h, L),
            "attn_tflops": rate, "attn_points": points}
    for system, model, tp, prec, moe_tp, moe_ep in sorted(moe_keys(rows)):
        cfg = read_config(model)
        if not is_moe(cfg) or prec != "fp8":
            continue
        if system not in moes:
            moes[system] = table(system, "moe", "moe_perf.parquet")
        h, L, qh = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
        kvh = cfg.get("num_key_value_heads", qh)
        hd = cfg.get("head_dim") or h // qh
        got = moe_terms(system, cfg, tp, moe_tp, moe_ep,
                        gemm_table(gemms, system, "CutlassFP8ScaledMMLinearKernel", "fp8"),
                        gemm_table(gemms, system, "torch.nn.functional.linear", "bfloat16"), moes[system],
                        distribution)
        if got is None:
            continue
        gemm_ms, moe_ms, extra_ar = got
        B = gemm_table(gemms, system, "torch.nn.functional.linear", "bfloat16")
        ar = allreduce_curve(system, comms, tp, h, L)
        if extra_ar:
            ar = [a + b for a, b in zip(ar, allreduce_curve(system, comms, tp, extra_ar, L, per_layer=1))]
        rate, points = attention_rate(system, attn, qh // tp, max(kvh // tp, 1), hd)
        experts = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
        key = f"{system}|{model}|tp{tp}|{prec}" + (f"|ep{moe_ep}" if moe_ep > 1 else "")
        out["profiles"][key] = {
            "gemm_ms": gemm_ms, "lm_head_ms": [B.at(m, cfg["vocab_size"] // tp, h) for m in GRID],
            "allreduce_ms": ar, "attn_tflops": rate, "attn_points": points, "moe_ms": moe_ms,
            "moe_active_experts": [active_experts(m, cfg["num_experts_per_tok"], experts, moe_ep) for m in GRID],
            "moe": {"kernel": MOE_EP_KERNEL if moe_ep > 1 else MOE_TP_KERNEL, "distribution": distribution,
                    "moe_tp": moe_tp, "moe_ep": moe_ep, "experts_per_gpu": experts // moe_ep,
                    "inter_per_gpu": (cfg.get("moe_intermediate_size") or cfg["intermediate_size"]) / moe_tp}}
    sglang = [r for r in csv.DictReader((root() / "systems" / "silicon_sample.csv").open(newline=""))
              if r["backend"] == "sglang" and r["mode"] == "agg" and r["system"] in ("h100_sxm", "h200_sxm")]
    out["profiles"].update(sglang_profiles(sglang, distribution))
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
