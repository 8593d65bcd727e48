"""vLLM v1-style scheduling steps over the block pool, the whole replay in one numba call.

The call is resumable: the scheduler's state lives in arrays passed in (`new_run_state`) and
`replay(..., t_stop)` returns at the first step boundary at or after simulated time t_stop, so
a run cut into windows (`ReplayRun.advance`) is the one-call run, request for request; between
windows a driver may change the evictor (adaptive.py: SITS and the threshold engine).

Each step (vLLM v1 `Scheduler.schedule`, FCFS):
1. Requests that arrived by now (trace time / rate scale; a closed-loop request its send plus
   its frontend delay, workload.py, so requests sent together may join out of index order)
   join the back of the waiting queue; one that needs more blocks than the pool has
   (ceil((prompt + output - 1) / block_tokens), the KV it holds at its end) is REJECTED:
   counted, never scheduled. One request at a time (RULE_SERIAL, --rate-scale <=
   SERIAL_RATE_SCALE): a request joins only when nothing runs or waits, so same-time arrivals
   are served one after another.
2. Running requests, oldest first, each get their next tokens: the rest of the prompt (and of
   any output recomputed after a preemption), chunked to the step's token budget
   (`max_num_batched_tokens`), else one decode token. Their new blocks are allocated; when
   the pool cannot give them, the newest running request is preempted (recompute: its blocks
   freed tail first, it goes back to the FRONT of the waiting queue with its computed tokens
   reset; tokens it generated are kept and recomputed as prompt) until it can, or until the
   request itself was the one preempted.
3. Unless step 2 preempted, waiting requests are admitted in order while fewer than
   `max_num_seqs` run and budget is left: each looks up its cached prefix (pool.lookup), and
   is admitted when its hit blocks are pinned and its first chunk's new blocks allocated;
   the first that cannot be is left at the front and admission stops for this step. With
   RULE_FULL_ISL (vLLM 0.33's default, `scheduler_reserve_full_isl=True`, passed as
   `full_sequence_must_fit` to `KVCacheManager.allocate_slots`) it is admitted only when blocks
   for its WHOLE known sequence (prompt, plus outputs of a preempted request) minus its hits
   are available, not just its first chunk's; without it (vLLM before 0.33, or
   `--no-scheduler-reserve-full-isl`) only the first chunk's.
4. The step takes `step_seconds(...)` (latency.py); then every scheduled request's computed
   tokens advance; one that has computed all its known tokens samples one more output
   token (the first one is its TTFT); one with all `output_tokens` finishes and frees its
   blocks tail first.
With RULE_PREFILL_FIRST (SGLang's batches, ReplayConfig.prefill_first; `policy validate --backend
sglang`) steps 2-3 build a prefill batch first (running requests with prompt left to compute,
then admissions) and the decoding requests sit it out; only when that batch has no prefill token
is the step a decode batch of every decoding request, with no admission (SGLang's
`get_next_batch_to_run`, `enable_mixed_chunk` off).
When nothing runs and nothing waits, the clock jumps to the next arrival.
An arrival of +inf is a closed-loop request (workload.py, `--concurrency`): the first one
arrives when some earlier request finishes (or is rejected), at that moment, in index order.

`mode` 1 is the all-evictable check (no pinning, no prefix rule): a request's lookup at its
first scheduling serves its trace references one by one as the whole-trace kernels do (a hit
is an evictor hit; a miss takes a slot, evicting when full, and caches the block), every block
evictable at once; the request then holds no blocks. With `--rate-scale 1e-6` (one request at
a time) the cache is then the kernel's, hit for hit.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sitsprof.common.jit import njit

from ..errors import ServingReplayError as ReplayError
from .evictors import ev_admit, ev_hit, ev_miss, ev_pin, ev_unpin
from .latency import StepCostModel, step_seconds
from .pool import (
    CAPACITY,
    HIT_BLOCKS,
    LOOKUP_BLOCKS,
    N_CACHED,
    N_EVICTABLE,
    N_PRIVATE,
    allocate,
    available,
    drop,
    evictable_among,
    lookup,
    note_pinned,
    register,
    release,
    take_slot,
    touch,
)
from .radix import new_radix, r_allocate, r_register, r_release, r_touch
from .sglang_admission import CK_FULL, N_CLOCK, sg_admits, sg_admitted, sg_pass_start, sg_refused, sg_retract

__all__ = [
    "DONE",
    "FUTURE",
    "NUMBA_CACHE_DEPENDS",
    "N_SI",
    "N_STATS",
    "REJECTED",
    "RULE_FULL_ISL",
    "RULE_PREFILL_FIRST",
    "RULE_SERIAL",
    "RULE_SGLANG_ADMIT",
    "RUNNING",
    "SERIAL_RATE_SCALE",
    "SGLANG",
    "SI_DONE",
    "SI_ISSUE",
    "SI_NRUN",
    "SI_NXT",
    "SI_WH",
    "SI_WN",
    "ST_HIT_TOKENS",
    "ST_PEAK_RUNNING",
    "ST_PEAK_WAITING",
    "ST_POOL_BLOCKED",
    "ST_PREEMPTIONS",
    "ST_PREFILL_TOKENS",
    "ST_PROMPT_TOKENS",
    "ST_REJECTED",
    "ST_STEPS",
    "ST_TOKENS",
    "VLLM",
    "VLLM_VERSION",
    "WAITING",
    "ReplayResult",
    "ReplayRun",
    "admission_rules",
    "new_run_state",
    "replay",
    "replay_row",
    "run_replay",
]

#: Sources numba compiles into `replay` besides this file (it inlines and links them without
#: tracking them): its cache files are keyed by all of them (common/numba_locator.py), so an
#: edit to any one compiles it afresh, and another checkout's version keeps its own files.
NUMBA_CACHE_DEPENDS = ("evictors/__init__.py", "evictors/_lists.py", "evictors/lru.py", "evictors/fifo.py",
                       "evictors/sieve.py", "evictors/s3fifo.py", "evictors/arc.py", "evictors/lirs.py",
                       "evictors/lfu.py", "evictors/sits.py", "pool.py", "radix.py", "sglang_admission.py",
                       "latency.py", "../classic/twoq.py", "../classic/_structs.py", "../classic/arc.py",
                       "../classic/lirs.py")

VLLM, SGLANG = 0, 1
# per-request status
WAITING, RUNNING, DONE, REJECTED, FUTURE = 0, 1, 2, 3, 4
# counters in `stats`
(ST_STEPS, ST_PREEMPTIONS, ST_REJECTED, ST_POOL_BLOCKED, ST_PEAK_WAITING, ST_PEAK_RUNNING, ST_TOKENS,
 ST_PREFILL_TOKENS, ST_HIT_TOKENS, ST_PROMPT_TOKENS) = range(10)
N_STATS = 16
# scalars of the resumable scheduler state (`new_run_state`): waiting ring head and length,
# running requests, next arrival, requests finished or rejected, next closed-loop request to issue
SI_WH, SI_WN, SI_NRUN, SI_NXT, SI_DONE, SI_ISSUE = range(6)
N_SI = 8
# `rules` bits: vLLM 0.33's whole-sequence admission gate; one request at a time
# SGLang's PrefillAdder admission and decode retraction (sglang_admission.py)
RULE_FULL_ISL, RULE_SERIAL, RULE_PREFILL_FIRST, RULE_SGLANG_ADMIT = 1, 2, 4, 8
# --rate-scale at or below this serves requests one at a time (RULE_SERIAL): at such rates
# requests with different timestamps never overlap, and same-time arrivals are queued one
# after another instead of joining one step
SERIAL_RATE_SCALE = 1e-3
# the vLLM release whose scheduler defaults the replay follows (admission: full_sequence_must_fit)
VLLM_VERSION = "0.33.0"


@njit(cache=True)
def _ceil_div(a, b):
    return (a + b - 1) // b


@njit(cache=True)
def _next_ready(arrival, delay, status, nxt):
    """When the next request not yet in the engine gets there: the least send + frontend delay
    among those from `nxt` on (sends are in index order, so the scan stops once a send is later
    than the best so far; without delays, arrival[nxt])."""
    best = np.inf
    j = nxt
    while j < arrival.shape[0] and arrival[j] < best:
        if status[j] == FUTURE and arrival[j] + delay[j] < best:
            best = arrival[j] + delay[j]
        j += 1
    return best


@njit(cache=True, inline="always")
def _arrivals(now, nxt, n, n_run, wn, wh, done, iss, serial, mode, capacity, arrival, delay, offsets, status, stats,
              wq):
    """Step 1: requests that arrived by `now` join the back of the waiting ring (one needing
    more blocks than the pool has is rejected; with `serial`, one only when nothing runs or
    waits). Returns (waiting, done, next closed-loop request)."""
    j = nxt
    while j < n and arrival[j] <= now:
        if status[j] != FUTURE or arrival[j] + delay[j] > now:
            j += 1
            continue
        if serial and (n_run > 0 or wn > 0):
            break
        need = offsets[j + 1] - offsets[j]
        if mode == 0 and need > capacity:
            status[j] = REJECTED
            stats[ST_REJECTED] += 1
            done += 1
            if iss < n:  # its client sends the next request at once
                arrival[iss] = now
                iss += 1
        else:
            status[j] = WAITING
            wq[(wh + wn) % (n + 1)] = j
            wn += 1
        j += 1
    return wn, done, iss


@njit(cache=True, inline="always")
def _batch_shape(run, sched, n_sched, comp, prompt, gen, held):
    """Step 4's inputs: (prefill tokens, attention pairs of the prefill, context tokens, blocks in
    the batch's tables, requests in the batch; RULE_PREFILL_FIRST leaves the other kind out: sched 0)."""
    prefill = 0
    pairs = 0.0
    context = 0
    table = 0
    n_step = 0
    for i in range(n_sched):
        r = run[i]
        new = sched[i]
        if new == 0:
            continue
        n_step += 1
        c = comp[r]
        if c + new < prompt[r] + gen[r] or new > 1 or gen[r] == 0:
            prefill += new
            pairs += new * (c + new * 0.5)
        context += c + new
        table += held[r]
    return prefill, pairs, context, table, n_step


@njit(cache=True, inline="always")
def _complete(pid, S, R, pool, engine, mode, sg_admit, clock, now, n, bt, run, sched, n_run, n_sched, offsets, ids,
              prompt, output, comp, gen, held, reg, status, t_first, t_done, arrival, done, iss):
    """Step 5: every scheduled request's computed tokens advance; one that has computed all its
    known tokens samples one more output token (the first is its TTFT); one with all its
    outputs finishes, frees its blocks tail first and leaves `run` (order kept). Returns
    (running, done, next closed-loop request)."""
    ref, cached, kind, pc, ev_log = pool
    keep = 0
    for i in range(n_run):
        r = run[i]
        if i < n_sched:
            comp[r] += sched[i]
            if comp[r] >= prompt[r] + gen[r]:
                gen[r] += 1
                if t_first[r] < 0:
                    t_first[r] = now
                if gen[r] >= output[r]:
                    if mode == 0 and engine == SGLANG:
                        r_release(R, ids, offsets[r], held[r], ref, cached, kind, pc, True,
                                  reg[r], comp[r] // bt, prompt[r] // bt)
                    elif mode == 0:
                        release(pid, S, ids, offsets[r], held[r], ref, kind, pc)
                    held[r] = 0
                    status[r] = DONE
                    if sg_admit:  # a request left the running batch: SGLang's batch_is_full clears
                        clock[CK_FULL] = 0.0
                    t_done[r] = now
                    done += 1
                    if iss < n:  # closed loop: the client sends its next request now
                        arrival[iss] = now
                        iss += 1
                    continue
        run[keep] = r
        keep += 1
    return keep, done, iss


# _nrt=False: the kernel allocates nothing (every array is passed in), and with numba's runtime on,
# each inlined evictor / pool call that unpacks the `S` and `pool` tuples adds atomic reference
# count updates (NRT_IncRef / NRT_DecRef) that numba's refprune pass leaves in the loops: half
# the whole process's CPU time on the bundled Mooncake trace (perf; issue 24). Without the
# runtime numba emits none; the results are the same, bit for bit (bench/bench_replay_warm.py).
@njit(cache=True, _nrt=False)
def replay(pid, S, pool, engine, R, offsets, ids, n_full, prompt, output, arrival, delay, bt, max_batched, max_seqs,
           mode, ref_ids, ref_off, ref_hit, lat_params, rng_state, terms,
           t_sched, t_first, t_done, hit_blocks, n_preempt, status, stats, rq, wq, run, sched, clock, si, t_stop,
           rules):
    """Run steps from the state in (rq, wq, run, clock, si; `new_run_state`) until the trace is
    done or simulated time reaches `t_stop` (checked before each step, so a window ends at a
    step boundary at or after t_stop); the state is stored back, so the next call resumes
    exactly where this one stopped. `rules` is a bit set: RULE_FULL_ISL admits a waiting request
    only when blocks for its whole known sequence fit (vLLM 0.33's default), RULE_SERIAL lets a
    request arrive only when nothing runs or waits (one request at a time). Returns the
    simulated time reached."""
    ref, cached, kind, pc, ev_log = pool
    full_isl = (rules & RULE_FULL_ISL) != 0
    serial = (rules & RULE_SERIAL) != 0
    prefill_first = (rules & RULE_PREFILL_FIRST) != 0
    sg_admit = (rules & RULE_SGLANG_ADMIT) != 0 and mode == 0 and engine == SGLANG
    n = prompt.shape[0]
    capacity = pc[CAPACITY]
    comp = rq[0]  # tokens computed (KV written)
    gen = rq[1]  # output tokens sampled
    held = rq[2]  # blocks in the request's table
    reg = rq[3]  # blocks registered full
    # waiting: a double-ended ring of request ids (each at most once), wq[wh..wh+wn)
    wh = si[SI_WH]
    wn = si[SI_WN]
    n_run = si[SI_NRUN]
    now = clock[0]
    nxt = si[SI_NXT]
    done = si[SI_DONE]
    iss = si[SI_ISSUE]  # closed loop: the next request whose arrival (+inf) a finish sets; n = none
    while done < n:
        if now >= t_stop:
            break
        # 1. arrivals: every request sent by now (arrival) whose frontend delay has passed; with
        # delays, requests sent close together may reach the engine out of index order
        wn, done, iss = _arrivals(now, nxt, n, n_run, wn, wh, done, iss, serial, mode, capacity, arrival, delay,
                                  offsets, status, stats, wq)
        while nxt < n and status[nxt] != FUTURE:
            nxt += 1
        if wn > stats[ST_PEAK_WAITING]:
            stats[ST_PEAK_WAITING] = wn
        if n_run == 0 and wn == 0:
            if nxt >= n:
                break
            now = _next_ready(arrival, delay, status, nxt)
            continue
        # RULE_PREFILL_FIRST (SGLang, enable_mixed_chunk off): a step with prefill work (a chunked
        # prompt to continue, a waiting request to admit) runs that work alone and the decodes wait;
        # a decode step admits nobody. Pass 0 tries the prefill batch; when it schedules no prefill
        # token, pass 1 is the decode batch. Without the rule, one pass: vLLM's mixed batch.
        for pf_pass in range(2 if prefill_first else 1):
            prefill_only = prefill_first and pf_pass == 0
            decode_only = prefill_first and pf_pass == 1
            budget = max_batched
            sg_pad = 0  # tokens of the budget SGLang's page rounding charges (not computed)
            # 2. running requests
            preempted = False
            i = 0
            n_prefill = 0
            if sg_admit and decode_only:  # SGLang retracts decodes before a batch that would not fit
                n_run, wn = sg_retract(clock, R, ids, offsets, ref, cached, kind, pc, run, n_run, prompt, gen, comp,
                                       held, reg, output, status, n_preempt, stats, ST_PREEMPTIONS, wq, wh, wn, n, bt,
                                       WAITING)
            while i < n_run and budget > 0:
                r = run[i]
                b0 = offsets[r]
                new = prompt[r] + gen[r] - comp[r]
                if new > budget:
                    new = budget
                if (prefill_only and gen[r] > 0 and new == 1) or (decode_only and not (gen[r] > 0 and new == 1)):
                    sched[i] = 0  # not in this batch
                    i += 1
                    continue
                if mode == 0:
                    need = _ceil_div(comp[r] + new, bt) - held[r]
                    scheduled = True
                    while need > 0 and available(pc) < need:
                        v = run[n_run - 1]
                        n_run -= 1
                        if engine == SGLANG:
                            r_release(R, ids, offsets[v], held[v], ref, cached, kind, pc, False, 0, 0, 0)
                        else:
                            release(pid, S, ids, offsets[v], held[v], ref, kind, pc)
                        held[v] = 0
                        reg[v] = 0
                        comp[v] = 0
                        status[v] = WAITING
                        wh = (wh - 1) % (n + 1)
                        wq[wh] = v
                        wn += 1
                        n_preempt[v] += 1
                        stats[ST_PREEMPTIONS] += 1
                        preempted = True
                        if v == r:
                            scheduled = False
                            break
                    if not scheduled:
                        break
                    if need > 0:
                        if engine == SGLANG:
                            r_allocate(R, ids, b0, held[r], held[r] + need, ref, cached, kind, pc, ev_log)
                        else:
                            allocate(pid, S, ids, b0, held[r], held[r] + need, cached, kind, pc, ev_log)
                        held[r] += need
                    full = (comp[r] + new) // bt
                    if engine == SGLANG:
                        if not (gen[r] > 0 and new == 1):  # each prefill chunk is inserted; decoded
                            r_register(R, ids, b0, reg[r], full, ref, cached, kind, pc, reg[r])  # at the finish
                            reg[r] = max(reg[r], full)
                    elif full > reg[r]:
                        register(pid, S, ids, b0, reg[r], full, ref, cached, kind, pc)
                        reg[r] = full
                    note_pinned(pc)
                if not (gen[r] > 0 and new == 1):
                    n_prefill += 1
                    if sg_admit:  # whole pages, as for an admission below
                        sg_pad += _ceil_div(new, bt) * bt - new
                        budget -= _ceil_div(new, bt) * bt - new
                sched[i] = new
                budget -= new
                i += 1
            n_sched = i
            # 3. waiting requests (not into a decode batch)
            sg_open = (not sg_admit or decode_only
                       or sg_pass_start(clock, run, n_run, n_sched, sched, prompt, gen, comp, output, bt))
            n_admitted = 0
            if not preempted and not decode_only and sg_open:
                while wn > 0 and n_run < max_seqs and budget > 0:
                    r = wq[wh]
                    b0 = offsets[r]
                    known = prompt[r] + gen[r]
                    first = t_sched[r] < 0
                    if mode == 1:
                        hits = 0
                        if first:
                            lead = True
                            for j in range(ref_off[r], ref_off[r + 1]):
                                x = ref_ids[j]
                                if cached[x]:
                                    ref_hit[j] = 1
                                    v = ev_hit(pid, S, x)
                                    if v >= 0:
                                        drop(cached, pc, ev_log, v)
                                    ev_pin(pid, S, x)
                                    ev_unpin(pid, S, x)
                                    if lead:
                                        hits += 1
                                else:
                                    ref_hit[j] = 0
                                    lead = False
                                    ev_miss(pid, S, x)
                                    take_slot(pid, S, cached, pc, ev_log)
                                    cached[x] = 1
                                    pc[N_CACHED] += 1
                                    pc[N_PRIVATE] -= 1
                                    ev_admit(pid, S, x)
                                    ev_unpin(pid, S, x)
                                    pc[N_EVICTABLE] += 1
                            if hits * bt > known - 1:
                                hits = (known - 1) // bt
                        new = known - hits * bt
                        if new > budget:
                            new = budget
                    else:
                        hits = lookup(ids, b0, (known - 1) // bt, cached)
                        new = known - hits * bt
                        if new > budget:
                            new = budget
                        total = _ceil_div(hits * bt + new, bt)
                        need = total - hits
                        gate = need
                        if full_isl:  # the whole known sequence must fit, not just this chunk
                            gate = max(need, _ceil_div(known, bt) - hits)
                        if sg_admit:  # SGLang: the request's outputs and the running ones' are reserved too
                            if not sg_admits(clock, pc, ids, b0, hits, ref, known, gen[r], output[r], bt):
                                stats[ST_POOL_BLOCKED] += 1
                                sg_refused(clock, n_admitted, n_run)
                                break
                        elif available(pc) - evictable_among(ids, b0, hits, ref) < gate:
                            stats[ST_POOL_BLOCKED] += 1
                            break
                        if engine == SGLANG:
                            r_touch(R, ids, b0, hits, ref, cached, kind, pc)
                            r_allocate(R, ids, b0, hits, total, ref, cached, kind, pc, ev_log)
                        else:
                            touch(pid, S, ids, b0, hits, ref, cached, kind, pc, ev_log)
                            allocate(pid, S, ids, b0, hits, total, cached, kind, pc, ev_log)
                        held[r] = total
                        reg[r] = hits
                        full = (hits * bt + new) // bt
                        if engine == SGLANG:  # the first chunk's insert walks the hit path too
                            r_register(R, ids, b0, hits, full, ref, cached, kind, pc, 0)
                            reg[r] = full
                        elif full > hits:
                            register(pid, S, ids, b0, hits, full, ref, cached, kind, pc)
                            reg[r] = full
                        note_pinned(pc)
                        pc[HIT_BLOCKS] += hits
                        pc[LOOKUP_BLOCKS] += (known - 1) // bt
                    if first:
                        t_sched[r] = now
                        hit_blocks[r] = hits
                        stats[ST_HIT_TOKENS] += hits * bt
                        stats[ST_PROMPT_TOKENS] += prompt[r]
                    comp[r] = hits * bt
                    wh = (wh + 1) % (n + 1)
                    wn -= 1
                    status[r] = RUNNING
                    run[n_run] = r
                    sched[n_run] = new
                    n_run += 1
                    n_sched = n_run
                    budget -= new
                    if sg_admit:  # SGLang charges the chunk budget whole pages (_update_prefill_budget)
                        sg_pad += _ceil_div(new, bt) * bt - new
                        budget -= _ceil_div(new, bt) * bt - new
                    n_prefill += 1
                    n_admitted += 1
                    if sg_admit and sg_admitted(clock, pc, new < known - comp[r], output[r], bt):
                        break
            if n_prefill > 0 or not prefill_only:
                break
        if n_sched == 0:
            # nothing could be scheduled (cannot happen with a non-empty pool); avoid a spin
            if nxt < n:
                now = max(now, _next_ready(arrival, delay, status, nxt))
                continue
            break
        if n_run > stats[ST_PEAK_RUNNING]:
            stats[ST_PEAK_RUNNING] = n_run
        # 4. the step: its time from the batch's shape (latency.py)
        prefill, pairs, context, table, n_step = _batch_shape(run, sched, n_sched, comp, prompt, gen, held)
        tok = max_batched - budget - sg_pad
        dt = step_seconds(lat_params, prefill, pairs, context, tok, n_step, table, rng_state, terms)
        now += dt
        stats[ST_STEPS] += 1
        stats[ST_TOKENS] += tok
        stats[ST_PREFILL_TOKENS] += prefill
        # 5. completion: computed tokens advance, outputs are sampled, finished requests leave
        n_run, done, iss = _complete(pid, S, R, pool, engine, mode, sg_admit, clock, now, n, bt, run, sched, n_run,
                                     n_sched, offsets, ids, prompt, output, comp, gen, held, reg, status, t_first,
                                     t_done, arrival, done, iss)
    si[SI_WH] = wh
    si[SI_WN] = wn
    si[SI_NRUN] = n_run
    si[SI_NXT] = nxt
    si[SI_DONE] = done
    si[SI_ISSUE] = iss
    clock[0] = now
    return now


def admission_rules(reserve_full_isl: bool, serial: bool, prefill_first: bool = False,
                    sglang_admission: bool = False) -> dict:
    """What the results say of the scheduler rules a replay followed."""
    out = {"vllm_version": VLLM_VERSION, "scheduler_reserve_full_isl": bool(reserve_full_isl),
           "admission": ("whole sequence must fit (full_sequence_must_fit)" if reserve_full_isl
                         else "first chunk must fit (vLLM before 0.33)"),
           "one_request_at_a_time": bool(serial)}
    if prefill_first:
        out["batches"] = "prefill batches alone, decodes wait (SGLang, enable_mixed_chunk off)"
    if sglang_admission:
        out["admission"] = "SGLang's PrefillAdder: outputs reserved x new_token_ratio, decodes retracted"
    return out


def new_run_state(n: int):
    """The scheduler state `replay` resumes from, before the first step: per-request counters
    rq (computed tokens, sampled outputs, blocks held, blocks registered), the waiting ring wq,
    the running list and its per-step token counts, the clock and the scalars si."""
    rq = np.zeros((4, n), dtype=np.int64)
    wq = np.empty(n + 1, dtype=np.int64)
    run = np.empty(max(n, 1), dtype=np.int64)
    sched = np.zeros(max(n, 1), dtype=np.int64)
    clock = np.zeros(N_CLOCK, dtype=np.float64)  # the time, then SGLang's admission state (sglang_admission.py)
    si = np.zeros(N_SI, dtype=np.int64)
    return rq, wq, run, sched, clock, si




# ---------------------------------------------------------------- the Python side


@dataclass
class ReplayResult:
    """One replay: per-request times and the engine's counters (`summary()` for the figures)."""

    engine: str
    policy: str
    capacity: int
    block_tokens: int
    rate_scale: float
    arrival: np.ndarray  # seconds, scaled
    t_sched: np.ndarray  # first scheduled (-1 never)
    t_first: np.ndarray  # first output token
    t_done: np.ndarray
    hit_blocks: np.ndarray  # cached-prefix blocks at the first scheduling (-1 never scheduled)
    n_preempt: np.ndarray
    status: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    n_full: np.ndarray
    stats: np.ndarray
    pool_counters: np.ndarray
    terms: np.ndarray
    end_s: float
    seconds: float
    evictions_log: np.ndarray | None = None
    ref_hit: np.ndarray | None = None
    latency_model: str = ""
    extra: dict = field(default_factory=dict)

    def summary(self) -> dict:
        from ..cost.costmodel import latency_summary  # noqa: F401  (same quantile convention)

        done = self.status == DONE
        ttft = (self.t_first - self.arrival)[done]
        e2e = (self.t_done - self.arrival)[done]
        wait = (self.t_sched - self.arrival)[done]
        outs = self.output_tokens[done]
        tpot = np.where(outs > 1, (self.t_done - self.t_first)[done] / np.maximum(outs - 1, 1), np.nan)

        def q(a, p):
            a = a[np.isfinite(a)]
            return float(np.percentile(a, p)) * 1e3 if len(a) else float("nan")

        span = float(self.end_s - (self.arrival.min() if len(self.arrival) else 0.0))
        st, pc = self.stats, self.pool_counters
        n_done = int(done.sum())
        total_terms = float(self.terms.sum())
        hb = self.hit_blocks[done]
        row = {
            "engine": self.engine, "policy": self.policy, "capacity": int(self.capacity),
            "block_tokens": int(self.block_tokens), "rate_scale": float(self.rate_scale),
            "requests": int(len(self.status)), "completed": n_done, "rejected": int(st[ST_REJECTED]),
            "ttft_p50_ms": q(ttft, 50), "ttft_p95_ms": q(ttft, 95), "ttft_p99_ms": q(ttft, 99),
            "tpot_p50_ms": q(tpot, 50), "tpot_p95_ms": q(tpot, 95), "tpot_p99_ms": q(tpot, 99),
            "e2e_p50_ms": q(e2e, 50), "e2e_p95_ms": q(e2e, 95), "e2e_p99_ms": q(e2e, 99),
            "queue_wait_p50_ms": q(wait, 50), "queue_wait_p99_ms": q(wait, 99),
            "tokens_per_s": float(st[ST_TOKENS] + 0) / span if span > 0 else float("nan"),
            "output_tokens_per_s": float(outs.sum()) / span if span > 0 else float("nan"),
            "requests_per_s": n_done / span if span > 0 else float("nan"),
            "block_hit_ratio": float(hb.sum() / max(int(self.n_full[done].sum()), 1)),
            "prefix_hit_ratio": float(st[ST_HIT_TOKENS] / max(int(st[ST_PROMPT_TOKENS]), 1)),
            "preemptions": int(st[ST_PREEMPTIONS]), "evictions": int(pc[3]),
            "peak_pinned_blocks": int(pc[5]), "peak_waiting": int(st[ST_PEAK_WAITING]),
            "peak_running": int(st[ST_PEAK_RUNNING]), "steps": int(st[ST_STEPS]),
            "pool_blocked_steps": int(st[ST_POOL_BLOCKED]),
            "simulated_s": span, "seconds": float(self.seconds),
            "term_share": {k: (float(v) / total_terms if total_terms > 0 else 0.0)
                           for k, v in zip(("compute", "memory", "refetch", "overhead", "allreduce"), self.terms)},
            "latency_model": self.latency_model,
            "rules": self.extra.get("rules"),
        }
        warnings = []
        if st[ST_PREEMPTIONS] or st[ST_POOL_BLOCKED]:
            warnings.append(
                f"the pool of {self.capacity:,} blocks cannot hold the requests in flight: "
                f"{int(st[ST_PREEMPTIONS]):,} preemptions, {int(st[ST_POOL_BLOCKED]):,} steps with a waiting "
                "request held back for blocks")
        if st[ST_REJECTED]:
            warnings.append(f"{int(st[ST_REJECTED]):,} requests need more blocks than the pool has and were rejected")
        row["warnings"] = warnings
        return row


def run_replay(trace, policy: str = "lru", capacity: int = 1000, config=None, *, all_evictable: bool = False,
               log_evictions: bool = False, reblocked=None, driver=None, **settings) -> ReplayResult:
    """Replay `trace` through the serving engine (module docstring) as `config` (a
    config.ReplayConfig; keyword `settings` named as its fields are laid over it, so
    ``run_replay(trace, "lru", 1000, rate_scale=2)`` still works); `all_evictable` is the
    no-pinning check mode (every reference a kernel reference). `driver(run, meta)` (a
    ReplayRun and what `ReplayRun.result` needs) drives the run window by window and returns
    the ReplayResult (adaptive.py's SITS / threshold drivers); None runs it in one call.
    -p sits runs adaptive.py's controller every `window_s` simulated seconds (default
    adaptive.WINDOW_S); `threshold` serves LIRS until the threshold engine switches to SITS;
    `sits` holds SitsConfig fields and threshold_windows / _budget_ms / _horizon_s.
    `reserve_full_isl` is vLLM 0.33's admission gate (the whole sequence must fit; False: the
    first chunk only, as vLLM before it); `serial` serves one request at a time (None: when
    rate_scale <= SERIAL_RATE_SCALE)."""
    import time as _time

    from .config import ReplayConfig
    from .evictors import LIRS, POLICY_IDS, S3FIFO, SITS
    from .evictors import new_state as new_evictor
    from .pool import new_pool
    from .reblock import reblock

    cfg = ReplayConfig.of(config, **settings)
    engine, rate_scale = cfg.engine, cfg.rate_scale
    policy = policy.lower()
    radix_policy = "lru"
    if cfg.engine == "sglang":  # SGLang's own eviction strategies order the radix tree's leaves
        from .radix import RADIX_POLICIES

        if policy not in RADIX_POLICIES:
            raise ReplayError(f"--engine sglang evicts radix-tree leaf nodes by SGLang's strategies; -p {policy} "
                              f"is not one (choose from {', '.join(RADIX_POLICIES)}, or --engine vllm)")
        radix_policy, policy = policy, "lru"  # the block evictor is unused under sglang
    if policy not in POLICY_IDS:
        raise ReplayError(f"policy {policy!r} has no incremental form for the serving replay; "
                          f"choose from {', '.join(POLICY_IDS)}")
    cfg.checked()
    if capacity < 1:
        raise ReplayError(f"capacity {capacity} blocks: the pool needs at least one block (-c 1000)")
    pid = POLICY_IDS[policy]
    threshold, window_s, sits = cfg.threshold, cfg.window_s, cfg.sits
    if (threshold or window_s is not None or sits) and pid != SITS:
        raise ReplayError(f"--threshold, --window and the SITS options drive -p sits (not -p {policy})")
    if pid == SITS and driver is None:
        from .adaptive import WINDOW_S
        from .adaptive import driver as sits_driver

        driver = sits_driver(WINDOW_S if window_s is None else window_s, threshold, cfg.calibration, **(sits or {}))
        if threshold:
            pid = LIRS  # the threshold engine's baseline serves until it hot-switches to SITS
    if pid == LIRS and capacity < 2:
        raise ReplayError(f"lirs at {capacity} block has no LIR set (it needs 2 blocks or more; raise -c)")
    if pid == S3FIFO and capacity < 20:
        raise ReplayError(f"s3fifo at {capacity} blocks has no small queue (it needs 20 blocks or more; raise -c)")
    rb = reblocked if reblocked is not None else reblock(trace, cfg.block_tokens)
    mode = 1 if all_evictable else 0
    n_ids = (int(rb.ref_ids.max()) + 1 if len(rb.ref_ids) else 1) if mode else rb.n_ids
    S = new_evictor(pid, n_ids, capacity)
    log_cap = int(rb.offsets[-1]) * 4 + len(rb.ref_ids) if log_evictions else 0
    pool = new_pool(n_ids, int(rb.offsets[-1]), capacity, log_cap)
    seed = cfg.seed
    model_obj = StepCostModel.from_calibration(cfg.calibration, cfg.model, rb.block_tokens, seed,
                                               profile=cfg.step_profile)
    arrival = np.ascontiguousarray(rb.arrival / rate_scale, dtype=np.float64)
    ref_hit = np.zeros(len(rb.ref_ids) if mode else 1, dtype=np.uint8)
    rng_state = np.array([np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(1)], dtype=np.uint64)
    terms = np.zeros(5, dtype=np.float64)  # compute, memory, refetch, overhead, all-reduce (latency.py)
    if engine == "sglang" and all_evictable:
        raise ReplayError("the all-evictable check mode is the vLLM pool's; use engine='vllm'")
    R = new_radix(n_ids, engine == "sglang", radix_policy)
    reserve_full_isl, serial = cfg.reserve_full_isl, cfg.serial
    if serial is None:
        serial = rate_scale <= SERIAL_RATE_SCALE
    rules = ((RULE_FULL_ISL if reserve_full_isl else 0) | (RULE_SERIAL if serial else 0)
             | (RULE_PREFILL_FIRST if cfg.prefill_first else 0) | (RULE_SGLANG_ADMIT if cfg.sglang_admission else 0))
    run = ReplayRun(pid, S, pool, SGLANG if engine == "sglang" else VLLM, R, rb, arrival, cfg.max_num_batched_tokens,
                    cfg.max_num_seqs, mode, ref_hit, model_obj.params, rng_state, terms, rules)
    if cfg.sglang_admission:
        from .sglang_admission import init_admission

        init_admission(run.clock, ignore_eos=cfg.sglang_ignore_eos)
    meta = {"engine": engine, "policy": radix_policy if engine == "sglang" else policy, "capacity": int(capacity),
            "rate_scale": float(rate_scale),
            "rules": admission_rules(reserve_full_isl, serial, cfg.prefill_first, cfg.sglang_admission),
            "log_evictions": log_evictions,
            "latency_model": getattr(model_obj, "description", type(model_obj).__name__)}
    from . import watch

    watch.started(meta, arrival)
    t0 = _time.perf_counter()
    if driver is None:
        run.advance(np.inf)
        result = run.result(meta, _time.perf_counter() - t0)
    else:
        result = driver(run, meta)
    watch.finished(meta, _time.perf_counter() - t0)
    return result


class ReplayRun:
    """One replay's arrays and resumable scheduler state: `advance(t_stop)` runs steps until
    simulated time reaches t_stop (at a step boundary) or the trace is done. Between calls the
    caller may read the per-request times so far and change the evictor (`pid`, `S`: the
    adaptive drivers in adaptive.py do); a run cut into windows equals the one-call run."""

    def __init__(self, pid, S, pool, engine_id, R, rb, arrival, max_batched, max_seqs, mode, ref_hit, lat_params,
                 rng_state, terms, rules=RULE_FULL_ISL):
        n = rb.n_requests
        self.pid, self.S, self.pool, self.engine_id, self.R, self.rb = pid, S, pool, engine_id, R, rb
        self.arrival, self.max_batched, self.max_seqs, self.mode = arrival, max_batched, max_seqs, mode
        self.ref_hit, self.lat_params, self.rng_state, self.terms = ref_hit, lat_params, rng_state, terms
        self.rules = int(rules)
        # seconds from a request's send to its place in the engine's waiting queue (workload.py's
        # frontend delay; zeros: it is there at its arrival); TTFT still counts from the send
        fd = getattr(rb, "frontend_delay", None)
        self.delay = np.zeros(n) if fd is None else np.ascontiguousarray(fd, dtype=np.float64)
        self.t_sched = np.full(n, -1.0)
        self.t_first = np.full(n, -1.0)
        self.t_done = np.full(n, -1.0)
        self.hit_blocks = np.full(n, -1, dtype=np.int64)
        self.n_preempt = np.zeros(n, dtype=np.int64)
        self.status = np.full(n, FUTURE, dtype=np.int8)
        self.stats = np.zeros(N_STATS, dtype=np.int64)
        self.rq, self.wq, self.run, self.sched, self.clock, self.si = new_run_state(n)
        closed = np.flatnonzero(np.isposinf(arrival))  # closed-loop requests (workload.py) issue in order
        self.si[SI_ISSUE] = int(closed[0]) if len(closed) else n
        self.calls = 0

    REJECTED = REJECTED  # the status code, for drivers (which do not import this module)

    @property
    def now(self) -> float:
        return float(self.clock[0])

    @property
    def arrived(self) -> int:
        """Requests that have arrived (joined the waiting queue or were rejected) so far."""
        return int(self.si[SI_NXT])

    @property
    def finished(self) -> bool:
        """Every request done or rejected, or nothing left that could run."""
        return bool(self.si[SI_DONE] >= len(self.status) or self._stalled)

    _stalled = False

    def advance(self, t_stop: float) -> float:
        """Steps until simulated time >= t_stop or the trace is done; returns the time reached.
        Run as short compiled calls (watch.py), so Ctrl-C acts at once and progress is seen."""
        from .watch import advance as chunked

        self.calls += 1
        end = chunked(self, t_stop, self._call)
        if end < t_stop:  # replay stopped short of t_stop: nothing is left to run
            self._stalled = True
        return float(end)

    def _call(self, t_stop: float) -> float:
        """One compiled call of `replay` up to simulated time t_stop."""
        rb = self.rb
        return replay(self.pid, self.S, self.pool, self.engine_id, self.R, rb.offsets, rb.ids, rb.n_full,
                     rb.prompt_tokens, rb.output_tokens, self.arrival, self.delay, rb.block_tokens, self.max_batched,
                     self.max_seqs, self.mode, rb.ref_ids, rb.ref_offsets, self.ref_hit, self.lat_params,
                     self.rng_state, self.terms, self.t_sched, self.t_first, self.t_done, self.hit_blocks,
                     self.n_preempt, self.status, self.stats, self.rq, self.wq, self.run, self.sched, self.clock,
                     self.si, float(t_stop), self.rules)

    def result(self, meta: dict, seconds: float) -> ReplayResult:
        rb = self.rb
        pc = self.pool[3]
        ev_log = self.pool[4][: min(int(pc[4]), len(self.pool[4]))].copy() if meta["log_evictions"] else None
        return ReplayResult(
            engine=meta["engine"], policy=meta["policy"], capacity=meta["capacity"], block_tokens=rb.block_tokens,
            rate_scale=meta["rate_scale"], arrival=self.arrival, t_sched=self.t_sched, t_first=self.t_first,
            t_done=self.t_done, hit_blocks=self.hit_blocks, n_preempt=self.n_preempt, status=self.status,
            prompt_tokens=rb.prompt_tokens, output_tokens=rb.output_tokens, n_full=rb.n_full, stats=self.stats,
            pool_counters=pc.copy(), terms=self.terms, end_s=self.now, seconds=seconds, evictions_log=ev_log,
            ref_hit=self.ref_hit if self.mode else None, latency_model=meta["latency_model"],
            extra={"rules": meta["rules"]} if "rules" in meta else {})


def _series(res: ReplayResult, bins: int = 100) -> list[dict]:
    """Queue length, running requests and the prefix hit ratio over simulated time, in `bins`
    equal windows: waiting = requests arrived and not yet first scheduled (a preempted request
    waiting again is not counted), running = first scheduled and not finished, hit ratio = hit
    blocks over full prompt blocks of the requests first scheduled in the window."""
    ok = res.t_sched >= 0
    if not ok.any():
        return []
    t0 = float(res.arrival.min())
    t1 = max(float(res.end_s), t0 + 1e-9)
    edges = np.linspace(t0, t1, bins + 1)
    mid = (edges[:-1] + edges[1:]) / 2
    arr = np.sort(res.arrival[ok])
    sch = np.sort(res.t_sched[ok])
    done_t = np.sort(np.where(res.t_done[ok] >= 0, res.t_done[ok], np.inf))
    waiting = np.searchsorted(arr, mid, "right") - np.searchsorted(sch, mid, "right")
    running = np.searchsorted(sch, mid, "right") - np.searchsorted(done_t, mid, "right")
    which = np.clip(np.searchsorted(edges, res.t_sched[ok], "right") - 1, 0, bins - 1)
    hits = np.bincount(which, weights=res.hit_blocks[ok], minlength=bins)
    full = np.bincount(which, weights=res.n_full[ok], minlength=bins)
    return [{"time_s": float(m), "waiting": int(w), "running": int(r),
             "hit_ratio": (float(h / f) if f > 0 else None)}
            for m, w, r, h, f in zip(mid, waiting, running, hits, full)]


def replay_row(res: ReplayResult) -> dict:
    """One `replay` entry of a policy-results document (docs/policy-results.md)."""
    row = res.summary()
    done = res.status == DONE
    ttft = (res.t_first - res.arrival)[done] * 1e3
    row["ttft_cdf_ms"] = [float(v) for v in np.percentile(ttft, np.arange(101))] if len(ttft) else []
    row["series"] = _series(res)
    row["sits"] = res.extra.get("sits")  # -p sits: the controller's windows and decisions (adaptive.py)
    from .saturation import measure

    row.update(measure(res))  # did the replica keep up with the arrivals (saturated: True, False, None)
    return row
