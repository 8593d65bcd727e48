"""LFU's incremental form for the serving replay (policies/serving/evictors/lfu.py) with pinned
blocks: the evictor, driven by random pin / hit / admit / unpin / victim sequences as the
pool drives it, against a plain-Python reference of the documented rules (evictors/lfu.py's
docstring): the victim is the oldest unpinned block of the lowest frequency; a pinned block
the walk meets is parked and goes back to the oldest end of its frequency's list when
unpinned; a hit moves a block (parked or not), counted, to its new frequency's tail. (Without
pins the form is classic/lfu.py's KERNEL, hit for hit: tests/test_serving.py.)"""
from __future__ import annotations

import random

import numpy as np
import pytest

from sitsprof.policies.serving import evictors as ev


class ReferenceLFU:
    """Dicts and lists: freq per cached block, one list per frequency (oldest first)."""

    def __init__(self):
        self.freq: dict[int, int] = {}
        self.lists: dict[int, list[int]] = {}
        self.parked: set[int] = set()
        self.pinned: set[int] = set()

    def admit(self, x):
        self.freq[x] = 1
        self.lists.setdefault(1, []).append(x)
        self.pinned.add(x)

    def hit(self, x):
        f = self.freq[x]
        if x in self.parked:
            self.parked.remove(x)
        else:
            self.lists[f].remove(x)
        self.freq[x] = f + 1
        self.lists.setdefault(f + 1, []).append(x)

    def pin(self, x):
        self.pinned.add(x)

    def unpin(self, x):
        self.pinned.discard(x)
        if x in self.parked:
            self.parked.remove(x)
            self.lists[self.freq[x]].insert(0, x)

    def victim(self):
        for f in sorted(self.lists):
            lst = self.lists[f]
            while lst and lst[0] in self.pinned:
                self.parked.add(lst.pop(0))
            if lst:
                x = lst.pop(0)
                del self.freq[x]
                return x
        raise AssertionError("no unpinned block")


@pytest.mark.parametrize("seed", range(6))
def test_lfu_form_with_pins_is_the_reference(seed):
    rnd = random.Random(seed)
    n_ids, capacity = 400, rnd.choice((5, 20, 60))
    S = ev.new_state(ev.LFU, n_ids, capacity)
    ref = ReferenceLFU()
    refcount: dict[int, int] = {}  # cached block -> pins
    victims = 0
    for _ in range(6000):
        op = rnd.random()
        cached = list(refcount)
        if op < 0.25 and cached:  # a request reuses a cached block: pinned, then hit
            x = rnd.choice(cached)
            if refcount[x] == 0:
                ev.ev_pin(ev.LFU, S, np.int32(x))
                ref.pin(x)
            refcount[x] += 1
            ev.ev_hit(ev.LFU, S, np.int32(x))
            ref.hit(x)
        elif op < 0.5:  # a new block: a victim first when the pool is full
            x = rnd.randrange(n_ids)
            if x in refcount:
                continue
            if len(refcount) >= capacity:
                if all(c > 0 for c in refcount.values()):
                    continue
                v = int(ev.ev_victim(ev.LFU, S))
                assert v == ref.victim(), f"victim {victims}"
                assert refcount.pop(v) == 0
                victims += 1
            ev.ev_miss(ev.LFU, S, np.int32(x))
            ev.ev_admit(ev.LFU, S, np.int32(x))
            ref.admit(x)
            refcount[x] = 1
        else:  # a request finishes with a block
            held = [b for b, c in refcount.items() if c > 0]
            if not held:
                continue
            x = rnd.choice(held)
            refcount[x] -= 1
            if refcount[x] == 0:
                ev.ev_unpin(ev.LFU, S, np.int32(x))
                ref.unpin(x)
    assert victims > 100
    assert len(ref.parked) + sum(len(v) for v in ref.lists.values()) == len(refcount)


def test_a_pinned_block_is_passed_over_and_returns_oldest():
    S = ev.new_state(ev.LFU, 10, 3)
    for x in (0, 1, 2):
        ev.ev_admit(ev.LFU, S, np.int32(x))
        ev.ev_unpin(ev.LFU, S, np.int32(x))
    ev.ev_hit(ev.LFU, S, np.int32(0))  # 0 at frequency 2; 1, 2 at 1
    ev.ev_pin(ev.LFU, S, np.int32(1))
    assert ev.ev_victim(ev.LFU, S) == 2  # 1 is pinned: passed over
    ev.ev_admit(ev.LFU, S, np.int32(3))
    ev.ev_unpin(ev.LFU, S, np.int32(3))
    ev.ev_unpin(ev.LFU, S, np.int32(1))  # back at frequency 1's oldest end, before 3
    assert ev.ev_victim(ev.LFU, S) == 1
    assert ev.ev_victim(ev.LFU, S) == 3
    assert ev.ev_victim(ev.LFU, S) == 0
