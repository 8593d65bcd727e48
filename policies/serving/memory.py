"""The KV pool a replica's GPUs hold, as vLLM sizes it: what is left of the device's memory
after the weights and the profiling run's reserve, in blocks.

vLLM (v1 `gpu_worker.Worker.determine_available_memory`, vLLM 0.33.0) gives the KV cache

    gpu_memory_utilization x total memory - (weights + peak activation + non-torch memory)
                                          - CUDA graph memory

per GPU (`requested_memory - non_kv_cache_memory - cudagraph_memory_estimate`; the CUDA graph
estimate is applied by default since v0.21), and every GPU of the tensor-parallel group holds
the same number of blocks, each its shard of a block: dense attention's KV heads split over
the group, MLA's latent whole on every GPU (`ModelSpec.kv_bytes_per_token_per_gpu`). So the
replica's pool is ``floor(KV memory per GPU / (block_tokens x KV bytes per token per GPU))``
blocks, its KV memory that times the group's GPUs.

The terms, each stated:

* **Total memory**: what vLLM sees (CUDA's free/total at start): H100 SXM 80 GB 79.18 GiB,
  H200 141 GB 139.81 GiB, as vLLM's own start-up lines print them ("Free memory on device
  (78.57/79.18 GiB)", llm-d-benchmark `config_explorer/empirical-vllm-memory-results.md`;
  "(139.21/139.81 GiB)" in H200 logs); `--gpu` picks one, else the calibration's
  `device.memory_bytes`.
* **Weights**: `ModelSpec.weight_bytes_per_gpu` (the whole model's bytes over the group).
* **Peak activation**: the profiling run's peak is its logits: it grows with the step's token
  budget and the vocabulary, and hardly with the model (0.6 B and 70 B models peak alike).
  ``ACTIVATION_BYTES x max_num_batched_tokens x vocab_size``, ACTIVATION_BYTES fitted on two of
  the five H100 runs llm-d-benchmark publishes at vLLM's default 8192-token budget
  (Llama-3.1-8B 4.76 GiB, Qwen3-0.6B 5.56 GiB) and reported on the other three: gpt-oss-20b
  7.41 vs 7.38 GiB, Llama-3.3-70B-FP8 TP 2 4.73 vs 4.84 GiB, Qwen3-32B 5.60 vs 5.64 GiB (within
  2.3%; tests/test_pool_memory.py recomputes the fit and the errors).
* **Non-torch memory** (CUDA context, NCCL buffers): 0.13 GiB on one GPU, 0.55 GiB a GPU in a
  tensor-parallel group (the same runs: TP 1 and TP 2; one TP > 1 run, so unchecked).
* **CUDA graphs**: 0.5 GiB, an assumption (the logs above report -0.9 to 2.4 GiB).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from sitsprof.common.sizes import GiB

from ..errors import ServingReplayError

__all__ = [
    "ACTIVATION_BYTES",
    "CUDA_GRAPH_BYTES",
    "DEFAULT_VOCAB",
    "GPUS",
    "GPU_MEMORY_UTILIZATION",
    "NON_TORCH_BYTES_TP",
    "NON_TORCH_BYTES_TP1",
    "MemoryPlan",
    "device_memory",
    "oversized",
    "plan",
    "pool_blocks",
    "pool_fields",
    "resolve_pool",
]

#: GPU memory as vLLM sees it (CUDA total at start), and where that figure is printed
GPUS = {
    "h100": ("H100 SXM 80 GB", 79.18 * GiB, "vLLM's start-up line on H100 (llm-d-benchmark, "
             "config_explorer/empirical-vllm-memory-results.md)"),
    "h200": ("H200 141 GB", 139.81 * GiB, "vLLM's start-up line on H200: Free memory on device (139.21/139.81 GiB)"),
}
GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default --gpu-memory-utilization
#: bytes of the profiling run's peak activation per (budget token x vocabulary entry): fitted
#: on Llama-3.1-8B and Qwen3-0.6B (module docstring), checked on three other models
ACTIVATION_BYTES = 4.83
NON_TORCH_BYTES_TP1 = 0.13 * GiB
NON_TORCH_BYTES_TP = 0.55 * GiB
CUDA_GRAPH_BYTES = 0.5 * GiB
#: vocabulary when a model spec does not carry one (the presets': Qwen2's 152,064)
DEFAULT_VOCAB = 152_064


@dataclass(frozen=True)
class MemoryPlan:
    """One replica's memory, per GPU, and the pool it leaves (module docstring)."""

    gpu: str
    total_bytes: float
    utilization: float
    weights_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    cuda_graph_bytes: float
    block_bytes: float  # one block's KV on one GPU of the group
    tensor_parallel: int
    model: str

    @property
    def kv_bytes(self) -> float:
        """KV memory per GPU (negative when the weights and reserve do not fit)."""
        return (self.utilization * self.total_bytes - self.weights_bytes - self.activation_bytes
                - self.non_torch_bytes - self.cuda_graph_bytes)

    @property
    def blocks(self) -> int:
        return max(0, math.floor(self.kv_bytes / self.block_bytes))

    def need_bytes(self, blocks: int) -> float:
        """KV memory per GPU a pool of `blocks` needs."""
        return blocks * self.block_bytes

    def to_dict(self) -> dict:
        return {**asdict(self), "kv_bytes": self.kv_bytes, "blocks": self.blocks}

    def line(self) -> str:
        g = GiB
        return (f"{self.model} TP {self.tensor_parallel} on {self.gpu}: {self.total_bytes / g:.2f} GiB x "
                f"{self.utilization:g} - weights {self.weights_bytes / g:.2f} - activation "
                f"{self.activation_bytes / g:.2f} - non-torch {self.non_torch_bytes / g:.2f} - CUDA graphs "
                f"{self.cuda_graph_bytes / g:.2f} = "
                f"{self.kv_bytes / g:.2f} GiB of KV per GPU, {self.block_bytes / 2**20:.3g} MiB a block per GPU: "
                f"{self.blocks:,} blocks")


def device_memory(gpu: str | None, calibration) -> tuple[str, float]:
    """(name, bytes) of the GPU: `--gpu h100|h200`, else the calibration's device.memory_bytes."""
    if gpu is not None:
        key = str(gpu).strip().lower()
        if key not in GPUS:
            raise ServingReplayError(f"--gpu {gpu}: choose from {', '.join(GPUS)}")
        return GPUS[key][0], GPUS[key][1]
    from sitsprof.calibration import Calibration

    cal = Calibration.of(calibration)
    device = cal.to_json().get("device") or {}
    mem = device.get("memory_bytes")
    if not mem:
        raise ServingReplayError(f"the calibration {cal.name} does not say its device memory: add --gpu h100 "
                                 "or --gpu h200, or give the pool with -c")
    return str(device.get("name") or cal.name), float(mem)


def plan(spec, block_tokens: int, max_num_batched_tokens: int, gpu: str | None = None, calibration=None,
         utilization: float = GPU_MEMORY_UTILIZATION) -> MemoryPlan:
    """The memory plan of one replica of `spec` (a ModelSpec) on `gpu` (or the calibration's device)."""
    if not (0 < utilization <= 1):
        raise ServingReplayError(f"--gpu-memory-utilization {utilization}: must be in (0, 1] (vLLM's default 0.9)")
    name, total = device_memory(gpu, calibration)
    tp = int(spec.tensor_parallel)
    vocab = getattr(spec, "vocab_size", 0) or DEFAULT_VOCAB
    return MemoryPlan(
        gpu=name, total_bytes=total, utilization=float(utilization), weights_bytes=spec.weight_bytes_per_gpu,
        activation_bytes=ACTIVATION_BYTES * max_num_batched_tokens * vocab,
        non_torch_bytes=NON_TORCH_BYTES_TP1 if tp == 1 else NON_TORCH_BYTES_TP, cuda_graph_bytes=CUDA_GRAPH_BYTES,
        block_bytes=block_tokens * spec.kv_bytes_per_token_per_gpu, tensor_parallel=tp, model=spec.name)


def pool_blocks(p: MemoryPlan) -> int:
    """The pool with no -c: what fits; ServingReplayError when the weights and reserve leave nothing."""
    if p.blocks < 1:
        raise ServingReplayError(
            f"{p.model} TP {p.tensor_parallel} does not fit on {p.gpu}: weights {p.weights_bytes / GiB:.1f} GiB a GPU "
            f"plus {(p.activation_bytes + p.non_torch_bytes + p.cuda_graph_bytes) / GiB:.1f} GiB reserved exceed "
            f"{p.utilization:g} x {p.total_bytes / GiB:.2f} GiB; raise --tp, use a larger --gpu, or give the pool "
            "with -c")
    return p.blocks


def oversized(p: MemoryPlan, blocks: int) -> str:
    """'' when `blocks` fit in the plan's KV memory, else why not, naming the memory it needs."""
    if blocks <= p.blocks:
        return ""
    return (f"a pool of {blocks:,} blocks needs {p.need_bytes(blocks) / GiB:,.1f} GiB of KV per GPU "
            f"({p.need_bytes(blocks) * p.tensor_parallel / GiB:,.1f} GiB over TP {p.tensor_parallel}); "
            f"{p.model} on {p.gpu} leaves {max(p.kv_bytes, 0) / GiB:,.1f} GiB ({p.blocks:,} blocks)")


def resolve_pool(config, n_blocks: int) -> tuple[list[int], MemoryPlan | None, dict[int, str]]:
    """The pools of a replay as `config` (a ReplayConfig) on a trace of `n_blocks` blocks:
    (block counts, the memory plan or None where the device's memory is unknown, {pool: why it
    does not fit} for pools taken under `allow_oversized_pool`). No -c: the plan's pool; a -c
    larger than the plan's KV memory: refused in one line naming the memory it needs."""
    from ..engine.capacity import parse_capacities

    spec = config.spec()
    try:
        p = plan(spec, config.block_tokens, config.max_num_batched_tokens, config.gpu, config.calibration,
                 config.gpu_memory_utilization)
    except ServingReplayError:
        if config.capacities is None or config.gpu is not None:
            raise
        p = None  # -c given, the device's memory unknown: nothing to check the pool against
    if config.capacities is None:
        return [pool_blocks(p)], p, {}
    block_bytes = p.block_bytes if p else config.block_tokens * spec.kv_bytes_per_token_per_gpu
    caps = parse_capacities(config.capacities, n_blocks, block_bytes)
    over = {c: oversized(p, c) for c in caps if p is not None and oversized(p, c)}
    if over and not config.allow_oversized_pool:
        c, why = next(iter(over.items()))
        raise ServingReplayError(f"-c {config.capacities}: {why}; lower -c, raise --tp, use a larger --gpu, or add "
                                 "--allow-oversized-pool to replay it anyway")
    return caps, p, over


def pool_fields(p: MemoryPlan | None, given: bool) -> dict:
    """The document's `engine.pool`: where the pool came from and the memory plan behind it."""
    if p is None:
        return {"source": "given (-c)", "plan": None}
    return {"source": "given (-c)" if given else "memory", "plan": p.to_dict(), "line": p.line()}
