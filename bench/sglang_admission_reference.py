"""Drive SGLang 0.5.23's REAL PrefillAdder, PrefillBudget, NewTokenRatioTracker and decode
retraction order on CPU through closed loops, step by step, to record when SGLang admits,
retracts and finishes each request: the reference data of tests/test_serving_sglang_admission.py
(tests/data/sglang_admission_reference.json).

Why: `policy validate --backend sglang` replays SGLang's admission (policies/serving/
sglang_admission.py, ReplayConfig.sglang_admission); this runs SGLang's own admission code, so
the replay is checked against the engine, not against our reading of it. It needs no GPU and
runs in the reference venv of bench/sglang_radix_reference.py (its docstring says how to build
it); run as

    /tmp/sgl-ref/bin/python bench/sglang_admission_reference.py --sglang /tmp/sgl-src \\
        --out tests/data/sglang_admission_reference.json

What is SGLang's and what is written here:
- real, loaded as they are: managers/schedule_policy.py (PrefillAdder: add_chunked_req,
  add_one_req, budget_state, the reservations), mem_cache/prefill_budget.py (PrefillBudget:
  remaining_total, check_prefill, reserve), managers/scheduler_components/
  new_token_ratio_tracker.py (from_config, decay_step, estimate_new_token_ratio_after_retract),
  and ScheduleBatch._get_decode_retraction_order, compiled from managers/schedule_batch.py's
  own source (the module itself needs GPU-side packages to import);
- stubbed: every other sglang module (bench/sglang_radix_reference.py's inert stubs); the
  environment registry's four values (environ.py:646-649 defaults) and the schedule server
  args (schedule_conservativeness 1.0, retraction_policy "length": arg_groups/fields/
  schedule.py defaults);
- written here, following managers/scheduler.py: the loop (_get_new_batch_prefill_raw
  :4079-4310 for a prefill batch, with batch_is_full; update_running_batch :4460-4545 for a
  decode batch: check_decode_mem, retract_decode's loop, the ratio), the KV pool as a count of
  free pages (the prompts share nothing, so nothing is evictable), the requests (Req's few
  fields the adder reads), prefill-alone batches (enable_mixed_chunk off), FCFS.
Steps are counted, not timed (the test prices every step at 1 ms); a closed loop issues the
next request when one finishes, and it joins the queue at the next step.
"""
from __future__ import annotations

import argparse
import ast
import importlib.machinery
import json
import sys
import types
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_radix_reference as radix_ref  # noqa: E402  (its stubs and module finder)

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "policies" / "data" / "mooncake_conversation.jsonl.xz"
REAL = ("sglang.srt.managers.schedule_policy", "sglang.srt.mem_cache.prefill_budget",
        "sglang.srt.managers.scheduler_components.new_token_ratio_tracker")
STUB_THIRD_PARTY = ("msgspec",)
#: environ.py:646-649 and arg_groups/fields/schedule.py defaults
ENV = {"SGLANG_INIT_NEW_TOKEN_RATIO": 0.7, "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR": 0.14,
       "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS": 600, "SGLANG_RETRACT_DECODE_STEPS": 20}
SCHEDULE = types.SimpleNamespace(schedule_conservativeness=1.0, retraction_policy="length",
                                 schedule_low_priority_values_first=False, schedule_policy="fcfs")
MAX_PREFILL_TOKENS = 16384  # server_args default (above the chunk: the chunk binds)


class _Finder(radix_ref._Finder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUB_THIRD_PARTY:
            spec = importlib.machinery.ModuleSpec(name, self, is_package=True)
            spec.submodule_search_locations = []
            return spec
        return super().find_spec(name, path, target)


def load(src: Path):
    """SGLang's real modules (REAL), the rest stubbed; returns (schedule_policy, prefill_budget,
    tracker module, the retraction order function)."""
    radix_ref.REAL = REAL
    sys.meta_path.insert(0, _Finder(src))
    import sglang.srt.managers.schedule_policy as sp
    import sglang.srt.managers.scheduler_components.new_token_ratio_tracker as tr
    import sglang.srt.mem_cache.prefill_budget as pb

    env = types.SimpleNamespace(**{k: types.SimpleNamespace(get=(lambda v=v: v)) for k, v in ENV.items()})
    tr.envs = env
    tr.get_schedule = lambda: SCHEDULE
    # hardware / feature probes of the module, as on an NVIDIA GPU without Mamba, DCP, sharding or dLLM
    sp._IS_HIP = False
    sp.mamba_prefill_chunk_grid = lambda: 1
    sp._use_exact_chunk_fill = lambda: False
    sp.page_interleave_shard_size = lambda allocator: 1
    sp.get_schedule = lambda: SCHEDULE
    # ScheduleBatch._get_decode_retraction_order, compiled from schedule_batch.py's own text
    text = (src / "sglang/srt/managers/schedule_batch.py").read_text()
    fn = next(node for node in ast.walk(ast.parse(text))
              if isinstance(node, ast.FunctionDef) and node.name == "_get_decode_retraction_order")
    fn.decorator_list = []
    ns = {"List": list, "Tuple": tuple, "Req": object, "get_schedule": lambda: SCHEDULE, "sys": sys}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "schedule_batch.py", "exec"), ns)
    return sp, pb, tr, ns["_get_decode_retraction_order"]


class Allocator:
    """The token pool's contract the budget reads: free tokens in whole pages."""

    def __init__(self, pages: int, page_size: int, pb):
        self.pages, self.page_size, self._pb = pages, page_size, pb
        self.used = 0  # pages held by requests

    def available_size(self):
        return (self.pages - self.used) * self.page_size

    def create_prefill_budget(self, tree_cache, *, num_mixed_decode_tokens=0):  # allocator/base.py:72-77
        return self._pb.PrefillBudget(self, tree_cache, num_mixed_decode_tokens=num_mixed_decode_tokens)

    def request_slot_reserve(self, *, has_req_pool_slot, prefill_tokens=0):  # allocator/base.py:79-85
        return 0


class Tree:
    """The radix cache as the adder sees it here: nothing shared, so nothing evictable."""

    buffer_pipeline = None
    disable = False

    def supports_mamba(self):
        return False

    def supports_prefix_sharing(self):
        return True

    def evictable_size(self):
        return 0

    def lock(self, node):
        return None

    def unlock(self, lock):
        pass

    def discard_storage_prefetch_accounting(self, handle):
        pass

    def finish_storage_prefetch_admission(self, handle, **kw):
        pass

    def load_back_is_cache_owned(self):
        return False


class Req:
    """The fields of SGLang's Req that the adder reads, for a request with no cached prefix."""

    def __init__(self, rid: int, prompt: int, output: int, ignore_eos: bool):
        self.rid, self.prompt = rid, prompt
        self.sampling_params = types.SimpleNamespace(max_new_tokens=output, ignore_eos=ignore_eos)
        self.output_ids = []
        self.prefix_len = 0
        self.extend_end = None
        self.retracted_stain = False
        self.kv = types.SimpleNamespace(holds_mamba=False, req_pool_idx=None, holds_kv=False)
        self.last_node = self.best_match_node = self.cache_request_handle = None
        self.host_hit_length = self.swa_host_hit_length = self.mamba_host_hit_length = 0
        self.auxiliary_swa_host_hit_length = self.storage_hit_length = 0
        self.comp = 0  # tokens whose KV is written (kv_committed_len)
        self.pages = 0

    @property
    def full_untruncated_fill_ids(self):
        return range(self.prompt + len(self.output_ids))

    @property
    def origin_input_ids(self):
        return range(self.prompt)

    @property
    def extend_len(self):
        return self.extend_end - self.prefix_len

    def needs_host_load_back(self):
        return False

    def fulfilled_storage_hit_len(self, prefix_len):
        return 0


def simulate(sp, pb, tr, order, isl, osl, concurrency, pool_pages, page=16, chunk=8192, ignore_eos=False,
             max_steps=2_000_000):
    """The closed loop (module docstring); per request: the step of its first admission, of its
    first token and of its finish, and its retractions (steps numbered from 1)."""
    n = len(isl)
    reqs = [Req(i, int(isl[i]), int(osl[i]), ignore_eos) for i in range(n)]
    alloc, tree = Allocator(pool_pages, page, pb), Tree()
    tracker = tr.NewTokenRatioTracker.from_config()
    waiting = deque(range(min(concurrency, n)))
    issue = min(concurrency, n)
    running: list[int] = []  # the running batch (decoding), in merge order
    chunked = None  # the request whose prompt continues
    full = False  # running_batch.batch_is_full
    admitted, first, done, retracted = [0] * n, [0] * n, [0] * n, [0] * n
    finished, step, arrivals = 0, 0, []
    no_token = sp.AddReqResult.NO_TOKEN
    while finished < n:
        step += 1
        if step > max_steps:
            raise RuntimeError("no progress")
        waiting.extend(arrivals)
        arrivals = []
        # a prefill batch (_get_new_batch_prefill_raw)
        batch = []
        if not running:
            full = False
        if (waiting and not full) or chunked is not None:
            n_running = len(running)
            rb = types.SimpleNamespace(reqs=[reqs[r] for r in running], batch_size=lambda k=n_running: k,
                                       is_empty=lambda k=n_running: k == 0)
            adder = sp.PrefillAdder(page, tree, alloc, rb, tracker.current, MAX_PREFILL_TOKENS, chunk)
            if chunked is not None:
                q = reqs[chunked]
                q.prefix_len = q.comp
                adder.add_chunked_req(q)
            for r in list(waiting):
                if adder.budget_state() == sp.AddReqResult.OTHER or full:
                    break
                q = reqs[r]
                q.prefix_len = 0
                res = adder.add_one_req(q, has_chunked_req=chunked is not None, truncation_align_size=None)
                if res != sp.AddReqResult.CONTINUE:
                    if res == no_token:
                        full = len(adder.can_run_list) > 0 or bool(running)
                    if not (adder.can_run_list and adder.can_run_list[-1] is q):
                        break
                    waiting.popleft()
                    break
                waiting.popleft()
            batch = [(q.rid, q.extend_len) for q in adder.can_run_list]
        if batch:
            had_chunk = False
            for r, ext in batch:
                q = reqs[r]
                if admitted[r] == 0:
                    admitted[r] = step
                need = -(-(q.comp + ext) // page) - q.pages
                alloc.used += need
                q.pages += need
                q.comp += ext
                if q.comp >= q.prompt + len(q.output_ids):
                    q.output_ids.append(0)
                    if first[r] == 0:
                        first[r] = step
                    if len(q.output_ids) >= q.sampling_params.max_new_tokens:
                        issue = _finish(q, alloc, done, step, issue, n, arrivals)
                        finished += 1
                        full = False
                        if r == chunked:
                            chunked = None
                        continue
                    if r == chunked:
                        chunked = None
                    running.append(r)
                else:
                    chunked, had_chunk = r, True
            if had_chunk:  # the chunked request leaves the merged batch (scheduler.py:3939-3951)
                full = False
            continue
        if not running:
            continue
        # a decode batch (update_running_batch): check_decode_mem, retract_decode, the ratio
        def pages_needed(idx, running=running):
            return sum(1 for i in idx if reqs[running[i]].comp % page == 0) * page

        if pages_needed(range(len(running))) > alloc.available_size():
            keep = order([reqs[r] for r in running])
            gone = []
            first_iter = True
            while first_iter or pages_needed(keep) > alloc.available_size():
                if len(keep) == 1:
                    break
                first_iter = False
                i = keep.pop()
                q = reqs[running[i]]
                alloc.used -= q.pages
                q.pages, q.comp = 0, 0
                q.retracted_stain = True
                retracted[q.rid] += 1
                gone.append(q.rid)
            running = [running[i] for i in keep]  # filter_batch(keep_indices=...) keeps this order
            tracker.current = tr.NewTokenRatioTracker.estimate_new_token_ratio_after_retract(
                [reqs[r] for r in running])
            waiting.extend(gone)
            full = False
        else:
            tracker.decay_step()
        keep_running = []
        for r in running:
            q = reqs[r]
            if q.comp % page == 0:
                alloc.used += 1
                q.pages += 1
            q.comp += 1
            q.output_ids.append(0)
            if len(q.output_ids) >= q.sampling_params.max_new_tokens:
                issue = _finish(q, alloc, done, step, issue, n, arrivals)
                finished += 1
                full = False
                continue
            keep_running.append(r)
        running = keep_running
    return {"admitted": admitted, "first": first, "done": done, "retracted": retracted, "steps": step}


def _finish(q, alloc, done, step, issue, n, arrivals):
    """A request leaves: its pages go back; its client issues the next request (joining next step)."""
    alloc.used -= q.pages
    q.pages = 0
    done[q.rid] = step
    if issue < n:
        arrivals.append(issue)
        issue += 1
    return issue


CASES = [
    # name, concurrency, (isl, osl) per request or a trace's first requests, pool pages, ignore_eos
    {"name": "c8-isl1024-osl512-ratio", "concurrency": 8, "isl": [1024] * 24, "osl": [512] * 24, "pages": 400,
     "ignore_eos": False},
    {"name": "c8-isl1024-osl512-ignore-eos", "concurrency": 8, "isl": [1024] * 24, "osl": [512] * 24,
     "pages": 400, "ignore_eos": True},
    {"name": "c12-isl1000-osl700-ignore-eos", "concurrency": 12, "isl": [1000] * 36, "osl": [700] * 36,
     "pages": 500, "ignore_eos": True},
    {"name": "c16-isl2048-osl300-ratio", "concurrency": 16, "isl": [2048] * 40, "osl": [300] * 40, "pages": 900,
     "ignore_eos": False},
    {"name": "c24-isl2048-osl800-ratio-retracts", "concurrency": 24, "isl": [2048] * 48, "osl": [800] * 48,
     "pages": 1500, "ignore_eos": False},
    {"name": "c6-isl12000-osl64-ratio-chunked", "concurrency": 6, "isl": [12000] * 12, "osl": [64] * 12,
     "pages": 3000, "ignore_eos": False},
]


def random_case(seed: int, concurrency: int, n: int, pages: int) -> dict:
    """Prompts of 256-2032 tokens (whole pages) and 50-1999 outputs, seeded: clients out of step,
    so admissions meet a decayed new_token_ratio and decodes get retracted."""
    import random

    rng = random.Random(seed)
    isl = [rng.randrange(16, 128) * 16 for _ in range(n)]
    osl = [rng.randrange(50, 2000) for _ in range(n)]
    return {"name": f"random{seed}-c{concurrency}-ratio", "concurrency": concurrency, "isl": isl, "osl": osl,
            "pages": pages, "ignore_eos": False}


def trace_case(n: int = 200, concurrency: int = 16, pages: int = 8000) -> dict:
    """The bundled Mooncake conversation trace's first `n` requests' lengths (prompts rounded up to
    whole pages, so chunk boundaries are page-aligned as SGLang's are), its prompts unshared."""
    recs = radix_ref.records(TRACE, n)
    isl = [-(-int(r["input_length"]) // 16) * 16 for r in recs]
    osl = [max(1, int(r.get("output_length", 1))) for r in recs]
    return {"name": f"mooncake-conversation-{n}-c{concurrency}-ratio", "concurrency": concurrency, "isl": isl,
            "osl": osl, "pages": pages, "ignore_eos": False}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sglang", type=Path, required=True, help="unpacked SGLang 0.5.23 wheel")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sp, pb, tr, order = load(args.sglang)
    out = {"sglang": "0.5.23", "page_size": 16, "chunked_prefill_size": 8192, "cases": []}
    for case in [*CASES, random_case(1, 32, 120, 1500), random_case(2, 24, 120, 1000), trace_case()]:
        res = simulate(sp, pb, tr, order, case["isl"], case["osl"], case["concurrency"], case["pages"],
                       ignore_eos=case["ignore_eos"])
        out["cases"].append({**case, **res})
        print(case["name"], "steps", res["steps"], "retractions", sum(res["retracted"]), file=sys.stderr)
    args.out.write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
