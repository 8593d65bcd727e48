"""The serving evictors' results, pinned: a fixed small replay per policy gives the figures it
gave when they were recorded (issue 24's refactor of evictors.py into one module per policy,
and of scheduler.replay into steps, must change no result).

Each policy replays the same generated workload twice: with pinning (vLLM rules, a pool a
little over the largest request, rate x4: preemptions and evictions) and all-evictable (the
no-pinning check mode, one request at a time). Recorded per run: the engine's integer
counters, a digest of the per-request outcomes and of the eviction sequence (or of the hit
vector), so any change to any victim anywhere shows. `python tests/test_serving_evictors_pinned.py`
prints the table afresh (only when a change of results is intended, and said so).
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from sitsprof.policies.serving.names import SERVING_POLICIES
from sitsprof.policies.serving.reblock import reblock
from sitsprof.policies.serving.scheduler import run_replay
from sitsprof.policies.traces.generator import generate_workload


def _digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode() + a.tobytes())
    return h.hexdigest()[:16]


#: Beside one run per policy: -p sits with the threshold engine (LIRS serving until the switch,
#: the LIRS -> SITS back buffer built and swapped in mid-run) and SGLang's radix tree.
VARIANTS = {"sits-threshold": ("sits", {"threshold": True, "window_s": 1.0}),
            "sglang-lru": ("lru", {"engine": "sglang"})}


def _figures(policy: str, pinned: bool, trace=None, rb=None):
    trace = generate_workload(seed=5, duration_s=30.0) if trace is None else trace
    if pinned:
        rb = reblock(trace, 16) if rb is None else rb
        cap = int(np.diff(rb.offsets).max()) + 150
        policy, settings = VARIANTS.get(policy, (policy, {}))
        res = run_replay(trace, policy, cap, rate_scale=4.0, reblocked=rb, log_evictions=True, **settings)
        if settings.get("threshold"):
            assert res.extra["sits"]["threshold"]["fired"]
        outcome = _digest(res.hit_blocks, res.n_preempt, res.status, res.evictions_log)
    else:
        res = run_replay(trace, policy, 40, block_tokens=trace.block_tokens, rate_scale=1e-6,
                         all_evictable=True, log_evictions=True)
        outcome = _digest(res.ref_hit, res.evictions_log)
    s = res.summary()
    return (s["preemptions"], s["evictions"], s["steps"], s["pool_blocked_steps"], s["peak_pinned_blocks"],
            int(res.hit_blocks[res.hit_blocks > 0].sum()), float(f"{res.end_s:.9g}"), outcome)


#: (preemptions, evictions, steps, pool-blocked steps, peak pinned, hit blocks, simulated end s (9
#: digits), digest), recorded from evictors.py as one state tuple, before issue 24's split.
PINNED = {
    'lru': (24, 11816, 6774, 6125, 1330, 3136, 90.3498766, '1c225a5356981762'),
    'fifo': (19, 12005, 6774, 6236, 1330, 3034, 91.0568439, '4c5de63528299e8a'),
    'sieve': (24, 12391, 6774, 6125, 1330, 3168, 91.0236212, 'd6ed260088f02195'),
    's3fifo': (19, 11937, 6774, 6236, 1330, 3098, 90.9800473, '3d4393052f817161'),
    'arc': (24, 11887, 6774, 6125, 1330, 3200, 90.8104566, 'b83b55a3346c2b3b'),
    'lirs': (19, 12005, 6774, 6236, 1330, 3034, 91.0568439, '33148d2c9db91f6d'),
    'lfu': (19, 11854, 6774, 6201, 1330, 3232, 90.8251029, '20d418fea0b399b8'),
    'sits': (24, 11887, 6774, 6125, 1330, 3200, 90.8104566, 'b83b55a3346c2b3b'),
    'sits-threshold': (24, 11791, 6774, 6125, 1330, 3296, 90.695984, 'ded5cec183312c59'),
    'sglang-lru': (24, 12303, 6774, 6125, 1330, 3136, 90.9804736, 'cc8b656568cb1fd5'),
}
ALL_EVICTABLE = {
    'lru': (0, 377, 33817, 0, 0, 100, 29954002.9, '289e9fa4be8691d4'),
    'fifo': (0, 391, 33817, 0, 0, 86, 29954002.9, 'ba3430626ec8072a'),
    'sieve': (0, 363, 33817, 0, 0, 114, 29954002.9, '5914fbf0edf617c3'),
    's3fifo': (0, 354, 33817, 0, 0, 123, 29954002.9, '4b42f603da8e308b'),
    'arc': (0, 360, 33817, 0, 0, 117, 29954002.9, '66c8b4b0e5b41657'),
    'lirs': (0, 355, 33817, 0, 0, 122, 29954002.9, '00b27044ca453d92'),
    'lfu': (0, 363, 33817, 0, 0, 114, 29954002.9, '5914fbf0edf617c3'),
    'sits': (0, 362, 33817, 0, 0, 115, 29954002.9, '6ddf9773f2536cff'),
}


@pytest.fixture(scope="module")
def workload():
    trace = generate_workload(seed=5, duration_s=30.0)
    return trace, reblock(trace, 16)


@pytest.mark.parametrize("policy", SERVING_POLICIES + tuple(VARIANTS))
def test_pinned_replay_gives_the_recorded_figures(workload, policy):
    trace, rb = workload
    got = _figures(policy, True, trace, rb)
    assert got[0] > 0 and got[1] > 0  # preemptions and evictions: the pinned paths are exercised
    assert got == PINNED[policy]


@pytest.mark.parametrize("policy", SERVING_POLICIES)
def test_all_evictable_replay_gives_the_recorded_figures(workload, policy):
    trace, _ = workload
    got = _figures(policy, False, trace)
    assert got[1] > 0
    assert got == ALL_EVICTABLE[policy]


if __name__ == "__main__":
    trace = generate_workload(seed=5, duration_s=30.0)
    rb = reblock(trace, 16)
    for name, pinned in (("PINNED", True), ("ALL_EVICTABLE", False)):
        print(f"{name} = {{")
        for p in SERVING_POLICIES + (tuple(VARIANTS) if pinned else ()):
            print(f"    {p!r}: {_figures(p, pinned, trace, rb)!r},")
        print("}")
