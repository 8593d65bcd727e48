"""Dynamic threshold engine: fires on the third breaching window, not the second; an
overrunning switch rolls back and alerts; drift comes from the P99 spread of the horizon."""
from __future__ import annotations

import numpy as np
import pytest

from sitsprof.policies.adaptive.hybrid import HybridCache
from sitsprof.policies.adaptive.threshold import ThresholdEngine
from sitsprof.policies.classic.arc import SCAN


def _cache(entries=100):
    cache = HybridCache(n_blocks=1000, capacity=entries)
    block = np.arange(entries, dtype=np.int32)
    cache.replay(block, 0, entries, SCAN, np.zeros(entries, dtype=np.uint8))
    return cache


def _feed(engine, p99s, cache, step=60.0):
    events, armed = [], []
    for i, p in enumerate(p99s):
        armed.append(engine.observe(i, i * step, p, cache, events))
    return events, armed


def test_both_fronts_offer_the_front_buffer_protocol():
    from sitsprof.policies.adaptive.front import FrontBuffer
    from sitsprof.policies.adaptive.threshold import LirsBaseline

    lirs_front, sits_front = LirsBaseline(10, 4), HybridCache(10, 4)
    assert isinstance(lirs_front, FrontBuffer) and isinstance(sits_front, FrontBuffer)
    assert isinstance(lirs_front.back_buffer(), HybridCache) and isinstance(sits_front.back_buffer(), dict)
    assert lirs_front.entries() == sits_front.entries() == 0


def test_fires_on_third_breach_not_second():
    engine = ThresholdEngine(entry_ns=1.0)
    events, armed = _feed(engine, [100, 100, 100, 100, 300, 300, 300, 300], _cache())
    assert armed == [False] * 6 + [True, True]
    assert [e["event"] for e in events] == ["breach", "breach", "breach", "switch"]
    assert events[-1]["window"] == 6


def test_a_calm_window_resets_the_count():
    engine = ThresholdEngine(entry_ns=1.0)
    _, armed = _feed(engine, [100, 100, 100, 300, 300, 50, 300, 300], _cache())
    assert not any(armed)


def test_threshold_is_baseline_times_one_plus_drift():
    engine = ThresholdEngine(entry_ns=1.0)
    for t, p in enumerate([100.0, 200.0, 300.0]):
        engine.breach(t * 60.0, p)
    values = np.array([100.0, 200.0, 300.0])
    drift = values.std() / values.mean()
    assert engine.threshold() == pytest.approx(values.mean() * (1 + drift))


def test_drift_history_is_the_last_fifteen_minutes():
    engine = ThresholdEngine(entry_ns=1.0)
    engine.breach(0.0, 1000.0)
    engine.breach(100.0, 10.0)
    engine.breach(950.0, 10.0)  # t=0 is now more than 900 s old
    assert [t for t, _ in engine.history] == [100.0, 950.0]
    assert engine.threshold() == pytest.approx(10.0)


def test_overrun_rolls_back_and_alerts():
    cache = _cache(100)
    before = cache.snapshot()
    engine = ThresholdEngine(entry_ns=1e6, budget_ms=50.0)  # 100 entries * 1 ms = 100 ms > 50
    events, armed = _feed(engine, [100, 100, 100, 100, 300, 300, 300], cache)
    assert not any(armed)
    kinds = [e["event"] for e in events]
    assert kinds[-2:] == ["rollback", "alert"]
    assert events[-1]["switch_ms"] == pytest.approx(100.0)
    assert engine.rollbacks == 1 and not engine.fired
    for name, array in before.items():  # the front buffer is untouched
        assert np.array_equal(getattr(cache, name), array), name


def test_within_budget_swaps_the_back_buffer():
    cache = _cache(100)
    old = cache.snapshot()
    old_where = cache.where
    engine = ThresholdEngine(entry_ns=1e6, budget_ms=200.0)  # 100 ms <= 200
    _feed(engine, [100, 100, 100, 100, 300, 300, 300], cache)
    assert engine.fired and cache.where is not old_where  # the back buffer is now live
    for name, array in old.items():
        assert np.array_equal(getattr(cache, name), array), name


def test_entry_cost_defaults_to_calibrated_hbm_latency():
    assert ThresholdEngine().entry_ns == pytest.approx(650 / 1.98)


def test_threshold_gate_in_a_sits_run():
    from sitsprof.policies.adaptive import sits
    from sitsprof.policies.traces.ids import trace_from_ids

    # 200 s of hits on 50 hot blocks, then only new blocks: every window's P99 is a miss
    ids = np.concatenate((np.tile(np.arange(50), 40), np.arange(1000, 4000)))
    trace = trace_from_ids(ids, times=np.arange(len(ids), dtype=float) * 0.1)
    r = sits.run(trace, 100, threshold=True, window_s=30.0)
    events = r.extra["events"]
    breaches = [e["window"] for e in events if e["event"] == "breach"]
    switch = next(e for e in events if e["event"] == "switch")
    assert breaches[:3] == [6, 7, 8] and switch["window"] == 8  # the third breaching window
    assert r.extra["threshold"]["fired"] and r.extra["threshold"]["rollbacks"] == 0
    decisions = [e for e in events if e["event"] == "decision"]
    assert len(decisions) == r.extra["windows"]
    # until the switch the controller only holds (baseline: scan resistance); then it decides
    assert all(e["action"] == "hold" for e in decisions if e["window"] < 8)
    assert all(e["action"] != "hold" for e in decisions if e["window"] >= 8)


def _gate_trace():
    from sitsprof.policies.traces.ids import trace_from_ids

    ids = np.concatenate((np.tile(np.arange(50), 40), np.arange(1000, 4000)))
    return trace_from_ids(ids, times=np.arange(len(ids), dtype=float) * 0.1)


def test_the_baseline_is_literal_lirs_until_the_switch():
    from sitsprof.policies.adaptive import sits
    from sitsprof.policies.classic import lirs

    trace = _gate_trace()
    hit = np.zeros(len(trace), dtype=np.uint8)
    r = sits.run(trace, 100, threshold=True, window_s=30.0, hit_out=hit)
    switch = next(e for e in r.extra["events"] if e["event"] == "switch")
    assert switch["from"] == "lirs" and switch["to"] == "sits"
    ref = np.zeros(len(trace), dtype=np.uint8)
    lirs.KERNEL(np.ascontiguousarray(trace.block), trace.request_offsets, np.int64(trace.n_blocks), np.int64(100), ref)
    end = round(switch["time"] / 0.1) + 1  # references up to the end of the switching window
    assert np.array_equal(hit[:end], ref[:end])  # served by the LIRS loop itself
    assert r.extra["behaviour_share"]["lirs"] == pytest.approx(end / len(trace))
    holds = [e for e in r.extra["events"] if e["event"] == "decision" and e["action"] == "hold"]
    assert holds and all(e["from"] == e["to"] == "lirs" for e in holds)


def test_the_switch_keeps_every_lirs_resident_block():
    from sitsprof.policies.adaptive.threshold import LirsBaseline
    from sitsprof.policies.classic.arc import RECENCY

    rng = np.random.default_rng(3)
    block = (rng.zipf(1.2, 20_000) % 3_000).astype(np.int32)
    front = LirsBaseline(3_000, 200)
    front.replay(block, 0, len(block), np.zeros(len(block), dtype=np.uint8))
    resident = np.flatnonzero(front.fl & 4)  # lirs.RES
    before = front.st.copy()
    back = front.back_buffer()
    assert np.array_equal(front.st, before)  # the front is only read
    assert np.array_equal(np.sort(back.resident_blocks()), resident)
    n1, n2, nb1, nb2 = back.sizes
    assert n1 + n2 == len(resident) <= 200 and n1 + nb1 <= 200 and nb2 == 0
    # the back buffer serves at once: a re-reference of a resident block hits
    hit = np.zeros(1, dtype=np.uint8)
    back.replay(np.array([resident[0]], dtype=np.int32), 0, 1, RECENCY, hit)
    assert hit[0] == 1


def test_overrun_from_lirs_rolls_back_and_lirs_keeps_serving():
    from sitsprof.policies.adaptive import sits

    trace = _gate_trace()
    r = sits.run(trace, 100, threshold=True, window_s=30.0, threshold_budget_ms=1e-9)
    kinds = [e["event"] for e in r.extra["events"]]
    assert "switch" not in kinds and kinds.count("alert") >= 1
    rollback = next(e for e in r.extra["events"] if e["event"] == "rollback")
    assert rollback["to"] == "lirs" and rollback["window"] == 8
    assert r.extra["behaviour_share"]["lirs"] == 1.0 and not r.extra["threshold"]["fired"]


def test_threshold_windows_is_a_parameter():
    from sitsprof.policies.adaptive import sits
    from sitsprof.policies.errors import PolicyEngineError

    r = sits.run(_gate_trace(), 100, threshold=True, window_s=30.0, threshold_windows=2)
    assert next(e for e in r.extra["events"] if e["event"] == "switch")["window"] == 7  # the second breach
    with pytest.raises(PolicyEngineError, match="threshold_windows needs threshold"):
        sits.run(_gate_trace(), 100, threshold_windows=2)
