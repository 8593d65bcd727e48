"""The engine's one-reference-per-request path (oracleGeneral, CSV, id traces): no request
offsets for kernels that never read them, request_hits built from the hit flags only when
read. Checked against the general path on the same trace with an int64 request column
(which the engine does not treat as one reference per request)."""
from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from sitsprof.policies.engine.replay import Prepared, one_reference_each, reads_offsets, run_kernel
from sitsprof.policies.registry import POLICIES, get_policy
from sitsprof.policies.sweep import simulate, simulate_costed, simulate_many
from sitsprof.policies.traces.ids import trace_from_ids, trace_from_requests


def _traces(seed: int, n: int = 3000, objects: int = 200):
    ids = np.random.default_rng(seed).zipf(1.3, size=n) % objects
    lean = trace_from_ids(ids, times=np.arange(n) * 0.01)
    general = dataclasses.replace(lean, request=np.asarray(lean.request).astype(np.int64))
    return lean, general


def test_one_reference_each_is_exact():
    lean, general = _traces(1, n=50)
    assert one_reference_each(lean) and not one_reference_each(general)
    gap = dataclasses.replace(lean, request=np.r_[0, 0, np.arange(2, 50)].astype(np.int32))
    assert not one_reference_each(gap)  # starts at 0, ends at n-1, but request 1 is empty
    multi = trace_from_requests([[1, 2], [3]], np.zeros(2), [1024, 512])
    assert not one_reference_each(multi)


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("capacity", [7, 60])
def test_same_results_as_the_general_path(policy, capacity):
    lean, general = _traces(capacity)
    a, b = simulate(lean, policy, capacity), simulate(general, policy, capacity)
    assert a.to_dict(request_hits=True) | {"seconds": 0} == b.to_dict(request_hits=True) | {"seconds": 0}
    assert a.request_hits.dtype == b.request_hits.dtype == np.int32
    assert a.hits == int(a.request_hits.sum())
    assert a.hits > 0 or capacity < 10  # s3fifo at capacity 7 hits nothing, on either path


def test_request_hits_survive_the_next_replay_and_pickling():
    lean, general = _traces(3)
    prep = Prepared(lean)
    first = run_kernel(prep, get_policy("lru"), 20, {})
    assert "_request_hits" in vars(first) and type(vars(first)["_request_hits"]).__name__ == "_HitsOfFlags"
    run_kernel(prep, get_policy("fifo"), 5, {})  # reuses the Prepared: must not overwrite first's flags
    again = pickle.loads(pickle.dumps(first))
    want = simulate(general, "lru", 20).request_hits
    assert first.request_hits.tolist() == want.tolist() == again.request_hits.tolist()
    assert first.n_requests == len(want) == len(lean)
    results = simulate_many(lean, ["lru", "fifo"], [5, 20])
    assert [r.request_hits.tolist() for r in results] == [
        r.request_hits.tolist() for r in simulate_many(general, ["lru", "fifo"], [5, 20])]


def test_costed_replay_sees_this_runs_flags_and_offsets():
    lean, general = _traces(4)
    a, b = simulate_costed(lean, "arc", 30), simulate_costed(general, "arc", 30)
    assert a.extra == b.extra and a.hits == b.hits


def test_reads_offsets_from_the_kernels_code():
    assert reads_offsets(get_policy("prefix_lru").KERNEL)
    assert not reads_offsets(get_policy("lru").KERNEL)
    assert reads_offsets(get_policy("sits").KERNEL)  # not a compiled kernel: counts as reading

    from numba import njit

    @njit
    def reads(block, req_offsets, n_blocks, capacity, hit):
        return req_offsets.shape[0], 0

    @njit
    def ignores(block, req_offsets, n_blocks, capacity, hit):
        return block.shape[0], 0

    assert reads_offsets(reads) and not reads_offsets(ignores)
