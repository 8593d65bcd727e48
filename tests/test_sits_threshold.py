"""Dynamic threshold engine: fires on the third breaching window, not the second; an
overrunning switch rolls back and alerts; drift comes from the P99 spread of the horizon."""
from __future__ import annotations

import numpy as np
import pytest

from sitsprof.policies.sits import HybridCache, SCAN
from sitsprof.policies.threshold import ThresholdEngine


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
    from sitsprof.policies import sits
    from sitsprof.policies.readers import trace_from_ids

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
