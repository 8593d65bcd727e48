"""Crafted tests of the serving replay's rules (issue 11): each rule on a case small enough to
work out by hand, run against the plain-Python reference (serving_reference.py) and, where
`sitsprof.policies.serving` has a compatible entry point, against the numba engine too.

Rules: partial block not cached; a decode block cached once full; hit capped at prompt - 1
token; reverse (tail-first) free order; pinning of running requests' blocks; preemption of the
newest running request (recompute, counted); a request larger than the pool rejected with a
reason; radix leaf-only eviction (SGLang).

`serving_engine.engine_replay` runs the engine on the reference's `Request` list with a fixed
step time and returns the reference's `Result` shape.
"""
from __future__ import annotations

import pytest
import serving_reference as ref
from serving_engine import engine_replay
from serving_reference import Request

BT = 4  # tokens per block in the crafted cases


def run(impl: str, requests, capacity: int, engine: str = "vllm", **knobs) -> ref.Result:
    knobs.setdefault("block_tokens", BT)
    if impl == "reference":
        return ref.replay(requests, capacity, engine=engine, duplicates="single" if engine == "vllm" else "vllm",
                          **knobs)
    return engine_replay(requests, capacity, engine=engine, **knobs)


IMPLS = ["reference", "engine"]
BOTH = [(i, e) for i in IMPLS for e in ("vllm", "sglang")]


# ---------------------------------------------------------------------------------------
# partial blocks, decode blocks, prompt minus one


@pytest.mark.parametrize("impl,engine", BOTH)
def test_partial_block_is_not_cached(impl, engine):
    # A: 10 prompt tokens = 2 full blocks + 2 tokens; output 1, so its third block never fills.
    # B lists the same third id with 13 prompt tokens: only the two full blocks can hit.
    reqs = [Request(0.0, ["a0", "a1", "a2"], 10, 1), Request(5.0, ["a0", "a1", "a2", "b3"], 13, 1)]
    res = run(impl, reqs, capacity=16, engine=engine)
    assert [o.cached_blocks for o in res.requests] == [0, 2]
    assert res.evictions == []


@pytest.mark.parametrize("impl,engine", BOTH)
def test_decode_block_is_cached_once_full(impl, engine):
    # A: 8 prompt tokens, 6 output: KV of 13 tokens, so its third block (decode) fills and is
    # cached; B's 13-token prompt through that block hits all three (cap (13-1)//4 = 3).
    reqs = [Request(0.0, ["a0", "a1", "a2", "a3"], 8, 6), Request(20.0, ["a0", "a1", "a2", "b3"], 13, 1)]
    res = run(impl, reqs, capacity=16, engine=engine)
    assert [o.cached_blocks for o in res.requests] == [0, 3]


@pytest.mark.parametrize("impl,engine", BOTH)
@pytest.mark.parametrize("prompt,expected", [(12, 2), (13, 3), (16, 3), (15, 3)])
def test_hit_capped_at_prompt_minus_one(impl, engine, prompt, expected):
    # every block of the second request's prompt is cached (the first request had 16 tokens and
    # decoded into a full fifth block): the hit is floor((prompt - 1) / 4) blocks, the last token
    # is always computed
    warm = Request(0.0, ["p0", "p1", "p2", "p3", "p4"], 16, 5)
    probe = Request(50.0, ["p0", "p1", "p2", "p3"][: prompt // BT], prompt, 1)
    res = run(impl, [warm, probe], capacity=16, engine=engine)
    assert res.requests[1].cached_blocks == expected == (prompt - 1) // BT


# ---------------------------------------------------------------------------------------
# the schedule: chunked prefill, the token budget, max_num_seqs (one step per second)


@pytest.mark.parametrize("impl,engine", BOTH)
def test_chunked_prefill_over_the_token_budget(impl, engine):
    # 20 prompt tokens with an 8-token budget: chunks of 8, 8, 4 in steps 0-2, the first token
    # at the end of step 2, the second output at the end of step 3
    res = run(impl, [Request(0.0, ["a0", "a1", "a2", "a3", "a4"], 20, 2)], capacity=16, engine=engine,
              max_num_batched_tokens=8)
    a = res.requests[0]
    assert (a.first_scheduled_time, a.first_token_time, a.finish_time) == (0.0, 3.0, 4.0)
    assert res.n_steps == 4


@pytest.mark.parametrize("impl,engine", BOTH)
def test_running_requests_take_the_budget_first(impl, engine):
    # budget 8. Step 0: A's 6-token prompt, then 2 tokens of B's 12. Step 1: A's decode token
    # first, B gets the other 7. Step 2: A's last decode, B's last 3 tokens (its first token).
    reqs = [Request(0.0, ["a0"], 6, 3), Request(0.0, ["b0", "b1", "b2"], 12, 1)]
    res = run(impl, reqs, capacity=16, engine=engine, max_num_batched_tokens=8)
    a, b = res.requests
    assert (a.first_token_time, a.finish_time) == (1.0, 3.0)
    assert (b.first_scheduled_time, b.first_token_time, b.finish_time) == (0.0, 3.0, 3.0)


@pytest.mark.parametrize("impl,engine", BOTH)
def test_max_num_seqs_holds_the_waiting_queue(impl, engine):
    # one sequence at a time: B waits in the queue until A (3 outputs: steps 0-2) finishes
    reqs = [Request(0.0, ["a0"], 4, 3), Request(0.0, ["b0"], 4, 1)]
    res = run(impl, reqs, capacity=16, engine=engine, max_num_seqs=1)
    a, b = res.requests
    assert a.finish_time == 3.0
    assert (b.first_scheduled_time, b.finish_time) == (3.0, 4.0)


@pytest.mark.parametrize("impl,engine", BOTH)
def test_arrivals_join_at_the_next_step_and_idle_time_is_skipped(impl, engine):
    # B arrives mid-step (0.5 s) and is first scheduled at the next step (1 s); C arrives when
    # nothing runs (10 s): the clock jumps to it
    reqs = [Request(0.0, ["a0"], 4, 2), Request(0.5, ["b0"], 4, 1), Request(10.0, ["c0"], 4, 1)]
    res = run(impl, reqs, capacity=16, engine=engine)
    a, b, c = res.requests
    assert (a.first_token_time, a.finish_time) == (1.0, 2.0)
    assert (b.first_scheduled_time, b.finish_time) == (1.0, 2.0)
    assert (c.first_scheduled_time, c.finish_time) == (10.0, 11.0)
    assert res.n_steps == 3


# ---------------------------------------------------------------------------------------
# free order, pinning


@pytest.mark.parametrize("impl,engine", BOTH)
def test_reverse_free_order_tail_first(impl, engine):
    # pool of 4. A (3 blocks) finishes: a2, a1, a0 become evictable tail first. C takes the
    # never-used slot and evicts a2; D (2 blocks, after C finished) evicts a1 then a0.
    reqs = [Request(0.0, ["a0", "a1", "a2"], 12, 1), Request(5.0, ["c0", "c1"], 8, 1),
            Request(10.0, ["d0", "d1"], 8, 1)]
    res = run(impl, reqs, capacity=4, engine=engine)
    assert res.evictions[:3] == ["a2", "a1", "a0"]
    assert all(o.status == "done" for o in res.requests)


@pytest.mark.parametrize("impl,engine", BOTH)
def test_running_request_blocks_are_pinned(impl, engine):
    # A decodes for 20 steps holding a0, a1: the oldest cached blocks. B finishes at once (b1, b0
    # evictable). C needs 6 blocks while A runs: it evicts B's blocks, tail first, never A's.
    reqs = [Request(0.0, ["a0", "a1"], 8, 20), Request(0.5, ["b0", "b1"], 8, 1),
            Request(1.5, ["c0", "c1", "c2", "c3", "c4", "c5"], 24, 1)]
    res = run(impl, reqs, capacity=9, engine=engine)
    assert res.evictions[:2] == ["b1", "b0"]
    assert "a0" not in res.evictions and "a1" not in res.evictions
    a, _b, c = res.requests
    assert c.first_scheduled_time < a.finish_time  # C was admitted while A ran
    assert all(o.status == "done" for o in res.requests) and res.preemptions == 0


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_reference_running_blocks_are_never_evictable(engine):
    # the reference's invariant, checked after every step of a loaded generated workload: no
    # block in a running request's table is in the victim queue (vLLM: ref > 0, not in the free
    # queue; SGLang: its tree node locked), and every tree node's lock counts its holders
    from sitsprof.policies.traces.generator import generate_requests

    recs = [r.mooncake_record() for r in generate_requests(seed=3, duration_s=30.0)]
    requests = ref.reblock_records(recs, 16)
    checked = [0]

    def observe(pool, running):
        if engine == "vllm":
            for q in running:
                for p in q.table:
                    assert pool.ref[p] > 0 and p not in pool.lru
        else:
            holders: dict = {}
            for q in running:
                for kind, x in q.table:
                    if kind == "node":
                        holders[x] = holders.get(x, 0) + 1
            for x, n in holders.items():
                assert pool.nodes[x].lock == n
            assert len(pool.nodes) - pool.n_unlocked == len(holders)  # no other node is locked
        checked[0] += 1

    res = ref.replay(requests, 800, block_tokens=16, step_time=0.01, engine=engine, observe=observe)
    assert checked[0] == res.n_steps > 100 and res.evictions and res.preemptions > 0


# ---------------------------------------------------------------------------------------
# preemption, rejection


@pytest.mark.parametrize("impl,engine", BOTH)
def test_newest_running_request_is_preempted_and_recomputed(impl, engine):
    # (vLLM's rules; SGLang's differ where marked below) two requests of 8 prompt + 12 output
    # tokens (5 blocks each at their end) in a pool of 6,
    # one step per second. Steps 0-3: both prefill (2 blocks each), decode into a third block
    # (6 in use), which fills at 12 tokens (cached). Step 4: A needs a fourth block; none is
    # free, so the newer B is preempted: its blocks freed tail first (b2, b1, b0 evictable) and
    # A's new block evicts b2 (B's decode block). A's fifth block (step 8) evicts b1. B, at the
    # front of the waiting queue, fits again only when A finishes (12 s): re-admitted, it finds
    # b0 still cached (1 block), recomputes its prompt and the 4 tokens it had generated, and
    # decodes the other 8.
    reqs = [Request(0.0, ["a0", "a1"], 8, 12), Request(0.0, ["b0", "b1"], 8, 12)]
    res = run(impl, reqs, capacity=6, engine=engine)
    a, b = res.requests
    assert (a.preemptions, b.preemptions, res.preemptions) == (0, 1, 1)
    assert a.status == b.status == "done"
    assert a.cached_blocks == b.cached_blocks == 0  # first admissions: nothing cached yet
    assert (a.first_token_time, b.first_token_time) == (1.0, 1.0)
    assert a.finish_time == 12.0
    # step 12: B recomputes 12 tokens (samples its 5th output), steps 13-19 the other 7
    assert b.finish_time == 19.0
    if engine == "vllm":
        assert res.evictions[1] == "b1" and res.evictions[0] not in ("a0", "a1", "b0", "b1")
        if impl == "reference":
            assert b.admissions == [0, 1]
    else:
        # SGLang: B's decode block was never inserted (decoded tokens enter the tree at the
        # finish; a retract inserts nothing), so its preemption frees a slot outright and A's
        # fourth block evicts nothing; A's fifth frees B's prompt node [b0 b1] WHOLE, so B comes
        # back to no hit (its recompute step is the same: 12 tokens within the budget)
        assert res.evictions[:2] == ["b1", "b0"]
        if impl == "reference":
            assert b.admissions == [0, 0]


@pytest.mark.parametrize("impl,engine", BOTH)
def test_preemption_picks_the_last_running_request(impl, engine):
    # three running requests in a pool that stops holding all three: the youngest (last
    # admitted) is the one preempted, the oldest never is
    reqs = [Request(0.0, [f"{k}0", f"{k}1"], 8, 10) for k in "xyz"]
    res = run(impl, reqs, capacity=10, engine=engine)
    x, y, z = res.requests
    assert x.preemptions == 0 and z.preemptions >= 1 and z.preemptions >= y.preemptions
    assert all(o.status == "done" for o in res.requests)


@pytest.mark.parametrize("impl,engine", BOTH)
def test_request_larger_than_the_pool_is_rejected(impl, engine):
    # 20 prompt tokens + 1 output = 5 blocks in a pool of 4: rejected, never half-cached; the
    # requests around it are served
    reqs = [Request(0.0, ["a0", "a1"], 8, 1), Request(1.0, ["h0", "h1", "h2", "h3", "h4"], 20, 1),
            Request(2.0, ["a0", "a1"], 9, 1)]
    res = run(impl, reqs, capacity=4, engine=engine)
    assert [o.status for o in res.requests] == ["done", "rejected", "done"]
    assert res.rejected == 1
    assert not any(str(x).startswith("h") for x in res.evictions)
    assert res.requests[2].cached_blocks == 2
    if impl == "reference":
        assert res.requests[1].reason == ("needs 5 blocks of 4 tokens (prompt 20 + output 1 - 1 tokens), "
                                          "the pool holds 4")


def test_request_exactly_the_pool_is_served():
    reqs = [Request(0.0, ["a0", "a1", "a2", "a3"], 16, 1)]  # KV of 16 tokens: 4 blocks
    res = ref.replay(reqs, 4, block_tokens=BT)
    assert res.requests[0].status == "done" and res.rejected == 0


# ---------------------------------------------------------------------------------------
# vLLM's design doc example (docs/design/prefix_caching.md, "Example": 10 blocks of 4 tokens)


def _doc_example():
    # Request 0: 15 prompt tokens (3 full blocks + 3 tokens), decodes into a fifth block and
    # finishes at Time 5; Request 1: 14 prompt tokens, the first 10 as request 0's, so only 2
    # blocks hit; Request 2 (Time 7): 29 prompt tokens, the first 12 as request 0's: 3 blocks hit
    return [Request(0.0, ["r0b0", "r0b1", "r0b2"], 15, 5), Request(3.0, ["r0b0", "r0b1", "r1b2"], 14, 2),
            Request(10.0, ["r0b0", "r0b1", "r0b2", "r2b3", "r2b4", "r2b5", "r2b6"], 29, 1)]


def test_vllm_design_doc_example_as_the_doc_draws_it():
    # the doc's free queue after both finish is 7-8-9-4-3-2-6-5-1-0 (every freed block appended,
    # tail first); request 2 touches 0, 1, 2 and takes 7, 8, 9, 4 and 3: block 3 (request 0's
    # decode-filled fourth block) is the one evicted
    res = ref.replay(_doc_example(), 10, block_tokens=BT, fresh_first=False)
    assert [o.cached_blocks for o in res.requests] == [0, 2, 3]
    assert res.evictions == [-1]  # the reference's first private id: request 0's fourth block


@pytest.mark.parametrize("impl", IMPLS)
def test_vllm_design_doc_example_with_todays_free_order(impl):
    # today's BlockPool.free_blocks puts freed blocks without a hash (4 and 6) at the queue's
    # head, so request 2 takes 6, 4, 7, 8, 9 and evicts nothing
    res = run(impl, _doc_example(), capacity=10)
    assert [o.cached_blocks for o in res.requests] == [0, 2, 3]
    assert res.evictions == []


# ---------------------------------------------------------------------------------------
# SGLang radix cache: only unlocked leaves are evicted


@pytest.mark.parametrize("impl", IMPLS)
def test_radix_evicts_leaves_only(impl):
    # A's path p0 - p1 - p2 is stamped root to leaf, so p0 has the OLDEST access time; B's x0 is
    # newer than all of A's. An LRU over all nodes would evict p0 first; the radix cache evicts
    # the leaf p2, then p1 once it is a leaf, then p0, and only then B's x0.
    reqs = [Request(0.0, ["p0", "p1", "p2"], 12, 1), Request(1.0, ["x0"], 4, 1),
            Request(5.0, ["c0", "c1", "c2", "c3"], 16, 1)]
    res = run(impl, reqs, capacity=4, engine="sglang")
    assert res.evictions[:4] == ["p2", "p1", "p0", "x0"]


def test_radix_internal_node_with_live_child_waits_for_it():
    # two branches under p0 - p1: a2 (A, finished first) and b2 (B, finished later). Evictions:
    # a2 (the older leaf); p1 is internal while b2 lives, so b2 goes before p1 and p0, although
    # both were stamped before b2.
    reqs = [Request(0.0, ["p0", "p1", "a2"], 12, 1), Request(3.0, ["p0", "p1", "b2"], 12, 1),
            Request(6.0, ["c0", "c1", "c2", "c3"], 16, 1)]
    res = ref.replay(reqs, 4, block_tokens=BT, engine="sglang")
    assert res.requests[1].cached_blocks == 2
    assert res.evictions == ["a2", "b2", "p1", "p0"]


def test_radix_lru_heap_would_have_picked_the_root_side():
    # the reference's radix pool directly: after A finishes, the smallest access time is p0's
    # (an internal node), yet the victim is the leaf p2
    # inserted one block at a time (three inserts, three one-block nodes), p0 stamped first
    pool = ref.RadixPool(3)
    entries = pool.new_blocks(3)
    ids = ["p0", "p1", "p2"]
    for k in range(3):
        pool.insert(entries, ids, k + 1)
    pool.nodes["p0"].access = 0  # as if p0's last walk were the oldest
    pool.free(entries, finished=False)
    assert min(pool.nodes, key=lambda x: pool.nodes[x].access) == "p0"
    pool.new_blocks(1)
    assert pool.evictions == ["p2"]
    pool.new_blocks(2)
    assert pool.evictions == ["p2", "p1", "p0"]


def test_radix_evicts_a_whole_node():
    # A's 3-block prompt is one insert (one node); one block of demand frees all three
    # (SGLang's evict frees a leaf node whole), where a block-granular LRU would free one
    pool = ref.RadixPool(4)
    entries = pool.new_blocks(3)
    pool.insert(entries, ["p0", "p1", "p2"], 3)
    pool.free(entries, finished=False)
    pool.new_blocks(2)
    assert pool.evictions == ["p2", "p1", "p0"] and len(pool.nodes) == 0


def test_radix_match_inside_a_node_splits_and_refreshes_the_rest():
    # A inserts p0 p1 p2 (one node), then x0 (another). B matches p0 p1 only: the node splits
    # into p0 p1 | p2, and p2 (the unmatched rest) is refreshed with B's walk, so it is newer
    # than x0: demand evicts x0 first, then p2 alone (the split made it its own node)
    pool = ref.RadixPool(5)
    a = pool.new_blocks(3)
    pool.insert(a, ["p0", "p1", "p2"], 3)
    pool.free(a, finished=False)
    x = pool.new_blocks(1)
    pool.insert(x, ["x0"], 1)
    pool.free(x, finished=False)
    b = pool.touch(["p0", "p1"])
    assert pool.nodes["p2"].head and pool.nodes["p2"].access == pool.nodes["p0"].access
    pool.new_blocks(1)
    assert pool.evictions == []
    pool.new_blocks(1)
    assert pool.evictions == ["x0"]
    pool.new_blocks(1)
    assert pool.evictions == ["x0", "p2"]
    pool.free(b, finished=False)


def test_radix_locked_path_is_not_evictable():
    # A runs for a long time holding p0 - p1; B (a branch under p0 - p1) finishes; C's demand
    # can only evict B's leaf, never A's path, however old its stamps
    reqs = [Request(0.0, ["p0", "p1"], 8, 30), Request(1.0, ["p0", "p1", "b2"], 12, 1),
            Request(3.0, ["c0", "c1"], 8, 1)]
    res = ref.replay(reqs, 12, block_tokens=BT, engine="sglang")
    assert res.requests[1].cached_blocks == 2
    evicted_before_a_done = res.evictions
    assert "p0" not in evicted_before_a_done and "p1" not in evicted_before_a_done


# ---------------------------------------------------------------------------------------
# the reference's own bookkeeping (duplicates as vLLM keeps them)


def test_vllm_keeps_duplicate_cached_copies():
    # pool of 4, a 6-token budget. Step 0: A prefills 6 tokens (s0 full, cached). Step 1: A's
    # last 2 tokens fill s1 (cached); B is admitted: its hit is capped at (8-1)//4 = 1 block (s0),
    # and it computes s1 again. vLLM caches that second copy too (append-only block tables); the
    # "single" rule leaves it an uncached private block. Both finish in step 1; then N needs 3
    # blocks: vLLM evicts both copies of s1, the single rule one (it had a second free slot).
    reqs = [Request(0.0, ["s0", "s1"], 8, 1), Request(0.0, ["s0", "s1"], 8, 1),
            Request(10.0, ["n0", "n1", "n2"], 12, 1), Request(20.0, ["s0", "s1"], 9, 1)]
    v = ref.replay(reqs, 4, block_tokens=BT, max_num_batched_tokens=6)
    s = ref.replay(reqs, 4, block_tokens=BT, max_num_batched_tokens=6, duplicates="single")
    for res in (v, s):
        assert [o.cached_blocks for o in res.requests] == [0, 1, 0, 1]
    assert v.evictions[:2] == ["s1", "s1"]
    assert s.evictions[:1] == ["s1"] and s.evictions[1:2] != ["s1"]


def test_radix_reference_invariants_on_random_workloads():
    # small random workloads (preemptions, blocked admissions, chunking) through the radix
    # reference, checked after every step: locks count their holders, no other node is locked,
    # slots never exceed the pool, every node's parent holds it as a child
    import numpy as np

    def observe(pool, running):
        holders: dict = {}
        for q in running:
            for kind, x in q.table:
                if kind == "node":
                    holders[x] = holders.get(x, 0) + 1
        for x, n in holders.items():
            assert pool.nodes[x].lock == n
        assert len(pool.nodes) - pool.n_unlocked == len(holders)
        assert len(pool.nodes) + pool.n_private <= pool.capacity
        for x, node in pool.nodes.items():
            assert node.parent is ref._ROOT or x in pool.nodes[node.parent].children

    rng = np.random.default_rng(5)
    preempted = 0
    for _ in range(400):
        requests, capacity, knobs = ref.random_case(rng)
        res = ref.replay(requests, capacity, engine="sglang", observe=observe, **knobs)
        assert all(o.status in ("done", "rejected") for o in res.requests)
        preempted += res.preemptions > 0
    assert preempted > 50
