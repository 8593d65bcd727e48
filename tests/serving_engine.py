"""The numba serving replay (`sitsprof.policies.serving`) driven with the plain-Python reference's
inputs and read back into its outputs (serving_reference.Request -> serving_reference.Result), so
the crafted and differential tests run one case through both. A plain module beside the tests
(as libcachesim_ref.py is); it is the only test helper that imports the engine.

The engine runs through its public entry point, `scheduler.run_replay(reblocked=...,
log_evictions=True)`, with the step cost model swapped for one whose every step lasts exactly
`step_time` (the model's cost terms zeroed, its per-step overhead set to the step time), so the
schedules of the two can be compared to the last bit.
"""
from __future__ import annotations

import contextlib

import numpy as np
import serving_reference as ref

from sitsprof.policies.serving import latency, reblock, scheduler


def fixed_step_params(step_time: float, block_tokens: int):
    """Parameters that make the engine's step model last exactly `step_time` every step: every
    cost term zeroed, the per-step overhead set to it (checked by calling the model)."""
    model = latency.StepCostModel.from_calibration(None, None, block_tokens, 0)
    sc = np.array(model.params[0], dtype=np.float64, copy=True)
    for name in ("S_LIN", "S_ATTN", "S_WEIGHTS", "S_KV_READ", "S_KV_WRITE", "S_REFETCH"):
        sc[getattr(latency, name)] = 0.0
    sc[latency.S_OVERHEAD] = step_time
    params = (sc, *model.params[1:])
    probe = scheduler.step_seconds(params, 1000, 5e5, 4000, 1000, 3, 300, np.ones(1, dtype=np.uint64), np.zeros(4))
    assert probe == step_time, f"the engine's step model cannot be fixed at {step_time} s (gives {probe})"
    return params


class _FixedStepModel:
    params: tuple = ()
    description = "fixed step (tests)"

    @classmethod
    def from_calibration(cls, *args, **kwargs):
        return cls()


@contextlib.contextmanager
def _fixed_steps(params):
    model = type("FixedStepModel", (_FixedStepModel,), {"params": params})
    saved = scheduler.StepCostModel
    scheduler.StepCostModel = model
    try:
        yield
    finally:
        scheduler.StepCostModel = saved


def to_reblocked(reblock_mod, requests, block_tokens: int):
    """The reference's requests as the engine's `Reblocked` (dense ids in order of first
    appearance; `back` maps a dense id to the reference's content id)."""
    arrivals = [r.arrival for r in requests]
    if arrivals != sorted(arrivals):
        raise ValueError("the engine needs requests in arrival order")
    dense: dict = {}
    back: list = []
    offsets = [0]
    flat: list = []
    next_private = [-1]
    full = []
    for r in requests:
        ids = ref._content_ids(r, block_tokens, next_private)
        for x in ids:
            if x not in dense:
                dense[x] = len(back)
                back.append(x)
            flat.append(dense[x])
        offsets.append(len(flat))
        full.append(min(r.prompt_tokens // block_tokens, len(ids)))
    prompt = np.asarray([r.prompt_tokens for r in requests], dtype=np.int64)
    rb = reblock_mod.Reblocked(
        offsets=np.asarray(offsets, dtype=np.int64), ids=np.asarray(flat, dtype=np.int32),
        n_full=np.asarray(full, dtype=np.int32), prompt_tokens=prompt,
        output_tokens=np.asarray([max(1, r.output_tokens) for r in requests], dtype=np.int64),
        arrival=np.asarray(arrivals, dtype=np.float64), n_shared=len(back), n_ids=len(back),
        block_tokens=int(block_tokens), ref_ids=np.zeros(0, dtype=np.int32),
        ref_offsets=np.zeros(len(requests) + 1, dtype=np.int64))
    return rb, back


def engine_replay(requests, capacity: int, *, block_tokens: int = 16, max_num_batched_tokens: int = 8192,
                  max_num_seqs: int = 256, step_time: float | None = 1.0, engine: str = "vllm",
                  policy: str = "lru", reserve_full_isl: bool = True, serial: bool = False) -> ref.Result:
    """`step_time` None: the engine's own step model (default calibration and model, seed 0)."""
    bt = block_tokens
    rb, back = to_reblocked(reblock, requests, bt)
    fixed = (_fixed_steps(fixed_step_params(float(step_time), bt))
             if step_time is not None else contextlib.nullcontext())
    with fixed:
        res = scheduler.run_replay(None, policy=policy, capacity=capacity, engine=engine, block_tokens=bt,
                                   max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                                   log_evictions=True, reblocked=rb, reserve_full_isl=reserve_full_isl,
                                   serial=serial)
    return _result(res, back, len(requests))


def engine_replay_trace(trace, requests, capacity: int, *, block_tokens: int = 16, rate_scale: float = 1.0,
                        max_num_batched_tokens: int = 8192, max_num_seqs: int = 256, step_time: float = 1.0,
                        engine: str = "vllm", policy: str = "lru", reserve_full_isl: bool = True) -> ref.Result:
    """The engine end to end on a `Trace` (its own re-blocking and --rate-scale), with a fixed
    step; its block ids are named back as the reference's `requests` (the same trace re-blocked
    by serving_reference.reblock_records) name them, position by position."""
    bt = block_tokens
    rb = reblock.reblock(trace, bt)
    back: dict = {}
    next_private = [-1]
    for r, q in enumerate(requests):
        lo, hi = int(rb.offsets[r]), int(rb.offsets[r + 1])
        mine = ref._content_ids(q, bt, next_private)
        if len(mine) != hi - lo:
            raise AssertionError(f"request {r}: the engine re-blocks it to {hi - lo} blocks, "
                                 f"the reference to {len(mine)}")
        for k, x in enumerate(mine):
            if back.setdefault(int(rb.ids[lo + k]), x) != x:
                raise AssertionError(f"request {r} block {k}: engine id {int(rb.ids[lo + k])} names two blocks")
    with _fixed_steps(fixed_step_params(float(step_time), bt)):
        res = scheduler.run_replay(trace, policy=policy, capacity=capacity, engine=engine, block_tokens=bt,
                                   rate_scale=rate_scale, max_num_batched_tokens=max_num_batched_tokens,
                                   max_num_seqs=max_num_seqs, log_evictions=True, reserve_full_isl=reserve_full_isl)
    return _result(res, back, len(requests))


def _result(res, back, n: int) -> ref.Result:
    names = {int(scheduler.DONE): "done", int(scheduler.REJECTED): "rejected"}
    outcomes = []
    for i in range(n):
        o = ref.Outcome(index=i)
        o.status = names.get(int(res.status[i]), str(int(res.status[i])))
        o.first_scheduled_time = float(res.t_sched[i])
        o.first_token_time = float(res.t_first[i])
        o.finish_time = float(res.t_done[i])
        o.cached_blocks = int(res.hit_blocks[i])
        o.preemptions = int(res.n_preempt[i])
        outcomes.append(o)
    pc, stats = res.pool_counters, res.stats
    return ref.Result(requests=outcomes, evictions=[back[int(v)] for v in res.evictions_log],
                      hit_blocks=int(pc[_counter("HIT_BLOCKS")]),
                      steps=[], n_steps=int(stats[scheduler.ST_STEPS]), end_time=float(res.end_s),
                      preemptions=int(stats[scheduler.ST_PREEMPTIONS]), rejected=int(stats[scheduler.ST_REJECTED]))


def _counter(name: str) -> int:
    from sitsprof.policies.serving import pool

    return int(getattr(pool, name))


def engine_step_model(block_tokens: int):
    """The engine's own step model as a reference `step_time` callable: the step's arguments
    computed from the reference's Step record as latency.py's docstring defines them, passed to the engine's
    @njit step function with the model's parameters and seeded state (so a schedule under the
    real latency model can be compared too)."""
    model = scheduler.StepCostModel.from_calibration(None, None, block_tokens, 0)
    rng = model.rng_state()
    terms = np.zeros(4)
    fn = scheduler.step_seconds

    def step_time(step) -> float:
        prefill, pairs, context, written, table = 0, 0.0, 0, 0, 0
        for _i, new, before, generated, held, known in step.scheduled:
            # a prefill chunk: anything but one decode token after every known token is computed
            if generated == 0 or new > 1 or before + new < known:
                prefill += new
                pairs += new * (before + new * 0.5)  # chunk x (prefix before it + chunk / 2)
            context += before + new  # the KV each scheduled request's attention reads
            written += new  # tokens whose KV the step writes
            table += held  # block-table entries
        return fn(model.params, prefill, pairs, context, written, len(step.scheduled), table, rng, terms)

    step_time.terms = terms
    return step_time
