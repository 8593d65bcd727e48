"""SITS through the CLI: `policy simulate --policy sits,semantic-shard --calibration` with the
events in --json, refused calibrations, `policy serve-metrics`, and the demo's SITS rows."""
from __future__ import annotations

import json
import urllib.request

import pytest

from sitsprof.calibration import load_calibration, write_calibration
from sitsprof.policies.adaptive import sits
from sitsprof.policies.engine.metrics import build_registry, exposition, serve
from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("sits-cli") / "small.jsonl"
    write_mooncake_jsonl(generate_requests(seed=4, duration_s=300), path)
    return path


@pytest.fixture(scope="module")
def slow_hbm(tmp_path_factory):
    """The reference calibration with a tenth of the HBM bandwidth."""
    cal = load_calibration()
    cal["name"] = "slow-hbm"
    cal["bandwidth"]["hbm_read_gbs"] /= 10
    return write_calibration(cal, tmp_path_factory.mktemp("cal") / "slow.json")


def test_simulate_sits_json_carries_events_cost_and_metrics(cli, small_trace, slow_hbm):
    code, out, err = cli("policy", "simulate", str(small_trace), "--policy", "sits,semantic-shard",
                         "--capacity", "300", "--calibration", str(slow_hbm), "--json")
    assert code == 0, err
    rows = {r["policy"]: r for r in json.loads(out)["results"]}
    s = rows["sits"]["extra"]
    assert s["cost"]["calibration"] == "slow-hbm" and s["cost"]["ttft_p99_ms"] > 0
    decisions = [e for e in s["events"] if e["event"] == "decision"]
    assert len(decisions) == s["windows"] >= 5  # 300 s of trace in 60 s windows
    assert {"time", "window", "H", "d_ms", "score", "action"} <= set(decisions[0])
    shard = rows["semantic-shard"]["extra"]
    assert shard["semantic_cache_hit_ratio"] == rows["semantic-shard"]["block_hit_ratio"]
    evictions = rows["semantic-shard"]["evictions"]
    assert evictions > 0 and shard["ttl_s"] == 180.0
    assert shard["shard_eviction_rate"] == pytest.approx(evictions / read_trace(small_trace).span_s)
    assert "ctcci" in shard["tenancy"]
    # the direct call agrees with the CLI
    direct = sits.run(read_trace(small_trace), 300, calibration=str(slow_hbm))
    assert direct.hits == rows["sits"]["hits"]


def test_calibration_changes_the_cost_not_the_hits(cli, small_trace, slow_hbm):
    docs = []
    for extra in ([], ["--calibration", str(slow_hbm)]):
        code, out, err = cli("policy", "simulate", str(small_trace), "-p", "lru", "-c", "300", "--json", *extra)
        assert code == 0, err
        docs.append(json.loads(out)["results"][0])
    assert docs[0]["hits"] == docs[1]["hits"]
    assert docs[1]["extra"]["cost"]["ttft_p50_ms"] > docs[0]["extra"]["cost"]["ttft_p50_ms"]


def test_invalid_calibration_is_one_line_naming_the_field(cli, small_trace, tmp_path):
    bad = tmp_path / "bad.json"
    cal = load_calibration()
    cal["latency"]["hbm"]["unit"] = "parsecs"
    bad.write_text(json.dumps(cal))
    code, out, err = cli("policy", "simulate", str(small_trace), "-p", "sits", "-c", "300",
                         "--calibration", str(bad))
    assert code == 2 and out == ""
    assert err.strip() == f"sitsprof: error: {bad}: latency.hbm.unit: must be one of cycles, ns, got 'parsecs'"


def test_serve_metrics_once_prints_the_named_metrics(cli, small_trace):
    code, out, err = cli("policy", "serve-metrics", str(small_trace), "-c", "300", "--once")
    assert code == 0, err
    for name in ("semantic_cache_hit_ratio", "shard_eviction_rate", "cross_tenant_cache_contamination_index",
                 "ttft_p99_seconds", "sits_behaviour_switches"):
        assert f"# TYPE {name} gauge" in out
    assert 'semantic_cache_hit_ratio{capacity="300",policy="semantic-shard"}' in out


def test_metrics_server_binds_localhost(small_trace):
    trace = read_trace(small_trace)
    result = sits.run(trace, 300)
    registry = build_registry([result], float(trace.time[-1] - trace.time[0]))
    server, _ = serve(registry, port=0)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert body == exposition(registry)
        line = next(x for x in body.splitlines() if x.startswith("semantic_cache_hit_ratio{"))
        assert float(line.split()[-1]) == pytest.approx(result.block_hit_ratio)
    finally:
        server.shutdown()
        server.server_close()


def test_demo_includes_the_sits_policies(cli, tmp_path):
    code, out, err = cli("demo", "--duration", "120", "--out", str(tmp_path / "demo"))
    assert code == 0, err
    doc = json.loads((tmp_path / "demo" / "results.json").read_text())
    policies = {r["policy"] for r in doc["results"]}
    assert {"sits", "semantic-shard"} <= policies
    assert "cost model: calibration hopper-published" in out


def test_claims_rerun_the_brief_comparisons(cli):
    code, out, err = cli("policy", "claims", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [d["workload"] for d in doc] == ["three-stack", "three-stack"]
    first, second = doc
    assert {r["policy"] for r in first["rows"]} == {"lru", "prefix_lru", "semantic-shard"}
    assert {r["policy"] for r in second["rows"]} == {"lirs", "lru", "lfu"}
    for row in first["rows"] + second["rows"]:
        assert set(row["stack_hit_ratio"]) == {"qwen2-72b", "deepseek-v2", "phi-3-mini"}
        assert row["ttft_p95_ms"] > 0 and 0 <= row["block_hit_ratio"] <= 1


def test_simulate_flags_reach_the_policies(cli, tmp_path):
    from sitsprof.policies.adaptive import semantic_shard
    from sitsprof.policies.traces.generator import write_requests_jsonl

    small_trace = tmp_path / "stacks.jsonl"  # the request format names each request's model stack
    write_requests_jsonl(generate_requests(seed=4, duration_s=300), small_trace)
    code, out, err = cli("policy", "simulate", str(small_trace), "-p", "sits,semantic-shard,lirs",
                         "-c", "300", "--shard-key", "stack", "--ttl", "2m", "--window", "30s",
                         "--threshold-windows", "2", "-P", "hir_ratio=0.05", "-P", "margin=0", "--json")
    assert code == 0, err
    rows = {r["policy"]: r for r in json.loads(out)["results"]}
    shard = rows["semantic-shard"]["extra"]
    assert shard["shard_key"] == "stack" and shard["ttl_s"] == 120.0 and shard["window_s"] == 30.0
    trace = read_trace(small_trace)
    direct = semantic_shard.run(trace, 300, shard_key="stack", ttl_s=120.0, window_s=30.0)
    assert direct.hits == rows["semantic-shard"]["hits"]
    s = rows["sits"]["extra"]
    assert s["threshold"]["windows"] == 2 and "lirs" in s["behaviour_share"]
    assert s["windows"] >= 9  # 300 s in 30 s windows
    assert rows["sits"]["hits"] == sits.run(trace, 300, window_s=30.0, threshold=True, threshold_windows=2,
                                            margin=0.0).hits
    assert rows["lirs"]["extra"]["hir_ratio"] == 0.05


@pytest.mark.parametrize("args,message", [
    (["-p", "lru", "-P", "ttl_s=10"], "no selected policy takes parameter ttl_s (lru: none)"),
    (["-p", "semantic-shard", "--ttl", "soon"], "duration 'soon' is not a time"),
    (["-p", "sits", "-P", "margin"], "is not name=value"),
    (["-p", "sits", "-P", "window_refs=lots"], "window_refs='lots': give"),
    (["-p", "lru", "--threshold"], "no selected policy takes parameter threshold"),
])
def test_bad_policy_parameters_are_one_line_errors(cli, small_trace, args, message):
    code, out, err = cli("policy", "simulate", str(small_trace), "-c", "300", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_durations_and_parameter_values():
    from sitsprof.common.durations import parse_duration
    from sitsprof.policies.sweep import bind_params

    assert [parse_duration(t) for t in ("180", "180s", "3m", "1.5h", "500ms", 42)] == [180, 180, 180, 5400, 0.5, 42]
    bound = bind_params(["sits", "semantic-shard"], {"window_s": "2m", "switching": "false", "shards": "4",
                                               "sample_shift": "none", "initial": "recency"})
    assert bound["sits"] == {"window_s": 120.0, "switching": False, "sample_shift": None, "initial": "recency"}
    assert bound["semantic-shard"] == {"window_s": 120.0, "shards": 4}


def test_notes_count_switches_in_the_right_number():
    from types import SimpleNamespace

    from sitsprof.cli.console import _notes

    share = {"recency": 0.25}
    assert _notes(SimpleNamespace(extra={"switches": 1, "behaviour_share": share})) == "1 switch; recency 25%"
    assert _notes(SimpleNamespace(extra={"switches": 2, "behaviour_share": share})) == "2 switches; recency 25%"
    assert _notes(SimpleNamespace(extra={"switches": 0, "behaviour_share": share})).startswith("0 switches")


def test_demo_times_the_replay_after_a_warm_up(cli, tmp_path, monkeypatch):
    """The timed replay comes after an untimed one at the smallest capacity (the JIT compile)."""
    from sitsprof.policies import demo as policy_demo

    calls = []
    real = policy_demo.run_policies
    monkeypatch.setattr(policy_demo, "run_policies",
                        lambda trace, policies, capacities, **kw: calls.append(list(capacities))
                        or real(trace, policies, capacities, **kw))
    code, out, err = cli("demo", "--duration", "120", "-p", "lru", "--out", str(tmp_path / "demo"))
    assert code == 0, err
    assert len(calls) == 2 and calls[0] == calls[1][:1] and len(calls[1]) > 1
    assert "kernels compiled beforehand" in " ".join(out.split())  # the title may wrap
