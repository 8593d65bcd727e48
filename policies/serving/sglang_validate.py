"""`sitsprof policy validate --backend sglang`: the SGLang rows of NVIDIA's silicon table, replayed
as SGLang schedules them (docs/VALIDATION.md "SGLang rows").

What differs from the vLLM replay (validate.py), each from SGLang 0.5.x's own defaults for an
80-160 GB GPU (python/sglang/srt/server_args.py, ``_handle_gpu_memory_settings`` and
``_handle_mem_fraction_static``):

* **Batches**: a step with prefill work runs it alone and the running decodes wait
  (``enable_mixed_chunk`` off, the default: the scheduler's ``get_next_batch_to_run`` builds a
  prefill batch whenever the PrefillAdder admits a request or a chunked prompt continues, and a
  decode batch otherwise): ReplayConfig.prefill_first, scheduler RULE_PREFILL_FIRST.
* **Chunked prefill**: ``chunked_prefill_size`` 8192 tokens a prefill batch (H100 and H200).
* **The KV pool**: the memory rule of the SGLang release each row ran (its ``backend_version``;
  ``sglang_reserved_mib``): ``mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3)``
  (gpu_mem in MiB, what nvidia-smi reports), where ``reserved`` is, up to 0.5.2, (9.5 + TP/2) GiB
  below 90 GiB of GPU memory (H100) and (12 + TP/2) GiB below 160 GiB (H200), and from 0.5.3
  512 MiB + 1.5 MiB per token of ``chunked_prefill_size`` (8192) + 2 MiB per ``cuda_graph_max_bs``
  (256 below TP 4, 512 from it) + TP/8 GiB, at least 10 GiB above 60 GiB of GPU memory. The
  fraction is taken of the memory free when the engine starts, before the weights load
  (``min_per_gpu_memory``), and the pool is what it leaves after them: ``rest_memory =
  available_after_weights - free_at_start * (1 - mem_fraction_static)``, i.e. ``free_at_start *
  mem_fraction_static - weights`` (model_runner ``profile_max_num_token``). The free memory at
  start is taken as the whole GPU (no CUDA context: the rule's upper bound; ``context_bytes``).
  No ``max_total_tokens`` cap (SGLang sets none by default), page size 1 (the pool in tokens,
  rounded down to the replay's blocks); the CUDA graphs and the request-to-token table are
  allocated after the pool is sized, out of ``reserved``. Cited per release in
  ``SGLANG_MEMORY_RULES``.
* **The cache**: SGLang's radix tree (``--engine sglang``); the prompts are random, so it never hits.
* **The step**: the per-op profile built from SGLang's own tables (bench/op_profiles.py
  ``sglang_profiles``: DeepGEMM block fp8, sgl-kernel fp8, torch bf16, SGLang's custom all-reduce
  with CUDA graphs up to ``cuda_graph_max_bs``, its fused Triton MoE, FlashAttention-3).

* **Admission**: SGLang's PrefillAdder (ReplayConfig.sglang_admission, sglang_admission.py): a
  request is admitted when its prompt, its outputs and the running requests' remaining outputs
  fit (outputs reserved whole: the benchmark's requests are ignore_eos, SGLANG_IGNORE_EOS), and
  decodes are retracted when the pool runs out; checked against SGLang's own code
  (tests/test_serving_sglang_admission.py).

What stays outside: the overlap scheduler (CPU scheduling of the next batch hidden under the
current one) is not modelled beyond the per-step overhead, which stays
validate.PROFILED_OVERHEAD_S (fitted on vLLM's H200 rows).
"""
from __future__ import annotations

__all__ = [
    "SGLANG_CHUNKED_PREFILL",
    "SGLANG_CHUNK_RULE_SINCE",
    "SGLANG_IGNORE_EOS",
    "SGLANG_MAX_RUNNING",
    "SGLANG_MEMORY_RULES",
    "sglang_cuda_graph_max_bs",
    "sglang_engine",
    "sglang_mem_fraction_static",
    "sglang_pool_blocks",
    "sglang_reserved_mib",
    "sglang_version",
]

#: SGLang's chunked_prefill_size on 80-160 GB GPUs (server_args._handle_gpu_memory_settings)
SGLANG_CHUNKED_PREFILL = 8192
#: most running requests: SGLang derives max_running_requests from the pool (far above the rows'
#: 4-160 clients); 1024 keeps the replay's bound out of the way as in validate.py
SGLANG_MAX_RUNNING = 1024
#: the benchmark's requests are ignore_eos: every row's output is exactly its OSL, which is how a
#: fixed-length serving benchmark asks for it (SGLang's bench_serving sends ignore_eos unless
#: --disable-ignore-eos: python/sglang/benchmark/serving.py:289-317); SGLang then reserves a
#: running request's whole remaining output (ratio 1)
SGLANG_IGNORE_EOS = True


#: where each release's rule is (the sources `pip download sglang==<version> --no-deps`): the
#: reserve in server_args.py, the pool in profile_max_num_token, the memory it is taken of
#: (get_available_gpu_memory after init_torch_distributed, passed as total_gpu_memory)
SGLANG_MEMORY_RULES = {
    "0.5.1.post1": "server_args.py:353-393 (reserve by GPU size); model_runner.py:618-622 "
                   "(min_per_gpu_memory), :1044-1077 (profile_max_num_token), :1232-1236 (page rounding)",
    "0.5.2": "server_args.py:466-496 (reserve by GPU size, as 0.5.1.post1)",
    "0.5.3": "server_args.py:637-675 (_handle_gpu_memory_settings: reserve from chunk and graphs)",
    "0.5.6.post2": "server_args.py:803-822 (chunk 8192, cuda_graph_max_bs 256/512), :848-890 (reserve); "
                   "model_runner.py:697 (min_per_gpu_memory), :1363-1444 (profile_max_num_token)",
    "0.5.8.post1": "server_args.py:934-953 (chunk 8192, cuda_graph_max_bs 256/512), :988-1031 (reserve); "
                   "model_runner.py:779-803 (min_per_gpu_memory); model_runner_kv_cache_mixin.py:111-144 "
                   "(profile_max_num_token), :252-312 (no max_total_tokens cap by default, page rounding)",
}
#: the first release whose reserve is built from the chunk size and the CUDA graphs (0.5.2 has the
#: per-GPU-size table, 0.5.3 the new rule: both sources read)
SGLANG_CHUNK_RULE_SINCE = (0, 5, 3)


def sglang_version(version: str | None) -> tuple[int, ...] | None:
    """(major, minor, patch, post) of an SGLang release name ("0.5.8.post1" -> (0, 5, 8, 1));
    None for a build without a release number (nightly-dev, a named image), which is newer than any
    release the rules here were read from."""
    parts = (version or "").strip().lstrip("v").split(".")
    try:
        nums = [int(p) for p in parts[:3]]
        post = int(parts[3][4:]) if len(parts) > 3 and parts[3].startswith("post") else 0
    except ValueError:
        return None
    return (*nums, post) if len(nums) == 3 else None


def sglang_cuda_graph_max_bs(tp: int) -> int:
    """cuda_graph_max_bs on 60-160 GiB GPUs from 0.5.3: 256 below TP 4, 512 from it."""
    return 256 if tp < 4 else 512


def sglang_reserved_mib(gpu_mem_mib: float, tp: int, version: str | None) -> float:
    """SGLang's reserve for activations and CUDA graphs, in MiB (its unit), by release (module
    docstring; SGLANG_MEMORY_RULES): single GPU engines, no pipeline, speculation or DP attention."""
    ver = sglang_version(version)
    if ver is not None and ver[:3] < SGLANG_CHUNK_RULE_SINCE:
        if gpu_mem_mib < 90 * 1024:
            return (9.5 + tp / 2) * 1024
        if gpu_mem_mib < 160 * 1024:
            return (12 + tp / 2) * 1024
        return 32 * 1024
    chunk = SGLANG_CHUNKED_PREFILL if gpu_mem_mib < 160 * 1024 else 16384
    graphs = sglang_cuda_graph_max_bs(tp) if gpu_mem_mib < 160 * 1024 else 512
    reserved = 512 + max(chunk, 2048) * 1.5 + graphs * 2 + tp / 8 * 1024
    return max(reserved, 10 * 1024) if gpu_mem_mib > 60 * 1024 else reserved


def sglang_mem_fraction_static(memory_bytes: int, tp: int, version: str | None) -> float:
    """SGLang's default mem_fraction_static: (gpu_mem - reserved) / gpu_mem to 3 decimals."""
    gpu_mem = memory_bytes / 2**20
    return round((gpu_mem - sglang_reserved_mib(gpu_mem, tp, version)) / gpu_mem, 3)


def sglang_pool_blocks(spec, system, tp: int, version: str | None, block_tokens: int = 16,
                       context_bytes: int = 0) -> int:
    """KV blocks SGLang's pool holds per GPU (module docstring): the fraction of the memory free at
    start (the GPU less `context_bytes`) less the weights, in whole tokens, in whole blocks; <= 0
    when the weights do not fit."""
    free_at_start = system.memory_bytes - context_bytes
    rest = free_at_start * sglang_mem_fraction_static(system.memory_bytes, tp, version) - spec.weight_bytes_per_gpu
    tokens = int(rest // spec.kv_bytes_per_token_per_gpu)
    return tokens // block_tokens


def sglang_engine(tp: int) -> dict:
    """The ReplayConfig fields of an SGLang run (module docstring)."""
    return {"engine": "sglang", "prefill_first": True, "max_num_batched_tokens": SGLANG_CHUNKED_PREFILL,
            "max_num_seqs": SGLANG_MAX_RUNNING, "sglang_admission": True, "sglang_ignore_eos": SGLANG_IGNORE_EOS}
