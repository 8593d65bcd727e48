"""SITS and the dynamic threshold engine in the serving replay (policies/serving/adaptive.py).

- the replay cut into windows of simulated time equals the one-call replay, request for request;
- the `sits` evictor pinned to SCAN is the serving ARC, pinned to RECENCY the serving LRU
  (vLLM's free queue), hit for hit and eviction for eviction, all-evictable and with pinning;
- the LIRS -> SITS back buffer holds exactly the pool's cached blocks, pins kept;
- on a crafted workload the threshold engine fires under load (queues build, the replay's own
  P99 TTFT climbs over windows) and never without load; decisions are logged, deterministic.
"""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from numba import njit

from sitsprof.policies.registry import get_policy
from sitsprof.policies.serving.adaptive import lirs_to_sits, windowed
from sitsprof.policies.serving.evictors import (
    ARC,
    RECENCY,
    SCAN,
    SITS,
    ev_admit,
    ev_hit,
    ev_miss,
    ev_pin,
    ev_unpin,
    ev_victim,
)
from sitsprof.policies.serving.evictors import new_state as new_evictor
from sitsprof.policies.serving.evictors._lists import PARKED, PINNED
from sitsprof.policies.serving.evictors.arc import B1, T1, T2
from sitsprof.policies.serving.reblock import reblock
from sitsprof.policies.serving.scheduler import DONE, run_replay
from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.generator import generate_workload

SAME = ("t_sched", "t_first", "t_done", "hit_blocks", "n_preempt", "status", "stats", "pool_counters", "terms",
        "evictions_log")


@pytest.fixture(scope="module")
def generated():
    return generate_workload(seed=3, duration_s=60.0)


@pytest.fixture(scope="module")
def rb(generated):
    return reblock(generated, 16)


def _tight(rb) -> int:
    """A pool a little over the largest request: pinning, preemptions and evictions."""
    return int(np.diff(rb.offsets).max()) + 200


def _same(a, b, what):
    for k in SAME:
        x, y = getattr(a, k), getattr(b, k)
        assert np.array_equal(x, y), f"{what}: {k} differs"
    assert a.end_s == b.end_s


@pytest.mark.parametrize("engine,policy", [("vllm", "lru"), ("vllm", "arc"), ("sglang", "lru")])
def test_a_run_cut_into_windows_is_the_one_call_run(generated, rb, engine, policy):
    cap = _tight(rb)
    one = run_replay(generated, policy, cap, engine=engine, rate_scale=4.0, reblocked=rb, log_evictions=True)
    s = one.summary()
    assert s["preemptions"] > 0 and s["evictions"] > 0  # the state a window must carry is exercised
    for w in (0.05, 1.0, 7.3):
        cut = run_replay(generated, policy, cap, engine=engine, rate_scale=4.0, reblocked=rb, log_evictions=True,
                         driver=windowed(w))
        _same(one, cut, f"{engine}/{policy} in {w} s windows")


def test_windows_with_no_overlap_skip_the_idle_stretches(generated, rb):
    # at 1e-6 the trace spans ~1e8 simulated seconds: windows must follow the clock, not count it
    one = run_replay(generated, "lru", 5000, rate_scale=1e-6, reblocked=rb)
    cut = run_replay(generated, "lru", 5000, rate_scale=1e-6, reblocked=rb, driver=windowed(10.0))
    assert np.array_equal(one.t_first, cut.t_first) and np.array_equal(one.hit_blocks, cut.hit_blocks)


@pytest.mark.parametrize("initial,twin", [("scan", "arc"), ("recency", "lru")])
def test_sits_pinned_is_its_twin_with_pinning(generated, rb, initial, twin):
    cap = _tight(rb)
    ref = run_replay(generated, twin, cap, rate_scale=4.0, reblocked=rb, log_evictions=True)
    got = run_replay(generated, "sits", cap, rate_scale=4.0, reblocked=rb, log_evictions=True,
                     sits={"initial": initial, "switching": False})
    assert ref.summary()["evictions"] > 1000
    _same(ref, got, f"sits pinned to {initial} vs {twin}")
    assert got.extra["sits"]["switches"] == 0
    assert {e["action"] for e in got.extra["sits"]["events"]} == {"hold"}


@pytest.mark.parametrize("initial,twin", [("scan", "arc"), ("recency", "lru")])
def test_sits_pinned_all_evictable_is_the_kernel(generated, initial, twin):
    for cap in (50, 400, 3000):
        got = run_replay(generated, "sits", cap, block_tokens=generated.block_tokens, rate_scale=1e-6,
                         all_evictable=True, sits={"initial": initial, "switching": False})
        hit = np.zeros(len(generated.block), dtype=np.uint8)
        get_policy(twin).KERNEL(np.ascontiguousarray(generated.block), np.ascontiguousarray(generated.request_offsets),
                                generated.n_blocks, cap, hit)
        assert int(hit.sum()) > 0
        assert np.array_equal(got.ref_hit, hit), f"{initial} at {cap}: {int((got.ref_hit != hit).sum())} differ"


def test_lirs_back_buffer_holds_the_pool_pins_kept(generated, rb):
    """Stop a LIRS replay mid-run (requests in flight, blocks pinned), build the SITS state."""
    captured = {}

    def stop_midway(run, meta):
        run.advance(float(np.median(run.arrival)))
        captured["ref"], captured["cached"] = run.pool[0].copy(), run.pool[1].copy()
        A = lirs_to_sits(run.S, len(run.S.lirs.prev), meta["capacity"])
        captured["A"] = copy.deepcopy(A)
        run.pid, run.S = SITS, A  # and the replay goes on from it
        run.advance(np.inf)
        return run.result(meta, 0.0)

    cap = _tight(rb)
    res = run_replay(generated, "lirs", cap, rate_scale=4.0, reblocked=rb, driver=stop_midway)
    assert (res.status == DONE).all()
    A = captured["A"]
    ref, cached = captured["ref"], captured["cached"]
    resident = np.flatnonzero((A.arc.where == T1) | (A.arc.where == T2))
    assert len(resident) > 0
    assert np.array_equal(np.sort(resident), np.flatnonzero(cached))
    assert A.arc.size[T1] + A.arc.size[T2] == len(resident)
    pinned = np.flatnonzero(ref > 0)
    assert len(pinned) > 0 and (A.arc.flag[pinned] & PINNED).all()
    assert not (A.arc.flag[np.setdiff1d(resident, pinned)] & PINNED).any()
    assert A.arc.v[0].behaviour == SCAN


def _crafted(tmp_path, n=600):
    """n identical requests (4096-token prompts of unique blocks, 16 outputs) every 500 ms:
    without load every TTFT is the same service time; at 4x the rate the queue grows."""
    p = tmp_path / "steady.jsonl"
    with p.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"timestamp": i * 500, "input_length": 4096, "output_length": 16,
                                "hash_ids": [i * 8 + k for k in range(8)]}) + "\n")
    return read_trace(p)


def _events(res, kind):
    return [e for e in res.extra["sits"]["events"] if e["event"] == kind]


def test_threshold_fires_under_load_and_not_without(tmp_path):
    trace = _crafted(tmp_path)
    quiet = {rs: run_replay(trace, "sits", 4000, rate_scale=rs, threshold=True) for rs in (1e-6, 1.0)}
    for rs, res in quiet.items():
        assert res.summary()["ttft_p99_ms"] < 400, rs  # no queue: TTFT is the service time
        assert not res.extra["sits"]["threshold"]["fired"] and not _events(res, "switch"), rs
        assert res.extra["sits"]["behaviour_share"]["lirs"] == 1.0
    loaded = run_replay(trace, "sits", 4000, rate_scale=4.0, threshold=True)
    x = loaded.extra["sits"]
    assert loaded.summary()["ttft_p99_ms"] > 10_000
    assert x["threshold"]["fired"] and x["threshold"]["rollbacks"] == 0
    breaches, switch = _events(loaded, "breach"), _events(loaded, "switch")
    assert len(switch) == 1 and switch[0]["from"] == "lirs" and switch[0]["to"] == "sits"
    # 3 consecutive breaching windows, each over the threshold of the windows before it, then the switch
    last3 = [b for b in breaches if b["window"] <= switch[0]["window"]][-3:]
    assert [b["consecutive"] for b in last3] == [1, 2, 3]
    assert [b["window"] for b in last3] == list(range(switch[0]["window"] - 2, switch[0]["window"] + 1))
    assert all(b["p99_ms"] > b["threshold_ms"] for b in last3)
    # what the engine read is the replay's own P99 TTFT of the window's first tokens
    w = last3[0]
    dec = next(e for e in x["events"] if e["event"] == "decision" and e["window"] == w["window"])
    assert dec["d_ms"] == pytest.approx(w["p99_ms"], abs=1e-3)
    # after the switch the SITS controller is armed, LIRS served only before it
    after = [e for e in x["events"] if e["event"] == "decision" and e["window"] > switch[0]["window"]]
    assert after and all(e["from"] in ("recency", "scan") for e in after)
    assert 0 < x["behaviour_share"]["lirs"] < 1


def test_window_p99_is_the_window_first_tokens(tmp_path):
    trace = _crafted(tmp_path, 200)
    res = run_replay(trace, "sits", 4000, rate_scale=4.0, window_s=5.0)
    x = res.extra["sits"]
    decisions = [e for e in x["events"] if e["event"] == "decision"]
    assert [t["time_s"] for t in x["timeline"]] == [round(e["time"], 6) for e in decisions]
    times = [e["time"] for e in decisions]  # the window ends, unrounded (a step's end is a first token's time)
    assert times == sorted(times)
    ttft = (res.t_first - res.arrival) * 1e3
    lo = 0.0
    for e, t in zip(decisions, times):
        got = (res.t_first > lo) & (res.t_first <= t)
        if got.any():
            assert e["d_ms"] == pytest.approx(float(np.percentile(ttft[got], 99)), abs=1e-3)
        lo = t


def test_rollback_over_budget_keeps_lirs(tmp_path):
    trace = _crafted(tmp_path)
    res = run_replay(trace, "sits", 4000, rate_scale=4.0, threshold=True, sits={"threshold_budget_ms": 1e-6})
    th = res.extra["sits"]["threshold"]
    assert not th["fired"] and th["rollbacks"] >= 1 and len(_events(res, "rollback")) == th["rollbacks"]
    assert _events(res, "alert") and not _events(res, "switch")
    assert res.extra["sits"]["behaviour_share"]["lirs"] == 1.0
    # rolled back: the run is the plain LIRS replay apart from the priced walks LIRS served through
    assert (res.status == DONE).all()


def test_decisions_are_logged_and_deterministic(generated, rb):
    cap = _tight(rb)
    a = run_replay(generated, "sits", cap, rate_scale=2.0, reblocked=rb, window_s=5.0)
    b = run_replay(generated, "sits", cap, rate_scale=2.0, reblocked=rb, window_s=5.0)
    assert a.extra["sits"]["events"] == b.extra["sits"]["events"]
    assert np.array_equal(a.t_first, b.t_first)
    decisions = [e for e in a.extra["sits"]["events"] if e["event"] == "decision"]
    assert len(decisions) >= 5
    for e in decisions:
        for key in ("window", "time", "H", "d_ms", "score", "action", "from", "to"):
            assert key in e
        assert 0.0 <= e["H"] <= 8.0 and e["d_ms"] >= 0 and 0.0 <= e["score"] <= 1.0
    assert any(e["H"] > 0 for e in decisions)


def test_sits_in_the_replay_document_and_cli(tmp_path, capsys):
    from sitsprof.cli.main import main
    from sitsprof.policies.engine.results import read_results
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    path = write_mooncake_jsonl(generate_requests(seed=2, duration_s=30.0), tmp_path / "w.jsonl")
    assert main(["policy", "replay", str(path), "-p", "all", "-c", "400", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["policy"]: r for r in doc["replay"]}
    assert "sits" in rows and rows["sits"]["sits"]["events"]
    assert rows["lru"].get("sits") is None
    out = tmp_path / "doc.json"
    out.write_text(json.dumps(doc))
    read_results(out)
    assert main(["policy", "replay", str(path), "-p", "sits", "-c", "400", "--threshold", "--window", "2",
                 "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["replay"][0]
    assert row["sits"]["threshold"] is not None and row["sits"]["window_s"] == 2.0
    assert main(["policy", "replay", str(path), "-p", "lru", "--threshold"]) == 2
    assert "drive -p sits" in capsys.readouterr().err
    assert main(["policy", "replay", str(path), "-p", "sits", "--window", "0"]) == 2


def test_report_draws_the_sits_decisions(tmp_path):
    from sitsprof.policies.engine.results import read_results
    from sitsprof.policies.serving.summary import replay_document
    from sitsprof.reports.policy_report import policy_section

    trace = _crafted(tmp_path)
    doc = replay_document(trace, None, "mooncake", policies="lru,sits", capacities="4000", rate_scale=4.0,
                          threshold=True)
    saved = tmp_path / "doc.json"
    saved.write_text(json.dumps(doc))
    section = policy_section(read_results(saved), str(saved))
    (table,) = [t for t in section.tables if t.title == "SITS decisions (serving replay)"]
    (row,) = table.rows  # the sits replay only
    sw = [e for e in doc["replay"][1]["sits"]["events"] if e["event"] == "switch"]
    assert row[0] == "sits" and row[6] == sw[0]["time"] and row[7] == 0
    (fig,) = [f for f in section.figures if f.title.startswith("SITS decisions (serving replay")]
    names = [d["name"] for d in fig.data]
    assert "switch" in names and "breach" in names
    behaviour = fig.data[names.index("behaviour serving the window (right axis)")]["y"]
    assert behaviour[0] == 0 and behaviour[-1] in (1, 2)  # lirs first, SITS after the switch
    bad = dict(doc)
    bad["replay"] = [dict(doc["replay"][1], sits={"events": [{"no": "name"}]})]
    saved.write_text(json.dumps(bad))
    with pytest.raises(Exception, match="sits events"):
        read_results(saved)


# ---------------------------------------------------------------- issue 11: ARC / SITS list bookkeeping


_WALKED, _TWICE, _BAD_PREV, _OUT_OF_RANGE = 0, 1, 2, 3


@njit(cache=True)
def _walk(prev, nxt, head, q, linked):
    """List q walked from `head`, each member marked q in `linked`: (members, last, why it
    stopped, block it stopped at). Compiled: the same walk in Python, element by element on
    numpy arrays, was ~50 s of CPU on the Mooncake tests below (a 12,000-block list checked
    twice a window, 6,000 times); `_check_lists` asserts on what it returns."""
    n = len(linked)
    x, k, last = head, 0, -1
    while x != -1:
        if x < -n or x >= n:
            return k, last, _OUT_OF_RANGE, x
        if linked[x] != -2:
            return k, last, _TWICE, x
        if prev[x] != last:
            return k, last, _BAD_PREV, x
        linked[x] = q
        k += 1
        last = x
        x = nxt[x]
    return k, last, _WALKED, x


def _check_lists(S, cached, where):
    """ARC / SITS invariants: each list T1, T2, B1, B2 walks head to tail with consistent links;
    its size size[q] is its linked members plus its parked (pinned, off-list) ones; where[x] is
    q for exactly those; ghosts are never parked; the resident blocks (T1, T2) are the pool's
    cached blocks."""
    st = S.arc
    prev, nxt, flag, cnt = st.prev, st.nxt, st.flag, st.where
    linked = np.full(len(cnt), -2, dtype=np.int64)
    parked = (flag & PARKED) != 0
    for q in range(4):
        k, last, stop, x = _walk(prev, nxt, np.int64(st.head[q]), np.int64(q), linked)
        if stop == _OUT_OF_RANGE:
            linked[x]  # numpy's IndexError, as the walk in Python raised it
        assert stop != _TWICE, f"{where}: block {x} linked in list {q} and list {linked[x]}"
        assert stop != _BAD_PREV, f"{where}: list {q}: prev[{x}] = {prev[x]}, not {last}"
        assert int(st.tail[q]) == last, f"{where}: list {q}: tail {st.tail[q]}, walked to {last}"
        in_q = cnt == q
        n_parked = np.count_nonzero(parked & in_q)
        assert st.size[q] == k + n_parked, f"{where}: list {q} counts {st.size[q]}, holds {k} + {n_parked} parked"
        assert np.count_nonzero(in_q) == k + n_parked, f"{where}: cnt codes {q} vs list {q}"
    assert not (linked[parked] >= 0).any() and (cnt[parked] <= T2).all(), f"{where}: parked block on a list"
    on = linked >= 0
    assert np.array_equal(cnt[on], linked[on]), f"{where}: cnt disagrees with list membership"
    assert np.array_equal((cnt == T1) | (cnt == T2), cached[: len(cnt)] != 0), f"{where}: resident != cached"
    assert 0.0 <= st.v[0].p <= st.v[0].capacity


def _checked(inner, seen):
    """A driver running `inner` with the list invariants checked before and after every window
    (before: a state just swapped in, the LIRS -> SITS back buffer, is checked too)."""
    def run_it(run, meta):
        adv = run.advance

        def advance(t):
            if run.pid in (ARC, SITS):
                _check_lists(run.S, run.pool[1], f"before t={t:.3f}")
            end = adv(t)
            if run.pid in (ARC, SITS):
                _check_lists(run.S, run.pool[1], f"after t={end:.3f}")
                seen.append(int(run.S.arc.v[0].behaviour) if run.pid == SITS else -1)
            return end
        run.advance = advance
        return inner(run, meta)
    return run_it


@pytest.mark.parametrize("pid,behav", [(ARC, SCAN), (SITS, SCAN), (SITS, RECENCY)])
def test_a_ghost_since_its_miss_admitted_leaves_its_ghost_list(pid, behav):
    """The pool's order for a block recomputed beside a cached copy (a request past its
    prefix's first miss): the miss is looked up while the id is cached (no ev_miss), the copy
    is evicted into B1, then the full block is admitted. Before the fix ev_admit pushed it onto
    T1 still linked in B1: B1's count kept it, its links did not, and a later ghost hit divided
    by a B1 count of 0 (`policy replay bundled:mooncake -p sits -c 2%`)."""
    S = new_evictor(pid, 8, 3)
    cached = np.zeros(8, dtype=np.uint8)
    S.arc.v[0].behaviour = SCAN
    for x in (0, 1):  # looked up, missed, cached, freed
        ev_miss(pid, S, x)
        ev_admit(pid, S, x)
        ev_unpin(pid, S, x)
        cached[x] = 1
    ev_pin(pid, S, 1)
    ev_hit(pid, S, 1)  # 1 to T2
    ev_unpin(pid, S, 1)
    # a request recomputes 0 privately (0 is cached: no lookup; a free slot of the 3);
    # block 2 misses, the pool is full: 0 is the victim, to B1
    ev_miss(pid, S, 2)
    assert ev_victim(pid, S) == 0 and S.arc.where[0] == B1
    cached[0] = 0
    ev_admit(pid, S, 2)
    ev_unpin(pid, S, 2)
    cached[2] = 1
    _check_lists(S, cached, "0 in B1")
    S.arc.v[0].behaviour = behav
    ev_admit(pid, S, 0)  # the private copy's block is full: cached, 0 is not cached any more
    cached[0] = 1
    _check_lists(S, cached, "0 admitted")
    assert S.arc.where[0] == T2  # its admission is its ghost hit
    ev_unpin(pid, S, 0)
    _check_lists(S, cached, "0 freed")
    for _ in range(2):  # and the lists serve on: the two oldest unpinned blocks leave
        v = ev_victim(pid, S)
        cached[v] = 0
        _check_lists(S, cached, f"{v} evicted")


@pytest.fixture(scope="module")
def mooncake_prefix(tmp_path_factory):
    """The bundled Mooncake trace's first 500 requests (the 2% pool lost B1's count at t = 31 s)."""
    import lzma

    from conftest import MOONCAKE
    p = tmp_path_factory.mktemp("mooncake") / "prefix.jsonl"
    with lzma.open(MOONCAKE, "rt") as f:
        p.write_text("".join(next(f) for _ in range(500)))
    trace = read_trace(p)
    return trace, reblock(trace, 16)


def _toggling(window_s, first, period):
    """Windows of `window_s` simulated seconds, the sits behaviour switched every `period`
    windows (from `first`): switches in both directions, many times, whatever the controller
    would decide (on a 500-request prefix it holds)."""
    def run_it(run, meta):
        a0 = float(run.arrival[0])
        k = 0
        while not run.finished:
            run.S.arc.v[0].behaviour = first if (k // period) % 2 == 0 else 1 - first
            run.advance(a0 + (np.floor((max(run.now, a0) - a0) / window_s) + 1) * window_s)
            k += 1
        return run.result(meta, 0.0)
    return run_it


def test_arc_and_sits_lists_stay_consistent_on_mooncake(mooncake_prefix):
    trace, rbm = mooncake_prefix
    cap = max(rbm.n_ids // 50, 1)  # -c 2%
    seen = []
    arc = run_replay(trace, "arc", cap, reblocked=rbm, driver=_checked(windowed(1.0), seen))
    assert arc.summary()["evictions"] > 10_000 and len(seen) > 20
    for first, period in ((SCAN, 3), (RECENCY, 5)):
        seen = []
        res = run_replay(trace, "sits", cap, reblocked=rbm, driver=_checked(_toggling(1.0, first, period), seen))
        assert res.summary()["evictions"] > 10_000
        steps = set(zip(seen, seen[1:]))
        assert (SCAN, RECENCY) in steps and (RECENCY, SCAN) in steps  # each window checked


def test_lists_stay_consistent_across_the_threshold_switch(mooncake_prefix):
    """LIRS serves until the threshold engine fires; the back buffer (lirs_to_sits: NH -> B1,
    some of them blocks still being computed) is checked as it is swapped in, then every window."""
    from sitsprof.policies.serving.adaptive import drive

    trace, rbm = mooncake_prefix
    cap = max(rbm.n_ids // 50, 1)
    seen = []
    res = run_replay(trace, "lirs", cap, reblocked=rbm, rate_scale=4.0,
                     driver=_checked(lambda run, meta: drive(run, meta, window_s=1.0, threshold=True), seen))
    x = res.extra["sits"]
    assert x["threshold"]["fired"] and x["threshold"]["rollbacks"] == 0 and len(seen) > 5
