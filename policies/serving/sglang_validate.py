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
* **The KV pool**: ``mem_fraction_static = (gpu_mem - reserved) / gpu_mem`` with ``reserved``
  (9.5 + TP/2) GiB below 90 GiB of GPU memory (H100) and (12 + TP/2) GiB below 160 GiB (H200);
  the pool is what that fraction leaves after the weights (``rest_memory = available -
  total * (1 - mem_fraction_static)``, model_runner.py ``profile_max_num_token``).
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

#: SGLang's chunked_prefill_size on 80-160 GB GPUs (server_args._handle_gpu_memory_settings)
SGLANG_CHUNKED_PREFILL = 8192
#: most running requests: SGLang derives max_running_requests from the pool (far above the rows'
#: 4-160 clients); 1024 keeps the replay's bound out of the way as in validate.py
SGLANG_MAX_RUNNING = 1024
GIB = 2**30
#: the benchmark's requests are ignore_eos: every row's output is exactly its OSL, which is how a
#: fixed-length serving benchmark asks for it (SGLang's bench_serving sends ignore_eos unless
#: --disable-ignore-eos: python/sglang/benchmark/serving.py:289-317); SGLang then reserves a
#: running request's whole remaining output (ratio 1)
SGLANG_IGNORE_EOS = True


def sglang_reserved_bytes(memory_bytes: int, tp: int) -> float:
    """SGLang's reserved memory (not for weights or KV): (9.5 + TP/2) GiB below 90 GiB of GPU memory,
    (12 + TP/2) GiB below 160 GiB, 32 GiB above (server_args._handle_mem_fraction_static)."""
    gib = memory_bytes / GIB
    if gib < 90:
        return (9.5 + tp / 2) * GIB
    if gib < 160:
        return (12 + tp / 2) * GIB
    return 32 * GIB


def sglang_pool_blocks(spec, system, tp: int, block_tokens: int = 16) -> int:
    """KV blocks SGLang's pool holds per GPU (module docstring); <= 0 when the weights do not fit."""
    free = system.memory_bytes - sglang_reserved_bytes(system.memory_bytes, tp) - spec.weight_bytes_per_gpu
    return int(free // (spec.kv_bytes_per_token_per_gpu * block_tokens))


def sglang_engine(tp: int) -> dict:
    """The ReplayConfig fields of an SGLang run (module docstring)."""
    return {"engine": "sglang", "prefill_first": True, "max_num_batched_tokens": SGLANG_CHUNKED_PREFILL,
            "max_num_seqs": SGLANG_MAX_RUNNING, "sglang_admission": True, "sglang_ignore_eos": SGLANG_IGNORE_EOS}
