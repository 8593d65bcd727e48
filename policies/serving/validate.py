"""`sitsprof policy validate`: replay each measured serving run of NVIDIA's silicon table as it ran.

For every vLLM aggregated row on an H100 SXM or H200 SXM (silicon.py) the replay serves the
row's benchmark: a closed loop (workload.py) of ``concurrency`` clients sending ISL random,
unshared tokens and waiting for OSL output tokens, on ``tp`` GPUs of the row's system, with
the row's model config at the row's precision, under vLLM V1's scheduler defaults for an
80 GB-class GPU but the step token budget AIConfigurator's deployments set (`BenchRun`). The
predicted TTFT and TPOT are the replay's means over the requests the benchmark timed (`BenchRun`:
every request of 12 rounds, the start's burst included; the benchmark clients' mean); the
measured ones are the CSV's figures, unchanged.

What "as it ran" takes, and where each figure comes from:

* **The model**: the row's ``model_path`` config.json (policies/cost/models.py `from_hf_config`),
  from the copies shipped in policies/data/model_configs (taken from aiconfigurator-core
  0.12.0's model_configs, NOTICE), else the installed aiconfigurator-core's own; two model
  paths of the table read the config of the same architecture under another name
  (`CONFIG_ALIASES`). Precision ``fp8`` prices weights at 1 byte (vLLM's fp8 keeps the
  embeddings, LM head and norms at 16 bits); an empty precision is the config's dtype; KV is
  vLLM's ``kv_cache_dtype=auto``, the model's 16-bit dtype for every row (no row's config is a
  ModelOpt one naming an fp8 KV cache, and 0.12.0 ignores that anyway: docs/VALIDATION.md).
* **The system** (`SYSTEMS`): HBM capacity and datasheet bandwidth of the H100 SXM and H200
  SXM (NVIDIA datasheets). The calibration (its figures, its loaded-latency curve) is taken as
  measured on its own device and its bandwidths are scaled to the row's system by the
  datasheet ratio (`system_calibration`): the GPU half's measurements enter as shapes and
  fractions, the system sets the scale.
* **The KV pool**: vLLM's ``gpu_memory_utilization`` 0.9 of the GPU's memory, less the
  weights held per GPU and an activation/graph reserve (`ACTIVATION_RESERVE_BYTES`, an
  assumption), over the KV bytes a token holds per GPU, in 16-token blocks.
* **The scheduler**: ``max_num_seqs`` 1024, vLLM V1's default for the OpenAI server on GPUs
  of 70 GiB or more (vllm/engine/arg_utils.py, ``_set_default_args``), chunked prefill on, no
  prefix reuse (the prompts are random). ``max_num_batched_tokens`` (`BenchRun.batched_tokens`):
  ``"aic"``, the rule AIConfigurator's generator writes into the vLLM deployments it makes for
  an aggregated run, batch size + ISL + 1500 (ai-dynamo/aiconfigurator,
  src/aiconfigurator/generator/rule_plugin/benchmark/vllm.rule, ``agg max_num_tokens``), so a
  whole prompt and every running decode fit one step; or ``"vllm"``, vLLM's default 8192 (same
  arg_utils.py). The table does not say which; the choice was made on one half of the rows and
  reported on the other (bench/validate_ttft.py, docs/VALIDATION.md).
* **The benchmark client** (`BenchRun`): the closed loop runs `rounds` requests per client and
  TTFT is the mean over the requests after the first `warmup_rounds` per client (0: every
  client's first request is sent at once and timed, as in aiperf's profiling phase, which starts
  after every warm-up response is back); each request reaches the engine a seeded exponential
  frontend delay after its send (workload.py), counted in its TTFT as the client's clock counts it.

* **The step** (`--step-model profiled`, the default): the per-op profile of the row's system,
  model, TP (and EP) from policies/data/op_profiles.json (bench/op_profiles.py: dense layers, and
  MoE layers on the measured MoE kernels), the per-step overhead PROFILED_OVERHEAD_S.
* **SGLang's rows** (`backend="sglang"`, `--backend sglang`): SGLang's batches, chunk size and
  memory rule and its own per-op tables (sglang_validate.py).

A row that cannot be replayed (another backend, disaggregated, a system without figures,
attention or MoE data parallelism, a config the model reader refuses, weights larger than the
memory, no profile) is listed with its reason.
"""
from __future__ import annotations

import copy
import csv
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..errors import SiliconTableError, UnknownModelError
from .silicon import SiliconRow

__all__ = [
    "ACTIVATION_RESERVE_BYTES",
    "AIC_BATCHED_TOKENS_MARGIN",
    "AIC_ESTIMATES",
    "BENCH_RUN",
    "BLOCK_TOKENS",
    "CONFIG_ALIASES",
    "CONFIG_DIR",
    "DATA",
    "GPU_MEMORY_UTILIZATION",
    "MAX_NUM_BATCHED_TOKENS",
    "MAX_NUM_SEQS",
    "OP_PROFILES",
    "PRECISIONS",
    "PROFILED_OVERHEAD_S",
    "REFERENCE_HBM_SPEC_GBS",
    "ROUNDS",
    "SYSTEMS",
    "VLLM_DEFAULT_BATCHED_TOKENS",
    "BenchRun",
    "System",
    "config_path",
    "medians",
    "pool_blocks",
    "profile_key",
    "read_aic",
    "read_profiles",
    "replay_row",
    "row_model",
    "selected",
    "system_calibration",
    "unmodellable",
    "validate",
]

DATA = Path(__file__).resolve().parents[1] / "data"
CONFIG_DIR = DATA / "model_configs"
AIC_ESTIMATES = DATA / "aic_estimates.csv"
OP_PROFILES = DATA / "op_profiles.json"
#: model paths of the table whose config the wheel ships under another name (same architecture)
CONFIG_ALIASES = {"meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
                  "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
                  "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B"}
BLOCK_TOKENS = 16
MAX_NUM_BATCHED_TOKENS = 8192
MAX_NUM_SEQS = 1024
GPU_MEMORY_UTILIZATION = 0.9
#: activation peak, CUDA graphs and the non-torch allocations vLLM's profile run subtracts before
#: sizing the KV pool: an assumption of the order vLLM logs for 8192-token batches
ACTIVATION_RESERVE_BYTES = 4 * 2**30
#: the shipped hopper-published calibration's device: a GH200 with HBM3, 4.0 TB/s (NVIDIA GH200
#: datasheet); its measured 3614.6 GB/s is 90% of that, the share kept on every system
REFERENCE_HBM_SPEC_GBS = 4000.0
#: requests per client replayed (workload.DEFAULT_ROUNDS)
ROUNDS = 4
#: the profiled step model's per-step overhead (CPU scheduling, launches and the small kernels the
#: profile leaves out: norms, rotary, activation, sampling). FITTED on the silicon table's H200 rows
#: (bench/validate_overhead.py: the least median |TPOT| error among 0.5, 1, 2, 3 ms) and reported on
#: the H100 rows; the H100 rows pick 3 ms. docs/VALIDATION.md shows both.
PROFILED_OVERHEAD_S = 2e-3
#: vLLM's default token budget a step (arg_utils.py, GPUs of 70 GiB or more), the "vllm" rule
VLLM_DEFAULT_BATCHED_TOKENS = MAX_NUM_BATCHED_TOKENS
#: AIConfigurator's generator, aggregated vLLM: max_num_tokens = max_batch_size + ISL + 1500 (vllm.rule)
AIC_BATCHED_TOKENS_MARGIN = 1500


@dataclass(frozen=True)
class BenchRun:
    """How the benchmark that measured a row ran, as far as the replay models it (module
    docstring): requests per client, the leading rounds its TTFT leaves out, the mean frontend
    delay (seconds) and the step token budget rule ("aic" or "vllm"). The shipped defaults
    (`BENCH_RUN`) were chosen on one half of the rows and reported on the other."""

    rounds: int = ROUNDS
    warmup_rounds: int = 1
    frontend_delay_s: float = 0.0
    batched_tokens: str = "vllm"

    def max_num_batched_tokens(self, row: SiliconRow) -> int:
        if self.batched_tokens == "aic":
            return int(row.concurrency + row.isl + AIC_BATCHED_TOKENS_MARGIN)
        if self.batched_tokens == "vllm":
            return VLLM_DEFAULT_BATCHED_TOKENS
        raise SiliconTableError(f"batched-token rule {self.batched_tokens!r}: choose aic or vllm")

    def with_(self, **kw) -> BenchRun:
        return replace(self, **kw)


#: the shipped benchmark model: the H200 half's pick (bench/validate_ttft.py: the least median
#: |TTFT| error on the 197 H200 rows among its candidates; reported on the 153 H100 rows, whose own
#: pick is 8 rounds and a 1 ms delay; docs/VALIDATION.md shows both): 12 rounds a client timed from
#: a start where every client sends at once (aiperf's warm-up is a barrier: its profiling phase
#: starts that way), a 4 ms mean frontend delay, AIConfigurator's step budget
BENCH_RUN = BenchRun(rounds=12, warmup_rounds=0, frontend_delay_s=4e-3, batched_tokens="aic")


@dataclass(frozen=True)
class System:
    name: str
    memory_bytes: int  # what the driver reports (nvidia-smi), the 0.9 of vLLM is taken of this
    hbm_spec_gbs: float
    source: str


SYSTEMS = {
    "h100_sxm": System("h100_sxm", 81559 * 2**20, 3350.0,
                       "NVIDIA H100 Tensor Core GPU datasheet (SXM5 80 GB HBM3, 3.35 TB/s)"),
    "h200_sxm": System("h200_sxm", 143771 * 2**20, 4800.0,
                       "NVIDIA H200 Tensor Core GPU datasheet (SXM 141 GB HBM3e, 4.8 TB/s)"),
}
PRECISIONS = {"fp8": "fp8", "": None, "bf16": "bf16", "fp16": "fp16"}


def config_path(model: str) -> Path | None:
    """The config.json of the table's `model` path: shipped copy, else the installed aiconfigurator-core's."""
    name = CONFIG_ALIASES.get(model, model).replace("/", "--") + "_config.json"
    if (CONFIG_DIR / name).is_file():
        return CONFIG_DIR / name
    import importlib.util

    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is not None and spec.submodule_search_locations:
        p = Path(next(iter(spec.submodule_search_locations))) / "model_configs" / name
        if p.is_file():
            return p
    return None


def read_aic(path=None) -> dict[str, tuple[float | None, float | None, str]]:
    """AIConfigurator's estimates by row id (bench/aic_estimates.py's output): (ttft, tpot, note)."""
    p = Path(path) if path is not None else AIC_ESTIMATES
    if not p.is_file():
        return {}
    out = {}
    with p.open(newline="") as fh:
        for r in csv.DictReader(fh):
            out[r["id"]] = (_num(r["aic_ttft_ms"]), _num(r["aic_tpot_ms"]), r.get("aic_note", ""))
    return out


def read_profiles(path=None) -> dict:
    """The per-op step profiles by "system|model|tpN|precision" (bench/op_profiles.py's output)."""
    import json

    p = Path(path) if path is not None else OP_PROFILES
    if not p.is_file():
        return {}
    doc = json.loads(p.read_text())
    return {k: {**v, "grid_tokens": doc["grid_tokens"], "name": f"aiconfigurator-core per-op tables, {k}"}
            for k, v in doc["profiles"].items()}


def profile_key(row: SiliconRow) -> str:
    """The profile's key: an MoE row run with expert parallelism (moe_ep_size > 1) has its own
    profile (whole experts per GPU, another kernel), keyed with ``|ep<N>``; SGLang's rows read
    SGLang's tables, keyed ``sglang|...``."""
    ep = row.int_field("moe_ep_size")
    return (("sglang|" if row.backend == "sglang" else "") + f"{row.system}|{row.model}|tp{row.tp}|"
            f"{row.precision or 'bf16'}" + (f"|ep{ep}" if ep > 1 else ""))


def _num(text: str) -> float | None:
    return float(text) if text else None


def system_calibration(cal: dict, system: System) -> dict:
    """`cal` with its HBM bandwidths (and its loaded-latency curves' peaks) scaled to `system`
    by the datasheet ratio, and the system's memory (module docstring)."""
    k = system.hbm_spec_gbs / REFERENCE_HBM_SPEC_GBS
    c = copy.deepcopy(cal)
    for key in ("hbm_read_gbs", "hbm_write_gbs"):
        if key in c["bandwidth"]:
            c["bandwidth"][key] *= k
    for curve in c.get("loaded_latency", []):
        if curve.get("tier") == "hbm" and "peak_gbs" in curve:
            curve["peak_gbs"] *= k
    c["device"]["memory_bytes"] = system.memory_bytes
    c["name"] = f"{cal.get('name', 'calibration')} scaled to {system.name}"
    return c


def unmodellable(row: SiliconRow, backend: str = "vllm") -> str | None:
    """Why `row` cannot be replayed as a run of `backend` (vllm, or sglang: sglang_validate.py), or None."""
    if row.backend != backend:
        return (f"backend {row.backend}: only vLLM's scheduler is replayed here" if backend == "vllm" else
                f"backend {row.backend}: this validation replays {backend} rows (--backend)")
    if row.mode != "agg":
        return f"mode {row.mode}: disaggregated prefill/decode is not replayed"
    if row.system not in SYSTEMS:
        return f"system {row.system}: no figures (h100_sxm, h200_sxm)"
    if row.int_field("pp_size") > 1:
        return "pipeline parallelism is not modelled"
    if row.int_field("attention_dp_size") > 1:
        return "attention data parallelism is not modelled"
    moe_gpus = row.int_field("moe_tp_size") * row.int_field("moe_ep_size")
    if moe_gpus > row.tp:
        return (f"data parallelism is not modelled (the MoE layers span {moe_gpus} GPUs, attention TP "
                f"{row.tp}: {moe_gpus // row.tp} engines)")
    if row.precision not in PRECISIONS:
        return f"precision {row.precision}: weights at this width are not modelled (fp8, bf16)"
    if row.concurrency < 1:
        return "the row gives no concurrency"
    return None


def row_model(row: SiliconRow):
    """The ModelPreset of `row` (its config at its precision and TP), or a reason string."""
    from ..cost.models import from_hf_config

    path = config_path(row.model)
    if path is None:
        return f"no config.json for {row.model} (install the aiconfigurator extra)"
    try:
        return from_hf_config(path, dtype=PRECISIONS[row.precision], tp=row.tp, name=row.model)
    except UnknownModelError as exc:
        return str(exc).replace(f"--model {path}: ", "")


def pool_blocks(spec, system: System) -> int:
    """KV blocks of the pool per replica (module docstring); <= 0 when the weights do not fit."""
    free = GPU_MEMORY_UTILIZATION * system.memory_bytes - spec.weight_bytes_per_gpu - ACTIVATION_RESERVE_BYTES
    return int(free // (spec.kv_bytes_per_token_per_gpu * BLOCK_TOKENS))


def replay_row(row: SiliconRow, calibration: dict, aic: dict | None = None, seed: int = 0,
               profiles: dict | None = None, overhead_s: float | None = None, backend: str = "vllm",
               bench: BenchRun | None = None, scaled=None) -> dict:
    """One validation row: the silicon row's fields, measured and predicted TTFT/TPOT, the
    step terms' shares, AIConfigurator's estimate; `reason` set (and no prediction) when
    unmodellable. `profiles` (read_profiles): the measured per-op step profiles, a row without
    one unmodellable; None: the roofline step model for every row. `bench`: how the benchmark
    ran (BenchRun; None: BENCH_RUN). `scaled`: `calibration` already scaled to the row's system
    as a typed Calibration (`validate` makes one per system, not one per row); None: scaled here."""
    from .scheduler import DONE, run_replay
    from .workload import synthetic

    out = {"id": row.id, "backend": row.backend, "backend_version": row.backend_version, "system": row.system,
           "model": row.model, "isl": row.isl, "osl": row.osl, "concurrency": row.concurrency, "tp": row.tp,
           "precision": row.precision, "measured_ttft_ms": row.measured_ttft_ms,
           "measured_tpot_ms": row.measured_tpot_ms}
    a = (aic or {}).get(row.id)
    out["aic_ttft_ms"], out["aic_tpot_ms"] = (a[0], a[1]) if a else (None, None)
    why = unmodellable(row, backend)
    spec = None
    if why is None:
        spec = row_model(row)
        if isinstance(spec, str):
            why, spec = spec, None
    system = SYSTEMS.get(row.system)
    if why is None:
        if backend == "sglang":
            from .sglang_validate import sglang_pool_blocks

            blocks = sglang_pool_blocks(spec, system, row.tp, row.backend_version)
        else:
            blocks = pool_blocks(spec, system)
        need = -(-(row.isl + row.osl - 1) // BLOCK_TOKENS)
        if blocks < need:
            why = (f"the weights ({spec.weight_bytes_per_gpu / 1e9:.0f} GB a GPU) leave no KV pool for one request on "
                   f"{row.tp} x {row.system}")
    profile = None
    if why is None and profiles is not None:
        profile = profiles.get(profile_key(row))
        if profile is None:
            why = "no per-op step profile for this model, system, TP and EP (bench/op_profiles.py)"
    if why is not None:
        out["reason"] = why
        return out
    bench = BENCH_RUN if bench is None else bench
    trace, rb = synthetic(row.concurrency, row.isl, row.osl, bench.rounds * row.concurrency, BLOCK_TOKENS,
                          frontend_delay_s=bench.frontend_delay_s, seed=seed)
    engine = {"max_num_batched_tokens": bench.max_num_batched_tokens(row), "max_num_seqs": MAX_NUM_SEQS}
    if backend == "sglang":  # SGLang's own chunk size and running limit, its prefill-alone batches
        from .sglang_validate import sglang_engine

        engine = sglang_engine(row.tp)
    res = run_replay(trace, "lru", blocks, reblocked=rb, block_tokens=BLOCK_TOKENS, **engine,
                     calibration=system_calibration(calibration, system) if scaled is None else scaled,
                     model=spec, seed=seed,
                     step_profile=profile if overhead_s is None or profile is None
                     else {**profile, "overhead_ms": overhead_s * 1e3})
    done = res.status == DONE
    every = (res.t_first - res.arrival)[done]
    skip = bench.warmup_rounds * row.concurrency
    later = (res.t_first - res.arrival)[skip:][done[skip:]]
    # TTFT after the warm-up rounds: the first round starts every client in one burst, which a
    # benchmark with a warm-up does not time; the rounds left out were chosen on one half of the rows
    # and reported on the other (docs/VALIDATION.md); the mean over every request is kept beside it
    ttft = later if len(later) else every
    outs = res.output_tokens[done]
    tpot = ((res.t_done - res.t_first)[done] / np.maximum(outs - 1, 1))[outs > 1]
    total = float(res.terms.sum())
    out.update({
        "predicted_ttft_ms": float(ttft.mean()) * 1e3 if len(ttft) else None,
        "predicted_tpot_ms": float(tpot.mean()) * 1e3 if len(tpot) else None,
        "predicted_ttft_every_request_ms": float(every.mean()) * 1e3 if len(every) else None,
        "kv_pool_blocks": int(blocks), "preemptions": int(res.summary()["preemptions"]),
        "max_num_batched_tokens": int(engine["max_num_batched_tokens"]),
        "term_share": {k: (float(v) / total if total > 0 else 0.0)
                       for k, v in zip(("compute", "memory", "refetch", "overhead", "allreduce"), res.terms)},
        "latency_model": res.latency_model,
    })
    for k in ("ttft", "tpot"):
        m, p, x = out[f"measured_{k}_ms"], out[f"predicted_{k}_ms"], out[f"aic_{k}_ms"]
        out[f"{k}_error"] = (p / m - 1.0) if p is not None and m > 0 else None
        out[f"aic_{k}_error"] = (x / m - 1.0) if x is not None and m > 0 else None
    return out


def selected(rows: list[SiliconRow], backend: str = "vllm", systems=("h100_sxm", "h200_sxm"),
             mode: str = "agg") -> list[SiliconRow]:
    """The rows `policy validate` reports on (by default vLLM aggregated on H100/H200)."""
    return [r for r in rows if r.backend == backend and r.system in systems and r.mode == mode]


def medians(rows: list[dict]) -> dict:
    """Median |error| of the replay and of AIConfigurator on the rows both predicted, the
    replay's own over every row it predicted, its worst ratio, and counts."""
    def med(key, subset):
        v = [abs(r[key]) for r in subset if r.get(key) is not None]
        return float(np.median(v)) if v else None

    pred = [r for r in rows if r.get("predicted_tpot_ms") is not None]
    both = [r for r in pred if r.get("aic_tpot_ms") is not None]
    worst = 1.0
    for r in pred:
        for k in ("ttft", "tpot"):
            m, p = r[f"measured_{k}_ms"], r[f"predicted_{k}_ms"]
            if p and m:
                worst = max(worst, p / m, m / p)
    return {"rows": len(rows), "matched": len(pred), "unmodellable": len(rows) - len(pred),
            "median_abs_ttft_error": med("ttft_error", pred), "median_abs_tpot_error": med("tpot_error", pred),
            "worst_ratio": worst if pred else None, "both_rows": len(both),
            "median_abs_ttft_error_both": med("ttft_error", both),
            "median_abs_tpot_error_both": med("tpot_error", both),
            "aic_median_abs_ttft_error": med("aic_ttft_error", both),
            "aic_median_abs_tpot_error": med("aic_tpot_error", both)}


def validate(rows: list[SiliconRow], calibration=None, aic_path=None, seed: int = 0, progress=None,
             step_model: str = "profiled", overhead_s: float | None = None, backend: str = "vllm",
             bench: BenchRun | None = None) -> dict:
    """The validation document: {"rows": [...], "summary": medians, "calibration": name};
    `step_model` "profiled" (the per-op profiles) or "roofline" (latency.py without them);
    `bench` how the benchmarks ran (None: BENCH_RUN)."""
    from sitsprof.calibration import Calibration, load_calibration

    cal = load_calibration(calibration) if not isinstance(calibration, dict) else calibration
    # scaled and validated once per system; each row's replay reads it as is
    scaled = {name: Calibration.of(system_calibration(cal, system)) for name, system in SYSTEMS.items()}
    if not rows:
        raise SiliconTableError(f"no rows to validate (the table has no {backend} aggregated H100/H200 row)")
    aic = read_aic(aic_path)
    profiles = read_profiles() if step_model == "profiled" else None
    if overhead_s is None and profiles is not None:
        overhead_s = PROFILED_OVERHEAD_S
    out = []
    for i, r in enumerate(rows):
        out.append(replay_row(r, cal, aic, seed, profiles, overhead_s, backend, bench, scaled.get(r.system)))
        if progress is not None:
            progress(i + 1, len(rows))
    b = BENCH_RUN if bench is None else bench
    return {"calibration": cal.get("name"), "step_model": step_model, "backend": backend, "rows": out,
            "summary": medians(out),
            "bench": {"rounds": b.rounds, "warmup_rounds": b.warmup_rounds,
                      "frontend_delay_ms": b.frontend_delay_s * 1e3, "batched_tokens": b.batched_tokens}}

