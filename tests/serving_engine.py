"""The numba serving replay (`sitsprof.policies.serving`) driven with the plain-Python reference's
inputs and read back into its outputs (serving_reference.Request -> serving_reference.Result), so
the crafted and differential tests run one case through both. A plain module beside the tests
(as libcachesim_ref.py is); it is the only test helper that imports the engine, and it says why
the engine cannot run (`engine_status`) instead of failing, while parts of it do not exist yet.
"""
from __future__ import annotations

import numpy as np
import serving_reference as ref


class EngineUnavailable(Exception):
    pass


def _engine_modules(engine: str):
    try:
        from sitsprof.policies.serving import evictors, pool, scheduler, steptime
    except ImportError as e:  # S2's package not there yet
        raise EngineUnavailable(f"sitsprof.policies.serving is not importable yet ({e})") from e
    if engine != "vllm":
        raise EngineUnavailable(f"the engine has no {engine} replay yet (policies/serving/radix.py)")
    return evictors, pool, scheduler, steptime


def fixed_step_params(scheduler, steptime, step_time: float, block_tokens: int):
    """Parameters that make the engine's step model last exactly `step_time` every step: every
    cost term zeroed, the per-step overhead set to it (checked by calling the model)."""
    fn = scheduler.step_seconds
    if fn is steptime.step_seconds:
        params = tuple(np.float64(v) for v in (0.0, 0.0, 0.0, 0.0, 0.0, step_time))
    else:
        try:
            from sitsprof.policies.serving import latency
        except ImportError as e:
            raise EngineUnavailable(f"the engine's step model is neither steptime nor latency ({e})") from e
        model = latency.StepCostModel.from_calibration(None, None, block_tokens, 0)
        sc = np.array(model.params[0], dtype=np.float64, copy=True)
        for name in ("S_LIN", "S_ATTN", "S_WEIGHTS", "S_KV_READ", "S_KV_WRITE", "S_REFETCH"):
            sc[getattr(latency, name)] = 0.0
        sc[latency.S_OVERHEAD] = step_time
        params = (sc, *model.params[1:])
    terms = np.zeros(4)
    probe = fn(params, 1000, 5e5, 4000, 1000, 3, 300, np.ones(1, dtype=np.uint64), terms)
    if probe != step_time:
        raise EngineUnavailable(f"the engine's step model cannot be fixed at {step_time} s (gives {probe})")
    return params


def engine_status(engine: str = "vllm") -> str | None:
    """None when the engine can run these tests, else the reason it cannot."""
    try:
        _evictors, _pool, scheduler, steptime = _engine_modules(engine)
        fixed_step_params(scheduler, steptime, 1.0, 16)
    except EngineUnavailable as e:
        return str(e)
    return None


def engine_replay(requests, capacity: int, *, block_tokens: int = 16, max_num_batched_tokens: int = 8192,
                  max_num_seqs: int = 256, step_time: float = 1.0, engine: str = "vllm",
                  policy: str = "lru") -> ref.Result:
    evictors, pool_mod, scheduler, _steptime = _engine_modules(engine)
    bt = block_tokens
    arrivals = [r.arrival for r in requests]
    if arrivals != sorted(arrivals):
        raise ValueError("engine_replay needs requests in arrival order")
    # content ids -> dense ids (first appearance), private blocks numbered as the reference does
    dense: dict = {}
    back: list = []
    offsets = [0]
    flat: list = []
    next_private = [-1]
    for r in requests:
        for x in ref._content_ids(r, bt, next_private):
            if x not in dense:
                dense[x] = len(back)
                back.append(x)
            flat.append(dense[x])
        offsets.append(len(flat))
    n = len(requests)
    n_ids = len(back)
    offsets_a = np.asarray(offsets, dtype=np.int64)
    ids = np.asarray(flat, dtype=np.int32)
    prompt = np.asarray([r.prompt_tokens for r in requests], dtype=np.int64)
    output = np.asarray([max(1, r.output_tokens) for r in requests], dtype=np.int64)
    n_full = (prompt // bt).astype(np.int32)
    arrival = np.asarray(arrivals, dtype=np.float64)
    pid = evictors.POLICY_IDS[policy]
    S = evictors.new_state(pid, n_ids, capacity)
    log_cap = max(len(flat) * 2, 16)
    pool = pool_mod.new_pool(n_ids, len(flat), capacity, log_capacity=log_cap)
    lat = fixed_step_params(scheduler, _steptime, float(step_time), bt)
    f = lambda: np.full(n, -1.0)  # noqa: E731
    t_sched, t_first, t_done = f(), f(), f()
    hit_blocks = np.full(n, -1, dtype=np.int64)
    n_preempt = np.zeros(n, dtype=np.int64)
    status = np.zeros(n, dtype=np.int64)
    stats = np.zeros(scheduler.N_STATS, dtype=np.int64)
    end = scheduler.replay(pid, S, pool, offsets_a, ids, n_full, prompt, output, arrival, np.int64(bt),
                           np.int64(max_num_batched_tokens), np.int64(max_num_seqs), np.int64(0),
                           np.zeros(1, dtype=np.int32), np.zeros(n + 1, dtype=np.int64),
                           np.zeros(1, dtype=np.uint8), lat, np.zeros(1, dtype=np.uint64), np.zeros(4),
                           t_sched, t_first, t_done, hit_blocks, n_preempt, status, stats)
    pc, ev_log = pool[3], pool[4]
    n_log = int(pc[pool_mod.LOG_N])
    assert n_log <= log_cap
    outcomes = []
    for i in range(n):
        o = ref.Outcome(index=i)
        o.status = {scheduler.DONE: "done", scheduler.REJECTED: "rejected"}.get(int(status[i]), str(status[i]))
        o.first_scheduled_time = float(t_sched[i])
        o.first_token_time = float(t_first[i])
        o.finish_time = float(t_done[i])
        o.cached_blocks = int(hit_blocks[i])
        o.preemptions = int(n_preempt[i])
        outcomes.append(o)
    return ref.Result(requests=outcomes, evictions=[back[int(v)] for v in ev_log[:n_log]],
                      hit_blocks=int(pc[pool_mod.HIT_BLOCKS]), steps=[], n_steps=int(stats[scheduler.ST_STEPS]),
                      end_time=float(end), preemptions=int(stats[scheduler.ST_PREEMPTIONS]),
                      rejected=int(stats[scheduler.ST_REJECTED]))


