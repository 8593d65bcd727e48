"""The three-stack workload generator: determinism, prefix semantics, formats it writes."""
from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.generator import (
    DEFAULT_STACKS,
    PRIORITY_CLASSES,
    STACK_NAMES,
    generate_requests,
    generate_workload,
    requests_to_trace,
    write_mooncake_jsonl,
    write_requests_jsonl,
)

TRACE_FIELDS = ("time", "request", "block", "original_id", "position", "tokens", "tenant")


@pytest.fixture(scope="module")
def default_requests():
    return generate_requests(seed=0)


@pytest.fixture(scope="module")
def default_trace(default_requests):
    return requests_to_trace(default_requests)


def test_default_size_is_what_the_docstring_says(default_requests, default_trace):
    assert len(default_requests) == 18_266
    assert len(default_trace) == 194_574 and default_trace.n_blocks == 63_056
    assert 100_000 <= len(default_trace) <= 300_000
    assert default_trace.tenant_names == STACK_NAMES == ("qwen2-72b", "deepseek-v2", "phi-3-mini")
    assert set(np.unique(default_trace.tenant)) == {0, 1, 2}


def test_same_seed_same_workload_other_seed_differs():
    a = generate_workload(seed=11, duration_s=300)
    b = generate_workload(seed=11, duration_s=300)
    c = generate_workload(seed=12, duration_s=300)
    for name in TRACE_FIELDS:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert len(a) != len(c) or not np.array_equal(a.block, c.block)


def test_one_stacks_parameters_leave_the_others_alone():
    import dataclasses

    base = generate_requests(seed=5, duration_s=200)
    faster_phi = tuple(
        dataclasses.replace(s, session_rate=s.session_rate * 2) if s.name == "phi-3-mini" else s
        for s in DEFAULT_STACKS
    )
    changed = generate_requests(seed=5, duration_s=200, stacks=faster_phi)

    def shape(reqs, stack):
        return [(r.arrival_ms, r.input_tokens, r.output_tokens, r.session, r.turn)
                for r in reqs if r.model_stack == stack]

    assert shape(base, "qwen2-72b") == shape(changed, "qwen2-72b")
    assert shape(base, "phi-3-mini") != shape(changed, "phi-3-mini")


def test_a_block_id_names_its_whole_prefix(default_trace):
    """Like Mooncake hash ids: equal ids at a position imply equal ids at every earlier position."""
    t = default_trace
    parent = np.full(len(t), -1, dtype=np.int64)
    inner = t.position > 0
    parent[inner] = t.block[np.flatnonzero(inner) - 1]
    pairs = np.unique(np.stack([t.block.astype(np.int64), parent, t.position.astype(np.int64)]), axis=1)
    assert pairs.shape[1] == t.n_blocks  # each block has exactly one parent and one position
    # ids are numbered in order of first appearance
    assert np.all(np.diff(np.maximum.accumulate(t.block)) <= 1) and t.block[0] == 0


def test_sessions_reuse_their_prefix_and_prompts_are_shared(default_requests):
    sessions = defaultdict(list)
    for r in default_requests:
        sessions[r.session].append(r)
    multi = 0
    for reqs in sessions.values():
        for prev, cur in zip(reqs, reqs[1:]):
            assert cur.turn == prev.turn + 1 and cur.arrival_ms >= prev.arrival_ms
            assert cur.input_tokens > prev.input_tokens + prev.output_tokens
            full = prev.input_tokens // 512
            assert cur.hash_ids[:full] == prev.hash_ids[:full]  # full blocks are reused
            assert set(cur.hash_ids[full:]).isdisjoint(prev.hash_ids)  # the rest is new content
            multi += 1
    assert multi > 5_000
    # system prompts: the first block of a stack's sessions is shared by many sessions
    for stack in STACK_NAMES:
        firsts = [r.hash_ids[0] for r in default_requests if r.model_stack == stack and r.turn == 0]
        values, counts = np.unique(firsts, return_counts=True)
        spec = next(s for s in DEFAULT_STACKS if s.name == stack)
        # only a system prompt's full blocks are shared between sessions at position 0
        assert (counts > 1).sum() <= spec.system_prompts
        if stack != "phi-3-mini":  # phi's prompts (200-600 tokens) often fill no block
            assert counts.max() > len(firsts) / 3 and len(values) == spec.system_prompts


def test_arrivals_contexts_priorities(default_requests):
    arrivals = np.array([r.arrival_ms for r in default_requests])
    assert np.all(np.diff(arrivals) >= 0) and arrivals[0] >= 0 and arrivals[-1] < 1_800_000
    spec = {s.name: s for s in DEFAULT_STACKS}
    for r in default_requests:
        s = spec[r.model_stack]
        assert r.input_tokens + s.max_new_tokens <= s.context_tokens
        assert 1 <= r.output_tokens <= s.max_new_tokens == r.max_new_tokens
        assert len(r.hash_ids) == -(-r.input_tokens // 512)
        assert r.priority_class in PRIORITY_CLASSES
    # Poisson session starts: first turns per stack near rate * duration (within 5 sigma)
    for s in DEFAULT_STACKS:
        n = sum(1 for r in default_requests if r.model_stack == s.name and r.turn == 0)
        mean = s.session_rate * 1800
        assert abs(n - mean) < 5 * mean**0.5, s.name
    assert not any(r.priority_class == "low" for r in default_requests if r.model_stack == "phi-3-mini")


def test_scale_multiplies_sessions():
    small = generate_requests(seed=3, duration_s=300)
    big = generate_requests(seed=3, duration_s=300, scale=3.0)
    assert 2.4 < len(big) / len(small) < 3.6
    with pytest.raises(ValueError):
        generate_requests(duration_s=0)


def test_mooncake_jsonl_round_trip(tmp_path):
    reqs = generate_requests(seed=9, duration_s=240)
    trace = requests_to_trace(reqs)
    back = read_trace(write_mooncake_jsonl(reqs, tmp_path / "gen.jsonl"))
    for name in ("time", "request", "block", "original_id", "position", "tokens"):
        assert np.array_equal(getattr(back, name), getattr(trace, name)), name
    assert np.array_equal(back.request_output_tokens, trace.request_output_tokens)


def test_request_format_jsonl(tmp_path):
    reqs = generate_requests(seed=1, duration_s=120)
    path = write_requests_jsonl(reqs, tmp_path / "req.jsonl", extras=False)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == len(reqs)
    for row in rows:
        assert list(row) == ["request_id", "model_stack", "input_tokens", "max_new_tokens", "priority_class"]
        assert row["model_stack"] in STACK_NAMES and isinstance(row["input_tokens"], int)
    assert len({row["request_id"] for row in rows}) == len(rows)
    full = json.loads(write_requests_jsonl(reqs[:1], tmp_path / "one.jsonl").read_text())
    assert full["hash_ids"] == list(reqs[0].hash_ids) and full["arrival_ms"] == reqs[0].arrival_ms


def test_request_format_round_trip_keeps_stacks(tmp_path):
    from sitsprof.policies.errors import TraceFormatError

    reqs = generate_requests(seed=6, duration_s=120)
    trace = requests_to_trace(reqs)
    back = read_trace(write_requests_jsonl(reqs, tmp_path / "req.jsonl"))  # detected by its fields
    for name in ("time", "request", "block", "original_id", "position", "tokens"):
        assert np.array_equal(getattr(back, name), getattr(trace, name)), name
    stack_of = lambda t: [t.tenant_names[c] for c in t.tenant.tolist()]  # noqa: E731
    assert stack_of(back) == stack_of(trace) == [r.model_stack for r in reqs for _ in r.hash_ids]
    assert back.request_output_tokens.tolist() == [r.output_tokens for r in reqs]
    bare = write_requests_jsonl(reqs, tmp_path / "bare.jsonl", extras=False)
    missing = r"bare.jsonl:1: missing field 'hash_ids' \(the request format needs block ids"
    with pytest.raises(TraceFormatError, match=missing):
        read_trace(bare)
