"""Drive SGLang 0.5.23's REAL RadixCache (python/sglang/srt/mem_cache/radix_cache.py) on CPU,
one request at a time, to record the prefix hit SGLang's own tree gives: the reference data of
tests/test_serving_sglang_reference.py (tests/data/sglang_radix_reference.json).

Why: `policy replay --engine sglang` claims SGLang's radix rules (whole-node eviction, nodes
where SGLang's inserts make them, the match's refresh of a split node's rest, the eviction
policies of evict_policy.py); this runs SGLang's own tree code, so the claim is checked
against the engine, not against our reading of it. It needs no GPU.

It does NOT run inside the project's venv. Build a separate one (about 2 minutes):

    python3 -m venv /tmp/sgl-ref && /tmp/sgl-ref/bin/pip install torch==2.13.0 numpy
    pip download --no-deps sglang==0.5.23 -d /tmp/w && mkdir /tmp/sgl-src && \\
        unzip -q /tmp/w/sglang-0.5.23-*.whl -d /tmp/sgl-src
    .venv/bin/python -c "import json; from sitsprof.policies.traces.generator import generate_requests as g; \\
        open('/tmp/generated0.jsonl', 'w').writelines(json.dumps(r.mooncake_record()) + '\\n' \\
        for r in g(seed=0, duration_s=1800.0)[:1000])"
    /tmp/sgl-ref/bin/python bench/sglang_radix_reference.py --sglang /tmp/sgl-src \\
        --traces policies/data/mooncake_conversation.jsonl.xz,/tmp/generated0.jsonl \\
        --out tests/data/sglang_radix_reference.json

(the second trace is the project's synthetic generator, seed 0, first 1,000 requests: written
by the project's venv, read here as a Mooncake-format file).

What is real and what is stubbed: radix_cache.py, base_prefix_cache.py (the params/result
dataclasses, lock/unlock) and evict_policy.py are SGLang's files, loaded as they are. Every
other `sglang.*` module they import (KV-event recorder, metrics, kernels, the environment
registry, the hash helpers) is replaced by an inert stub: none of them decides what is
matched, inserted, split or evicted. `get_eviction_strategy` is stubbed by a lookup of
evict_policy.py's own classes by name, `split_node_hash_value` (event hashes) by (None, None).
The allocator is a page free-list written here (SGLang's is a GPU free-list with the same
contract: `available_size`, `free_segment`).

The request loop follows SGLang's scheduler for a request that runs alone:
- admission: `match_prefix` on the prompt capped at len - 1 tokens
  (`Req._compute_max_prefix_len`), page-aligned; the hit is locked (`lock`);
- each prefill chunk (`--chunk` tokens, SGLang's chunked_prefill_size) allocates its pages,
  evicting the shortfall first (`evict_to_free_tokens` -> `evict(num_tokens=shortfall)`), then
  is inserted (`checkpoint_kv_cache` -> `RadixCache.checkpoint(req, up_to=extend_end)`);
- decode allocates a page when the last one is full (same eviction);
- the finish inserts the written sequence, prompt + output - 1 tokens
  (`release_kv_cache(checkpoint=True)` -> `checkpoint(up_to=owned_kv_len)`, split at the
  prompt), unlocks, and frees what the tree did not take.
Token ids spell the trace's hash blocks (coarse block h, offset o -> h * 512 + o), so two
requests share a page exactly when they share the trace's prefix; output tokens are private.
"""
from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import json
import lzma
import sys
import types
from array import array
from pathlib import Path

from vllm_admission_reference import prompt_tokens  # the same prompt tokens as the vLLM driver's

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "policies" / "data" / "mooncake_conversation.jsonl.xz"
OUT_TOKEN = 1 << 40  # output tokens: 2**40 + request * 2**20 + position, private to the request
REAL = ("sglang.srt.mem_cache.radix_cache", "sglang.srt.mem_cache.base_prefix_cache",
        "sglang.srt.mem_cache.evict_policy")


class _Anything:
    """An inert stand-in: any attribute, call, subclass or context works and does nothing."""

    def __init__(self, *a, **k):
        pass

    def __getattr__(self, name):
        return _Anything()

    def __call__(self, *a, **k):
        return _Anything()

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())

    def __mro_entries__(self, bases):
        return (_AnythingBase,)


class _AnythingBase:
    def __init__(self, *a, **k):
        pass

    def __getattr__(self, name):
        return _Anything()


class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _AnythingBase if name[:1].isupper() else _Anything()


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, src: Path):
        self.src = src

    def find_spec(self, name, path, target=None):
        if name != "sglang" and not name.startswith("sglang."):
            return None
        if name in REAL:
            file = self.src / (name.replace(".", "/") + ".py")
            return importlib.util.spec_from_file_location(name, file)
        spec = importlib.machinery.ModuleSpec(name, self, is_package=True)
        spec.submodule_search_locations = []
        return spec

    def create_module(self, spec):
        return _Stub(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def load_sglang(src: Path):
    sys.meta_path.insert(0, _Finder(src))
    import sglang.srt.mem_cache.base_prefix_cache as base
    import sglang.srt.mem_cache.evict_policy as policy
    import sglang.srt.mem_cache.radix_cache as radix

    strategies = {"lru": policy.LRUStrategy, "lfu": policy.LFUStrategy, "fifo": policy.FIFOStrategy,
                  "mru": policy.MRUStrategy, "filo": policy.FILOStrategy, "priority": policy.PriorityStrategy}
    radix.get_eviction_strategy = lambda name, config=None: strategies[name]()
    # per-page hashes feed KV events only (none recorded here): a split leaves both halves None
    radix.split_node_hash_value = lambda hashes, split_len, page_size: (None, None)
    return radix, base


class PageAllocator:
    """SGLang's paged token allocator's contract on a free-list of pages: token slot
    page * P + offset; `free_segment` frees the pages a page-aligned segment covers."""

    def __init__(self, pages: int, page_size: int):
        import torch

        self.page_size = page_size
        self.free_pages = list(range(pages - 1, -1, -1))
        self.device = torch.device("cpu")

    def available_size(self) -> int:
        return len(self.free_pages) * self.page_size

    def alloc_page(self) -> int:
        return self.free_pages.pop()

    def free_segment(self, indices, start_pos: int = 0) -> None:
        if len(indices) == 0:
            return
        assert start_pos % self.page_size == 0 and len(indices) % self.page_size == 0, "not page-aligned"
        for p in sorted({int(x) // self.page_size for x in indices.tolist()}):
            self.free_pages.append(p)


class ReqToToken:
    def __init__(self, n: int):
        import torch

        self.req_to_token = torch.zeros((1, n), dtype=torch.int64)

    def write(self, where, values):
        idx, sl = where
        self.req_to_token[idx, sl] = values


def records(path: Path, n: int) -> list:
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt") as fh:
        return [json.loads(line) for line in itertools.islice(filter(str.strip, fh), n)]


def run(radix, base, recs: list, pages: int, page_size: int = 16, chunk: int = 8192,
        policy: str = "lru") -> dict:
    """Serve `recs` one after another through SGLang's tree; returns the hit counts."""
    import torch

    alloc = PageAllocator(pages, page_size)
    params = types.SimpleNamespace(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=alloc,
                                   page_size=page_size, is_eagle=False, eviction_policy=policy,
                                   enable_kv_cache_events=False, dynamo_kv_event_format=False,
                                   kv_event_lora_names=None, enable_metrics=False, eviction_policy_config=None)
    tree = radix.RadixCache(params)
    P = page_size
    hit_tokens = prompt_total = evicted = 0
    for r, rec in enumerate(recs):
        prompt = prompt_tokens(rec)
        out = max(1, int(rec.get("output_length", 1)))
        seq = prompt + [OUT_TOKEN + (r << 20) + k for k in range(out)]
        written = len(prompt) + out - 1  # the last sampled token's KV is never written
        if -(-written // P) > pages:
            continue  # the replay rejects what the pool cannot hold
        pool = ReqToToken(len(seq) + P)
        tree.req_to_token_pool = pool
        kv = types.SimpleNamespace(req_pool_idx=0, cache_protected_len=0, cache_inserted_len=0, swa_evict_floor=0)
        req = types.SimpleNamespace(kv=kv, extra_key=None, cache_salt=None, priority=None, origin_input_ids=prompt,
                                    full_untruncated_fill_ids=array("q", seq), lock=None, last_node=None)
        key = radix.RadixKey(array("q", prompt), None, limit=len(prompt) - 1)
        m = tree.match_prefix(base.MatchPrefixParams(key=key))
        hit = m.device_prefix_len
        hit_tokens += hit
        prompt_total += len(prompt)
        if hit:
            pool.req_to_token[0, :hit] = tree.path_device_indices(m.last_device_node)
        kv.cache_protected_len = hit
        req.lock = tree.lock(m.last_device_node)
        req.last_node = m.last_device_node
        held_pages = hit // P  # pages of the row (the hit's pages are the tree's)

        def grow(tokens: int, pool=pool) -> None:
            nonlocal held_pages, evicted
            need = -(-tokens // P) - held_pages
            if need <= 0:
                return
            short = need * P - alloc.available_size()
            if short > 0:
                evicted += tree.evict(base.EvictParams(num_tokens=short)).num_tokens_evicted
            for _ in range(need):
                page = alloc.alloc_page()
                pool.req_to_token[0, held_pages * P:(held_pages + 1) * P] = torch.arange(page * P, (page + 1) * P)
                held_pages += 1

        done = hit
        while done < len(prompt):  # prefill chunks, each inserted (checkpoint_kv_cache)
            end = min(len(prompt), done + chunk)
            grow(end)
            done = end
            tree.checkpoint(req, up_to=end)
        for t in range(len(prompt) + 1, written + 1):  # decode: the KV of token t - 1 is written
            grow(t)
        tree.checkpoint(req, up_to=written)  # release_kv_cache(checkpoint=True)
        rest = pool.req_to_token[0, kv.cache_protected_len:held_pages * P]
        alloc.free_segment(rest, start_pos=kv.cache_protected_len)
        tree.unlock(req.lock)
        req.lock = None
    return {"hit_tokens": hit_tokens, "prompt_tokens": prompt_total, "evicted_tokens": evicted,
            "prefix_hit_ratio": hit_tokens / prompt_total if prompt_total else 0.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sglang", type=Path, required=True, help="folder holding the unpacked wheel's sglang/")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--pools", default="10000,40000,160000")
    ap.add_argument("--policies", default="lru")
    ap.add_argument("--traces", default=str(TRACE), help="comma-separated Mooncake-format traces")
    args = ap.parse_args(argv)
    radix, base = load_sglang(args.sglang)
    runs = []
    for trace in args.traces.split(","):
        recs = records(Path(trace), args.n)
        for policy in args.policies.split(","):
            for pages in map(int, args.pools.split(",")):
                row = run(radix, base, recs, pages, policy=policy)
                row.update(trace=Path(trace).name, n=len(recs), blocks=pages, block_tokens=16, chunk=8192,
                           policy=policy)
                print(json.dumps(row), flush=True)
                runs.append(row)
    args.out.write_text(json.dumps({"sglang": "0.5.23", "source": "python/sglang/srt/mem_cache/radix_cache.py",
                                    "driver": "bench/sglang_radix_reference.py", "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
