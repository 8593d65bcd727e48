"""Drive vLLM's REAL v1 scheduler (Scheduler / KVCacheManager / BlockPool) on Mooncake requests,
with a fake model runner, to record what vLLM schedules: the reference data of
tests/test_serving_vllm_reference.py (tests/data/vllm_admission_reference.json).

Why: the serving replay (policies/serving/scheduler.py) claims vLLM 0.33's admission rule
(`SchedulerConfig.scheduler_reserve_full_isl = True`, passed to `KVCacheManager.allocate_slots`
as `full_sequence_must_fit`); this runs vLLM's own code, so the claim is checked against the
engine and not against our reading of it. It needs no GPU: vLLM's scheduler is pure Python.

It does NOT run inside the project's venv (vLLM pins its own torch and is heavy). Build a
separate one (about 5 minutes, ~2 GB):

    python3 -m venv /tmp/vllm-ref && /tmp/vllm-ref/bin/pip install torch==2.13.0 \
        --index-url https://download.pytorch.org/whl/cpu      # or a local CPU torch wheel
    /tmp/vllm-ref/bin/pip install regex cachetools psutil numpy requests tqdm blake3 py-cpuinfo \
        'transformers>=5.16.1,<5.21' safetensors pydantic msgspec pyzmq cloudpickle pyyaml einops \
        filelock prometheus_client pybase64 cbor2 setproctitle
    pip download --no-deps vllm==0.33.0 -d /tmp/w && mkdir /tmp/vllm-src && \
        unzip -q /tmp/w/vllm-0.33.0-*.whl 'vllm/*' -x '*.so' -d /tmp/vllm-src
    PYTHONPATH=/tmp/vllm-src /tmp/vllm-ref/bin/python bench/vllm_admission_reference.py \
        --out tests/data/vllm_admission_reference.json

(only the wheel's pure-Python `vllm/` is used; its compiled kernels are left out).

The setup follows vLLM's tests/v1/core/utils.py `create_scheduler`: a tiny local model config
(written to a temporary folder), skip_tokenizer_init, one full-attention KV cache group of
`--blocks` + 1 blocks (BlockPool keeps one as its null block, so `--blocks` are usable, as the
replay's pool), the fake runner sampling one token for every request whose scheduled tokens
reach its known length. Requests: the first N of the bundled Mooncake trace, all arriving at
once; token ids spell each request's hash blocks (coarse block h, offset o -> h * 512 + o), so
two requests share a vLLM block hash exactly when they share the trace's prefix; outputs are
private tokens; `max_tokens` = the trace's output length, ignore_eos.

The engine loop is EngineCore's: `step` (synchronous: schedule, run, update) or, with
`--async-scheduling` (vLLM 0.33's default for generative models), `step_with_batch_queue` with a
queue of 2 (the next step is scheduled before the previous one's output is back).
"""
from __future__ import annotations

import argparse
import itertools
import json
import lzma
import os
import sys
import tempfile
import time
from pathlib import Path

TRACE = Path(__file__).resolve().parent.parent / "policies" / "data" / "mooncake_conversation.jsonl.xz"
OUT_TOKEN = 1 << 30  # output tokens: 2**30 + request * 65536 + position, private to the request


def records(n: int) -> list:
    with lzma.open(TRACE, "rt") as fh:
        return [json.loads(line) for line in itertools.islice(filter(str.strip, fh), n)]


def prompt_tokens(rec: dict, trace_block: int = 512) -> list:
    """The prompt as the project's Mooncake reader sizes it: every hash block full but the last,
    which carries input - 512 (n - 1) tokens clipped to [1, 512]."""
    hashes = rec["hash_ids"]
    last = min(max(int(rec["input_length"]) - trace_block * (len(hashes) - 1), 1), trace_block)
    out = []
    for j, h in enumerate(hashes):
        k = trace_block if j < len(hashes) - 1 else last
        base = int(h) * trace_block
        out.extend(range(base, base + k))
    return out


def tiny_model_dir() -> str:
    d = tempfile.mkdtemp(prefix="tiny-llama-")
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
           "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1,
           "vocab_size": 32000, "max_position_embeddings": 1 << 20, "rms_norm_eps": 1e-6,
           "torch_dtype": "float32", "rope_theta": 10000.0}
    Path(d, "config.json").write_text(json.dumps(cfg))
    return d


def make_scheduler(blocks: int, block_size: int, budget: int, seqs: int, max_model_len: int, full_isl: bool,
                   async_scheduling: bool):
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    sched_cls = Scheduler
    if async_scheduling:
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler as sched_cls
    scheduler_config = SchedulerConfig(max_num_seqs=seqs, max_num_batched_tokens=budget, max_model_len=max_model_len,
                                       enable_chunked_prefill=True, async_scheduling=async_scheduling,
                                       scheduler_reserve_full_isl=full_isl, is_encoder_decoder=False)
    model_config = ModelConfig(model=tiny_model_dir(), dtype="float32", seed=0, skip_tokenizer_init=True,
                               max_model_len=max_model_len)
    cache_config = CacheConfig(block_size=block_size, gpu_memory_utilization=0.9, cache_dtype="auto",
                               enable_prefix_caching=True)
    vllm_config = VllmConfig(scheduler_config=scheduler_config, model_config=model_config, cache_config=cache_config)
    kv_cache_config = KVCacheConfig(
        num_blocks=blocks + 1, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=block_size, num_kv_heads=1,
                                                                      head_size=1, dtype=torch.float32))])
    cache_config.num_gpu_blocks = blocks + 1
    return sched_cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config, block_size=block_size,
                     structured_output_manager=StructuredOutputManager(vllm_config), log_stats=True)


def run(n: int, blocks: int, block_size: int, budget: int, seqs: int, full_isl: bool, async_scheduling: bool) -> dict:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    recs = records(n)
    prompts = [prompt_tokens(r) for r in recs]
    outputs = [max(1, int(r.get("output_length", 1))) for r in recs]
    max_len = max(len(p) + o for p, o in zip(prompts, outputs)) + block_size
    sched = make_scheduler(blocks, block_size, budget, seqs, max_len, full_isl, async_scheduling)
    init_none_hash(sha256)
    hasher = get_request_block_hasher(block_size, sha256)
    reqs = []
    for i, (p, o) in enumerate(zip(prompts, outputs)):
        sp = SamplingParams(max_tokens=o, ignore_eos=True)
        q = Request(request_id=str(i), prompt_token_ids=p, sampling_params=sp, pooling_params=None,
                    arrival_time=0.0, block_hasher=hasher)
        reqs.append(q)
        sched.add_request(q)
    by_id = {q.request_id: q for q in reqs}
    sampled = {q.request_id: 0 for q in reqs}
    first_cached: dict = {}
    finish_order: list = []
    steps = 0
    preempt_events = 0

    def fake_runner(so):
        """Called right after `schedule` (which advanced num_computed_tokens): a request whose
        scheduled tokens reach its known length (`is_prefill_chunk` False) samples one token."""
        ids, out = [], []
        for rid in so.num_scheduled_tokens:
            q = by_id[rid]
            ids.append(rid)
            out.append([] if q.is_prefill_chunk else [OUT_TOKEN + int(rid) * 65536 + sampled[rid]])
        return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                 sampled_token_ids=out)

    def note(so):
        nonlocal steps, preempt_events
        if so.total_num_scheduled_tokens > 0:
            steps += 1
        preempt_events += len(getattr(so, "preempted_req_ids", None) or ())
        for nr in so.scheduled_new_reqs:  # computed tokens at its first scheduling = its prefix hit
            if nr.req_id not in first_cached:
                first_cached[nr.req_id] = nr.num_computed_tokens

    def update(so, mro):
        for rid, toks in zip(mro.req_ids, mro.sampled_token_ids):
            if toks:
                sampled[rid] += len(toks)
        eco = sched.update_from_output(so, mro)
        for outs in eco.values():
            for o in outs.outputs:
                if o.finish_reason is not None:
                    finish_order.append(int(o.request_id))

    t0 = time.perf_counter()
    if not async_scheduling:
        while sched.has_requests():
            if steps > 10_000_000:
                raise RuntimeError("no progress")
            so = sched.schedule()
            note(so)
            update(so, fake_runner(so))
    else:
        queue: list = []
        while sched.has_requests() or queue:
            if sched.has_requests():
                so = sched.schedule()
                note(so)
                queue.insert(0, (so, fake_runner(so)))
                if len(queue) < 2 and (so.total_num_scheduled_tokens > 0 or sched.has_requests()):
                    continue
            if queue:
                so, mro = queue.pop()
                update(so, mro)
    seconds = time.perf_counter() - t0
    hit = sum(first_cached.get(q.request_id, 0) for q in reqs)
    prompt = sum(len(p) for p in prompts)
    return {"requests": n, "blocks": blocks, "block_size": block_size, "max_num_batched_tokens": budget,
            "max_num_seqs": seqs, "scheduler_reserve_full_isl": full_isl, "async_scheduling": async_scheduling,
            "prefix_hit_ratio": hit / prompt, "hit_tokens": hit, "prompt_tokens": prompt,
            "preemptions": int(sum(q.num_preemptions for q in reqs)), "preempt_events": preempt_events,
            "steps": steps, "finished": len(finish_order), "finish_order": finish_order,
            "cached_tokens": [int(first_cached.get(q.request_id, -1)) for q in reqs], "seconds": seconds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--blocks", default="20000,200000")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--budget", type=int, default=8192)
    ap.add_argument("--seqs", type=int, default=256)
    ap.add_argument("--rules", default="full,first", help="full (vLLM 0.33 default), first (first-chunk rule)")
    ap.add_argument("--async", dest="asyncs", default="off,on")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    import vllm

    results = []
    for blocks in (int(b) for b in a.blocks.split(",")):
        for rule in a.rules.split(","):
            for asy in a.asyncs.split(","):
                r = run(a.requests, blocks, a.block_size, a.budget, a.seqs, rule == "full", asy == "on")
                print(json.dumps({k: v for k, v in r.items() if k not in ("finish_order", "cached_tokens")}),
                      flush=True)
                results.append(r)
    doc = {"vllm_version": vllm.__version__, "trace": "bundled:mooncake (policies/data/mooncake_conversation.jsonl.xz)",
           "arrivals": "all at time 0", "driver": "bench/vllm_admission_reference.py", "runs": results}
    if a.out:
        Path(a.out).write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    sys.exit(main())
