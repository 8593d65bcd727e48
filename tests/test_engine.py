"""The engine's results (hit ratios, per-request hits, errors) and properties of every
registered policy."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sitsprof.policies.engine.capacity import check_capacity
from sitsprof.policies.engine.replay import SimResult
from sitsprof.policies.errors import CapacityError, PolicyEngineError
from sitsprof.policies.registry import MODULES, POLICIES, get_policy, policy_names
from sitsprof.policies.sweep import simulate, simulate_many
from sitsprof.policies.traces.ids import trace_from_requests
from sitsprof.policies.traces.trace import Trace


def requests_trace(requests, input_tokens=None) -> Trace:
    """Multi-block requests (ids dense in order of first appearance), 512-token blocks."""
    inputs = [512 * len(r) for r in requests] if input_tokens is None else input_tokens
    return trace_from_requests(requests, np.zeros(len(requests)), inputs)


def test_ratios_and_request_hits_by_hand():
    # Infinite LRU: a reference hits iff its block was seen before.
    #   r0 [0 1 2]   miss miss miss
    #   r1 [0 1 3]   hit  hit  miss      prefix 2
    #   r2 [4 1 2]   miss hit  hit       prefix 0: the first block missed
    #   r3 [0 3]     hit  hit            prefix 2
    # tokens per reference: 512 but for each request's partial last block (100, 7, 30, 200)
    trace = requests_trace([[0, 1, 2], [0, 1, 3], [4, 1, 2], [0, 3]], [1124, 1031, 1054, 712])
    assert trace.tokens.tolist() == [512, 512, 100, 512, 512, 7, 512, 512, 30, 512, 200]
    r = simulate(trace, "lru", 100)
    assert r.references == 11 and r.hits == 6
    assert r.request_hits.tolist() == [0, 2, 2, 2]
    assert r.block_hit_ratio == pytest.approx(6 / 11)
    assert r.prefix_hit_ratio == pytest.approx(4 / 11)
    hit_tokens = 512 + 512 + 512 + 30 + 512 + 200
    assert r.token_hit_ratio == pytest.approx(hit_tokens / sum(trace.tokens))
    assert r.evictions == 0 and r.max_resident == 5


def test_prefix_counts_only_the_leading_run():
    # capacity 2 LRU: r1's 1 still hits after 5 missed, but is not part of a cached prefix.
    trace = requests_trace([[0, 1], [5, 1]])
    r = simulate(trace, "lru", 2)
    assert r.hits == 1 and r.request_hits.tolist() == [0, 1]
    assert r.prefix_hit_ratio == 0.0 and r.block_hit_ratio == pytest.approx(0.25)


def test_block_ids_as_a_plain_array():
    r = simulate(np.array([7, 9, 7, 11, 9, 7]), "lru", 2)
    assert r.hits == 1 and r.references == 6 and len(r.request_hits) == 6
    assert r.prefix_hit_ratio == r.block_hit_ratio  # one block per request


def test_to_dict_is_json():
    r = simulate(requests_trace([[0, 1], [0, 2]]), "fifo", 10)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["policy"] == "fifo" and d["capacity"] == 10 and d["hits"] == 1 and d["requests"] == 2
    assert "request_hits" not in d
    assert json.loads(json.dumps(r.to_dict(request_hits=True)))["request_hits"] == [0, 1]
    assert isinstance(r, SimResult)


@pytest.mark.parametrize("bad", [0, -5, np.int64(-1), 0.0])
def test_non_positive_capacity_is_a_user_error(bad):
    with pytest.raises(CapacityError, match=r"capacity -?\d+ is not positive.*capacity of 1 or more") as info:
        simulate(np.array([1, 2, 3]), "lru", bad)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("bad", [1.5, "100", None, True, float("inf")])
def test_non_integer_capacity_is_a_user_error(bad):
    with pytest.raises(CapacityError, match="capacity .* positive integer"):
        check_capacity(bad)


def test_whole_float_capacity_is_accepted():
    assert check_capacity(1000.0) == 1000 and check_capacity(np.int32(7)) == 7


def test_unknown_policy_and_parameter():
    with pytest.raises(PolicyEngineError, match="unknown policy 'optimal'; choose from lru") as info:
        simulate(np.array([1, 2]), "optimal", 10)
    assert info.value.exit_code == 2
    with pytest.raises(PolicyEngineError, match="'lru' has no parameter ghost_ratio"):
        simulate(np.array([1, 2]), "lru", 10, ghost_ratio=0.5)
    assert get_policy(" LRU ") is POLICIES["lru"]


def test_bad_block_ids_rejected_before_the_kernel():
    trace = requests_trace([[0, 1, 2]])
    broken = dataclasses.replace(trace, n_blocks=2)
    with pytest.raises(PolicyEngineError, match="dense in 0..1"):
        simulate(broken, "lru", 4)
    with pytest.raises(PolicyEngineError, match="1-D array of integer block ids"):
        simulate(np.array([0.5, 1.5]), "lru", 4)


def test_simulate_many_order_and_progress():
    trace = requests_trace([[0, 1, 2], [0, 1, 3], [2, 3]])
    calls = []
    results = simulate_many(trace, ["lru", "fifo"], [1, 3], progress=lambda *a: calls.append(a))
    assert [(r.policy, r.capacity) for r in results] == [("lru", 1), ("lru", 3), ("fifo", 1), ("fifo", 3)]
    assert calls == [(1, 4, "lru @ 1"), (2, 4, "lru @ 3"), (3, 4, "fifo @ 1"), (4, 4, "fifo @ 3")]
    for r in results:
        assert r.hits == simulate(trace, r.policy, r.capacity).hits
    with pytest.raises(CapacityError):
        simulate_many(trace, ["lru"], [10, -1])


def test_registry_lists_every_module():
    assert len(POLICIES) == len(MODULES)
    assert {"lru", "fifo", "lfu", "sieve", "prefix_lru"} <= set(policy_names())
    for module in POLICIES.values():
        assert module.DESCRIPTION and "\n" not in module.DESCRIPTION


def test_every_registered_policy_keeps_the_documented_contract():
    """docs/CONTRACTS.md: every policy has NAME, DESCRIPTION and KERNEL taking the contract's
    five arguments first; a classic policy's KERNEL is a numba function, an adaptive policy's
    (it has `run`) is a plain Python function and its PARAMS are tuning keywords of `run`."""
    import inspect

    from numba.core.registry import CPUDispatcher

    from sitsprof.policies.engine.params import accepted, kernel_params

    five = ["block", "req_offsets", "n_blocks", "capacity", "hit"]
    for name, module in POLICIES.items():
        kernel = module.KERNEL
        assert list(inspect.signature(getattr(kernel, "py_func", kernel)).parameters)[:5] == five, name
        if module.__name__.startswith("sitsprof.policies.classic."):
            assert isinstance(kernel, CPUDispatcher) and not hasattr(module, "run"), name
            assert accepted(module) == kernel_params(module), name
        else:
            assert module.__name__.startswith("sitsprof.policies.adaptive."), name
            assert not isinstance(kernel, CPUDispatcher) and callable(module.run), name
            run = inspect.signature(module.run).parameters
            takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in run.values())
            for param, default in module.PARAMS.items():
                assert takes_kwargs or run[param].default == default, (name, param)
            assert accepted(module) == dict(module.PARAMS), name


# Policies that cache every missed block while there is room (no partitions, no ghosts).
SIMPLE = ("lru", "fifo", "lfu", "sieve", "prefix_lru")
request_lists = st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=12), min_size=1, max_size=40)


def dense_requests(requests):
    ids = [b for r in requests for b in r]
    order = {v: i for i, v in enumerate(dict.fromkeys(ids))}
    return [[order[b] for b in r] for r in requests]


@settings(max_examples=60, deadline=None)
@given(requests=request_lists, capacity=st.integers(1, 40))
def test_every_policy_respects_capacity(requests, capacity):
    trace = requests_trace(dense_requests(requests))
    n_distinct = trace.n_blocks
    for name in policy_names():
        r = simulate(trace, name, capacity)
        assert 0 <= r.max_resident <= capacity, name
        assert 0 <= r.hits <= r.references - n_distinct, name  # first references always miss
        assert r.request_hits.sum() == r.hits and len(r.request_hits) == trace.n_requests
        assert 0 <= r.prefix_hit_ratio <= r.block_hit_ratio <= 1
        if name not in SIMPLE:  # e.g. libCacheSim's LIRS keeps nothing at capacity 1
            continue
        if capacity >= n_distinct:  # everything fits: only first references miss
            assert r.hits == r.references - n_distinct and r.evictions == 0, name
        elif name != "prefix_lru":  # every miss is inserted, so evictions = misses - resident
            assert r.references - r.hits - r.evictions <= capacity, name


def test_request_offsets_match_the_trace():
    from sitsprof.policies.traces.offsets import request_offsets as _request_offsets

    for requests in ([[0]], [[0, 1], [2], [0, 3, 4]], [[1]] * 5):
        trace = requests_trace(requests)
        ours = _request_offsets(trace.request, trace.n_requests)
        assert ours.tolist() == trace.request_offsets.tolist()
    request = np.array([0, 0, 2, 2, 3], dtype=np.int64)  # request 1 has no references
    assert _request_offsets(request, 4).tolist() == [0, 2, 2, 4, 5]


def test_kernel_parameters_reach_the_kernel():
    """A policy module with a parameter: simulate passes it through and records it."""
    import types

    from numba import njit

    @njit
    def kernel(block, req_offsets, n_blocks, capacity, hit, every=1):
        # a toy policy that writes only the flags of every `every`-th of the first
        # `capacity` references, leaving the others as they were
        for i in range(0, min(capacity, block.shape[0]), every):
            hit[i] = 1
        return 0, 0

    toy = types.ModuleType("toy")
    toy.NAME, toy.DESCRIPTION, toy.KERNEL = "toy", "toy", kernel
    trace = np.arange(6)
    assert simulate(trace, toy, 6).hits == 6
    r = simulate(trace, toy, 6, every=3)
    assert r.hits == 2 and r.extra == {"every": 3}
    with pytest.raises(PolicyEngineError, match="'toy' cannot take every='3': parameters are numbers"):
        simulate(trace, toy, 6, every="3")
    # flags a kernel leaves unwritten read as misses, not as the previous replay's hits
    assert [r.hits for r in simulate_many(trace, [toy], [5, 2])] == [5, 2]


def test_constant_columns_give_the_same_results_as_materialised_ones():
    """Zero-stride columns (one-reference requests, uniform sizes) are handled without
    copies and give exactly what contiguous columns give."""
    import dataclasses

    from sitsprof.policies.traces.ids import trace_from_ids

    rng = np.random.default_rng(5)
    ids = rng.integers(0, 50, size=2000)
    for tokens in (None, np.full(2000, 7)):
        lean = trace_from_ids(ids, tokens=tokens if tokens is None else np.broadcast_to(np.int32(7), (2000,)))
        full = dataclasses.replace(lean, **{k: np.array(getattr(lean, k)) for k in
                                           ("time", "request", "position", "tokens", "tenant")})
        assert lean.tokens.strides[0] == 0 and full.tokens.strides[0] != 0
        for policy in ("lru", "prefix_lru", "s3fifo"):
            a, b = simulate(lean, policy, 20), simulate(full, policy, 20)
            assert a.to_dict(request_hits=True) | {"seconds": 0} == b.to_dict(request_hits=True) | {"seconds": 0}
