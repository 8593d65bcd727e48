"""LIRS's incremental form with pinned blocks (policies/serving/evictors/lirs.py through
the evictors' dispatch)) against a plain-Python statement of the same rules
(lirs_pinned_reference.py): on pool-like workloads where most of the cache is pinned by
requests in flight, the same victims in the same order, the same blocks evicted by hits, and
the same S, Q and NH orders and parked set throughout. The reference also shows the walk's
cost is amortised: pinned blocks are parked at most once per unpin or hit."""
from __future__ import annotations

import numpy as np
import pytest
from lirs_pinned_reference import PinnedLIRS

from sitsprof.policies.serving import evictors as ev
from sitsprof.policies.serving.evictors import lirs

NIL = -1


def _walk(head, nxt):
    out, x = [], int(head)
    while x != NIL:
        out.append(x)
        x = int(nxt[x])
    return out


def _same_state(S, ref: PinnedLIRS, where: str):
    st = S.lirs
    assert _walk(st.head[lirs.S], st.nxt) == ref.S, f"{where}: S"
    assert _walk(st.head[lirs.Q], st.qn) == ref.Q, f"{where}: Q"
    assert _walk(st.head[lirs.NH], st.hn) == ref.NH, f"{where}: NH"
    assert {int(x) for x in np.flatnonzero(st.flag & 64)} == ref.parked, f"{where}: parked"
    assert (int(st.v[0].n_lir), int(st.v[0].n_hir)) == (ref.n_lir, ref.n_hir), f"{where}: LIR / HIR counts"


def _drive(seed: int, capacity: int, n_ops: int, max_running: int, universe: int, families: int):
    """Requests share prefixes (a family's first blocks) and hold their blocks pinned while they
    run; the cache is full and mostly pinned, as in a loaded serving pool."""
    rng = np.random.default_rng(seed)
    S = ev.new_state(ev.LIRS, universe, capacity)
    ref = PinnedLIRS(capacity)
    cached: set = set()
    refcnt = np.zeros(universe, dtype=np.int64)
    running: list[list[int]] = []
    stems = [list(rng.choice(universe, size=int(rng.integers(2, 8)), replace=False)) for _ in range(families)]
    log = {"victims": 0, "hit_evictions": 0, "hits": 0, "unpins": 0, "blocked": 0}

    def drop(v, where):
        assert v is not None and v >= 0, f"{where}: no victim"
        assert refcnt[v] == 0, f"{where}: evicted pinned block {v}"
        cached.discard(v)

    for op in range(n_ops):
        where = f"seed {seed} op {op}"
        if running and (len(running) >= max_running or rng.random() < 0.45):
            held = running.pop(int(rng.integers(len(running))))
            for x in reversed(held):  # freed tail first
                refcnt[x] -= 1
                if refcnt[x] == 0:
                    ev.ev_unpin(ev.LIRS, S, x)
                    ref.unpin(x)
                    log["unpins"] += 1
        else:
            stem = stems[int(rng.integers(families))]
            ids = list(dict.fromkeys(stem + list(rng.integers(0, universe, size=int(rng.integers(1, 10))))))
            k = 0
            while k < len(ids) and ids[k] in cached:
                k += 1
            held = []
            for x in ids[:k]:  # the cached prefix: pinned first, then each hit told
                if refcnt[x] == 0:
                    ev.ev_pin(ev.LIRS, S, x)
                    ref.pin(x)
                refcnt[x] += 1
                held.append(x)
            for x in ids[:k]:
                a, b = int(ev.ev_hit(ev.LIRS, S, x)), ref.hit(x)
                log["hits"] += 1
                assert a == (NIL if b is None else b), f"{where}: hit on {x} evicted {a} vs reference {b}"
                if b is not None:
                    drop(b, where)
                    log["hit_evictions"] += 1
            for x in ids[k:]:
                if x in cached:
                    continue  # the pool keeps a private copy; the evictor hears nothing
                if len(cached) >= capacity:
                    if all(refcnt[y] > 0 for y in cached):
                        log["blocked"] += 1
                        break  # the pool cannot give a block: the request stops here
                    ev.ev_miss(ev.LIRS, S, x)
                    ref.miss(x)
                    a, b = int(ev.ev_victim(ev.LIRS, S)), ref.victim()
                    assert a == b, f"{where}: victim {a} vs reference {b}"
                    drop(b, where)
                    log["victims"] += 1
                else:
                    ev.ev_miss(ev.LIRS, S, x)
                    ref.miss(x)
                ev.ev_admit(ev.LIRS, S, x)
                ref.admit(x)
                cached.add(x)
                refcnt[x] = 1
                held.append(x)
            running.append(held)
        if op % 25 == 0:
            _same_state(S, ref, where)
    _same_state(S, ref, f"seed {seed} end")
    return ref, log


@pytest.mark.parametrize("seed,capacity,max_running", [(0, 40, 6), (1, 40, 12), (2, 120, 20), (3, 300, 40),
                                                       (4, 25, 8)])
def test_pinned_lirs_form_equals_the_reference(seed, capacity, max_running):
    ref, log = _drive(seed, capacity, n_ops=1500, max_running=max_running, universe=capacity * 4, families=6)
    # the workload exercises the pinned paths: victims passing pinned blocks (parks), Q holding
    # only pinned blocks (S's bottom demoted), and hits that evict Q's bottom
    assert log["victims"] > 300 and ref.parks > 50 and ref.fallback_demotions > 10, (log, ref.parks,
                                                                                    ref.fallback_demotions)
    # amortised walk: a block is parked again only after an unpin or a hit took it back to Q
    assert ref.parks <= log["unpins"] + log["hits"] + len(ref.parked)


def test_hits_that_evict_are_exercised():
    """A hit evicts (Q's bottom, for the LIR block it demotes) only while the LIR set is full,
    so mostly when little is pinned: one request at a time, a larger pool."""
    hit_evictions = 0
    for seed in range(5, 8):
        _, log = _drive(seed, 200, n_ops=800, max_running=1, universe=400, families=20)
        hit_evictions += log["hit_evictions"]
    assert hit_evictions > 0
