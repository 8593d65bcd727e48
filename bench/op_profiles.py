"""Per-step operation profiles for `policy validate`, from aiconfigurator-core's measured per-op tables.

Run where aiconfigurator-core 0.12.0 and pandas are installed (not a sitsprof dependency):

    /tmp/aic/bin/python bench/op_profiles.py > policies/data/op_profiles.json

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
                  "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B"}
GRAPH_MAX_TOKENS = 512
#: vLLM's custom all-reduce serves messages up to 8 MiB (CustomAllreduce max_size, vllm/distributed/
#: device_communicators/custom_all_reduce.py); larger ones go to NCCL
CUSTOM_AR_MAX_BYTES = 8192 * 1024
ROOT = files("aiconfigurator_core")


def table(system, op, name):
    return pd.read_parquet(str(ROOT / "systems" / "data" / system / op / "vllm" / "0.24.0" / name))


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


def main() -> int:
    rows = [r for r in csv.DictReader((ROOT / "systems" / "silicon_sample.csv").open(newline=""))
            if r["backend"] == "vllm" and r["mode"] == "agg" and r["system"] in ("h100_sxm", "h200_sxm")]
    keys = sorted({(r["system"], r["model_path"], int(r["tp_size"] or 1), r["precision"]) for r in rows})
    gemms, comms, attn = {}, {}, {}
    out = {"grid_tokens": GRID, "source": "aiconfigurator-core 0.12.0 systems/data/<system>/{gemm,comm,attention}"
           "/vllm/0.24.0 (measured per-op tables), bench/op_profiles.py", "profiles": {}}
    for system, model, tp, prec in keys:
        cfg = json.loads((ROOT / "model_configs" / (CONFIG_ALIASES.get(model, model).replace("/", "--")
                                                     + "_config.json")).read_text())
        if any(cfg.get(k) for k in ("num_experts", "n_routed_experts", "num_local_experts")) or prec not in ("", "fp8"):
            continue
        h, L, qh = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
        kvh = cfg.get("num_key_value_heads", qh)
        hd = cfg.get("head_dim") or h // qh
        ff, vocab = cfg["intermediate_size"], cfg["vocab_size"]
        dt = ("CutlassFP8ScaledMMLinearKernel", "fp8") if prec == "fp8" else ("torch.nn.functional.linear", "bfloat16")
        if (system, dt) not in gemms:
            g = table(system, "gemm", "gemm_perf.parquet")
            gemms[(system, dt)] = Gemm(g[(g.kernel_source == dt[0]) & (g.gemm_dtype == dt[1])])
            if (system, "bf16") not in gemms:
                gemms[(system, "bf16")] = Gemm(g[(g.kernel_source == "torch.nn.functional.linear")
                                                 & (g.gemm_dtype == "bfloat16")])
        G, B = gemms[(system, dt)], gemms[(system, "bf16")]
        q_n = (qh // tp + 2 * max(kvh // tp, 1)) * hd
        shapes = [(q_n, h), (h, qh // tp * hd), (2 * ff // tp, h), (h, ff // tp)]
        gemm_ms = [L * sum(G.at(m, n, k) for n, k in shapes) for m in GRID]
        lm_ms = [B.at(m, vocab // tp, h) for m in GRID]
        if tp > 1:
            if system not in comms:
                nccl = ROOT / "systems" / "data" / system / "comm" / "nccl"
                newest = max((d.name for d in nccl.iterdir()), key=lambda t: tuple(int(x) for x in t.split(".")))
                comms[system] = (table(system, "comm", "custom_allreduce_perf.parquet"),
                                 pd.read_parquet(str(nccl / newest / "nccl_perf.parquet")))
            c, nc = comms[system]
            ar = []
            for m in GRID:
                if m * h * 2 > CUSTOM_AR_MAX_BYTES:
                    v = nc[(nc.num_gpus == tp) & (nc.op_name == "all_reduce") & (nc.nccl_dtype == "half")]
                else:
                    v = c[(c.num_gpus == tp) & (c.backend == ("vllm_graph" if m <= GRAPH_MAX_TOKENS else "vllm_eager"))]
                v = v.sort_values("message_size")
                ar.append(2 * L * float(np.interp(m * h, v.message_size.to_numpy(float), v.latency.to_numpy())))
        else:
            ar = [0.0] * len(GRID)
        if system not in attn:
            attn[system] = table(system, "attention", "context_attention_perf.parquet")
        a = attn[system]
        sel = a[(a.num_heads == qh // tp) & (a.num_key_value_heads == max(kvh // tp, 1)) & (a.head_dim == hd)
                & (a.attn_dtype == "bfloat16") & (a.kv_cache_dtype == "bfloat16") & (a.batch_size <= 4)
                & (a.isl >= 2048) & (a.window_size == 0)]
        rates = 4.0 * sel.num_heads * sel.head_dim * sel.isl ** 2 / 2 * sel.batch_size / (sel.latency * 1e-3) / 1e12
        out["profiles"][f"{system}|{model}|tp{tp}|{prec or 'bf16'}"] = {
            "gemm_ms": gemm_ms, "lm_head_ms": lm_ms, "allreduce_ms": ar,
            "attn_tflops": float(rates.median()) if len(rates) else None, "attn_points": int(len(rates))}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
