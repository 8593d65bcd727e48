"""`policy replay --instances N --routing round-robin|prefix` (policies/serving/routing.py): one
instance is the plain replay exactly; round-robin sends request r to r mod N; prefix routing
keeps a conversation on one instance while the load is balanced, balances when it is not, and
raises the pooled prefix hit ratio over round-robin; bad input is one line, exit 2."""
from __future__ import annotations

import json
import lzma
from pathlib import Path

import numpy as np
import pytest

from sitsprof.policies.serving.reblock import reblock
from sitsprof.policies.serving.routing import RouterSettings, aggregate_row, route, run_routed, subset
from sitsprof.policies.serving.scheduler import run_replay
from sitsprof.policies.traces.mooncake import read_mooncake

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "policies" / "data" / "mooncake_conversation.jsonl.xz"


def _mooncake_prefix(tmp_path, n: int):
    if not BUNDLED.exists():
        pytest.skip(f"the bundled Mooncake trace {BUNDLED} is not here")
    path = tmp_path / f"mooncake{n}.jsonl"
    with lzma.open(BUNDLED, "rt") as fh, open(path, "w") as out:
        for k, line in enumerate(fh):
            if k >= n:
                break
            out.write(line)
    return read_mooncake(path)


def _conversations(tmp_path, sessions=5, turns=5, gap_s=2.0, first_blocks=4, blocks_per_turn=2,
                   name="conv.jsonl"):
    """`sessions` conversations, interleaved in time (one request every `gap_s`): turn k of a
    session sends the whole history (its first block is the session's own) plus new blocks
    (`first_blocks` in the first turn, so the second matches more than half its prompt)."""
    rows = []
    nxt = 1000
    hist = {s: [] for s in range(sessions)}
    t = 0.0
    for k in range(turns):
        for s in range(sessions):
            new = first_blocks if k == 0 else blocks_per_turn
            hist[s] = hist[s] + list(range(nxt, nxt + new))
            nxt += new
            rows.append({"timestamp": int(t * 1000), "input_length": 512 * len(hist[s]), "output_length": 4,
                         "hash_ids": list(hist[s])})
            t += gap_s
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return read_mooncake(path), [s for _ in range(turns) for s in range(sessions)]


ARRAYS = ("t_sched", "t_first", "t_done", "hit_blocks", "n_preempt", "status", "stats", "pool_counters", "terms",
          "evictions_log")


@pytest.mark.parametrize("routing", ["round-robin", "prefix"])
def test_one_instance_is_the_plain_replay(tmp_path, routing):
    trace = _mooncake_prefix(tmp_path, 600)
    rb = reblock(trace, 16)
    plain = run_replay(trace, "lru", 6000, reblocked=rb, log_evictions=True)
    routes, [one] = run_routed(trace, "lru", 6000, 1, routing, reblocked=rb, log_evictions=True)
    assert (routes.instance == 0).all()
    for name in ARRAYS:
        assert np.array_equal(getattr(plain, name), getattr(one, name)), name
    assert plain.summary()["preemptions"] > 0 and len(plain.evictions_log) > 1000  # the pool is under pressure
    agg = aggregate_row(routes, [one], "lru", 6000)
    mine = plain.summary()
    for key in ("ttft_p50_ms", "ttft_p99_ms", "e2e_p99_ms", "queue_wait_p99_ms", "tokens_per_s", "block_hit_ratio",
                "prefix_hit_ratio", "preemptions", "evictions", "completed"):
        assert agg[key] == pytest.approx(mine[key], rel=1e-12), key
    assert agg["imbalance"] == 1.0


def test_subset_keeps_the_sharing_and_numbers_densely(tmp_path):
    trace = _mooncake_prefix(tmp_path, 300)
    rb = reblock(trace, 16)
    every = subset(rb, np.arange(rb.n_requests))
    for name in ("offsets", "ids", "n_full", "ref_ids", "ref_offsets"):
        assert np.array_equal(getattr(every, name), getattr(rb, name)), name
    pick = np.arange(1, rb.n_requests, 3)
    sub = subset(rb, pick)
    assert sorted(set(sub.ids.tolist())) == list(range(sub.n_ids))  # dense
    to_old: dict = {}
    for k, r in enumerate(pick):
        old = rb.ids[rb.offsets[r]:rb.offsets[r + 1]]
        new = sub.ids[sub.offsets[k]:sub.offsets[k + 1]]
        assert len(old) == len(new) and sub.n_full[k] == rb.n_full[r]
        assert (new[: sub.n_full[k]] < sub.n_shared).all() and (new[sub.n_full[k]:] >= sub.n_shared).all()
        for a, b in zip(new.tolist(), old.tolist()):  # one old id per new id and back: the same sharing
            assert to_old.setdefault(a, b) == b
    assert len(set(to_old.values())) == len(to_old)


def test_round_robin_is_r_mod_n(tmp_path):
    trace, _ = _conversations(tmp_path)
    for n in (2, 3, 4):
        routes = route(trace, n, "round-robin")
        assert np.array_equal(routes.instance, np.arange(trace.n_requests) % n)
        rb = reblock(trace, 16)
        _, results = run_routed(trace, "lru", 4000, n, "round-robin", reblocked=rb)
        for i, res in enumerate(results):
            assert np.array_equal(res.prompt_tokens, rb.prompt_tokens[i::n])
            assert np.array_equal(res.arrival, rb.arrival[i::n])


def test_prefix_routing_keeps_a_conversation_on_one_instance(tmp_path):
    trace, session = _conversations(tmp_path)
    session = np.array(session)
    routes = route(trace, 3, "prefix")
    for s in range(5):
        assert len(set(routes.instance[session == s].tolist())) == 1, s
    # the first turns spread (no match: the least loaded, lowest index on a tie); later turns follow
    assert np.bincount(routes.instance, minlength=3).tolist() == [10, 10, 5]
    assert (routes.reason[:5] == 2).all() and (routes.reason[5:] == 1).all()  # R_LEAST_LOADED, R_CACHE
    rr = route(trace, 3, "round-robin")
    assert all(len(set(rr.instance[session == s].tolist())) > 1 for s in range(5))


def test_prefix_routing_has_the_higher_pooled_hit_ratio(tmp_path):
    trace, _ = _conversations(tmp_path)
    rb = reblock(trace, 16)
    got = {}
    for routing in ("round-robin", "prefix"):
        routes, results = run_routed(trace, "lru", 4000, 3, routing, reblocked=rb)
        got[routing] = aggregate_row(routes, results, "lru", 4000)
    # prefix: every later turn hits its whole history; round-robin: a turn lands where its history
    # is only when the rotation brings it back there
    assert got["prefix"]["prefix_hit_ratio"] > got["round-robin"]["prefix_hit_ratio"] + 0.2
    assert got["prefix"]["ttft_p99_ms"] <= got["round-robin"]["ttft_p99_ms"]


def test_imbalance_sends_to_the_least_loaded(tmp_path):
    """Every request shares the first blocks: cache affinity alone would pile them on one
    instance; with --balance-abs 2 the router balances once max - min exceeds 2."""
    rows = [{"timestamp": 100 * k, "input_length": 512 * 4, "output_length": 2, "hash_ids": [1, 2, 3, 10 + k]}
            for k in range(60)]
    path = tmp_path / "hot.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trace = read_mooncake(path)
    piled = route(trace, 3, "prefix", settings=RouterSettings(balance_abs=1000))
    assert np.bincount(piled.instance, minlength=3).max() >= 55
    routes = route(trace, 3, "prefix", settings=RouterSettings(balance_abs=2, load_window_s=1e9))
    per = np.bincount(routes.instance, minlength=3)
    assert per.max() - per.min() <= 3 and (routes.reason == 3).sum() > 0  # R_BALANCE


def test_aggregate_pools_the_instances(tmp_path):
    trace = _mooncake_prefix(tmp_path, 400)
    rb = reblock(trace, 16)
    routes, results = run_routed(trace, "lru", 8000, 3, "prefix", reblocked=rb)
    agg = aggregate_row(routes, results, "lru", 8000)
    rows = [r.summary() for r in results]
    prompt = [int(r.prompt_tokens.sum()) for r in results]  # every request is scheduled: all prompt tokens count
    assert all(x["completed"] == x["requests"] for x in rows)
    assert agg["prefix_hit_ratio"] == pytest.approx(
        sum(x["prefix_hit_ratio"] * p for x, p in zip(rows, prompt)) / sum(prompt), rel=1e-9)
    assert agg["requests_per_instance"] == [x["requests"] for x in rows]
    assert agg["completed"] == sum(x["completed"] for x in rows) == trace.n_requests
    assert min(x["ttft_p99_ms"] for x in rows) <= agg["ttft_p99_ms"] <= max(x["ttft_p99_ms"] for x in rows)
    assert agg["imbalance"] == pytest.approx(max(agg["requests_per_instance"]) / (trace.n_requests / 3))


def test_mooncake_prefix_routing_beats_round_robin(tmp_path):
    """Measured on the trace's first 1,000 requests, 4 instances of 100,000 blocks (no pool
    pressure: the hit ratio is the router's doing)."""
    trace = _mooncake_prefix(tmp_path, 1000)
    rb = reblock(trace, 16)
    hit = {}
    for routing in ("round-robin", "prefix"):
        routes, results = run_routed(trace, "lru", 100_000, 4, routing, reblocked=rb)
        hit[routing] = aggregate_row(routes, results, "lru", 100_000)["prefix_hit_ratio"]
    one = run_replay(trace, "lru", 400_000, reblocked=rb).summary()["prefix_hit_ratio"]
    assert hit["round-robin"] < hit["prefix"] <= one + 1e-12


def test_cli_routed_table_json_and_bad_input(tmp_path, capsys):
    from click.testing import CliRunner

    from sitsprof.cli.main import cli, main
    from sitsprof.policies.engine.results import read_results

    trace_path = tmp_path / "conv.jsonl"
    _conversations(tmp_path)
    runner = CliRunner()
    res = runner.invoke(cli, ["policy", "replay", str(trace_path), "-c", "4000", "--instances", "3", "--routing",
                              "prefix", "--json"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "routed.json"
    out.write_text(res.output)
    doc = read_results(out)
    assert doc["routing"]["instances"] == 3 and doc["routing"]["routing"] == "prefix"
    assert [r["instance"] for r in doc["replay"]] == [0, 1, 2]
    (agg,) = doc["routing"]["aggregate"]
    assert agg["requests"] == sum(r["requests"] for r in doc["replay"]) == 25
    from sitsprof.reports.policy_report import policy_section

    section = policy_section(doc, str(out))
    assert any("3 instances, prefix routing" in t.title for t in section.tables)
    assert any(tr["name"].endswith("instance 2") for f in section.figures for tr in f.data)
    res = runner.invoke(cli, ["policy", "replay", str(trace_path), "-c", "4000", "--instances", "2"])
    assert res.exit_code == 0, res.output
    assert "round-robi" in res.output and "TTFT" in res.output and "rotation 25" in res.output
    for args, says in ((["--instances", "0"], "at least one instance"),
                       (["--instances", "2", "--routing", "hash"], "choose round-robin or prefix"),
                       (["--routing", "prefix"], "add --instances"),
                       (["--instances", "2", "--routing", "prefix", "--router-ttl", "0"], "--router-ttl"),
                       (["--instances", "2", "--cache-threshold", "2"], "--cache-threshold"),
                       (["--instances", "100000000"], "router's index")):
        assert main(["policy", "replay", str(trace_path), "-c", "4000", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
