"""Saturation named (policies/serving/saturation.py) and the fewest replicas meeting an SLO
(policies/serving/plan.py, `policy plan`), issue 23 item 6."""
from __future__ import annotations

import json

import pytest

from sitsprof.policies.serving.plan import fewest_instances, meets
from sitsprof.policies.serving.reblock import reblock
from sitsprof.policies.serving.saturation import measure
from sitsprof.policies.serving.scheduler import replay_row, run_replay


@pytest.fixture(scope="module")
def generated():
    from sitsprof.policies.traces.generator import generate_requests, requests_to_trace

    return requests_to_trace(generate_requests(seed=3, duration_s=120.0))


def test_keeps_up_slow_and_saturates_fast(generated):
    rb = reblock(generated, 16)
    slow = replay_row(run_replay(generated, "lru", 20_000, rate_scale=0.25, reblocked=rb, model="phi-3-mini"))
    assert slow["saturated"] is False, slow["saturation"]
    assert slow["saturation"]["served_share"] > 0.95
    fast = replay_row(run_replay(generated, "lru", 20_000, rate_scale=40.0, reblocked=rb, model="phi-3-mini"))
    s = fast["saturation"]
    assert fast["saturated"] is True and s["served_share"] < 0.95 and s["queue_growth_per_s"] > 0, s
    # the served share is what the row's own figures say: completions over the run vs arrivals
    arrival = rb.arrival / 40.0
    assert s["arrival_rate"] == pytest.approx((len(arrival) - 1) / (arrival.max() - arrival.min()))
    assert s["completed_rate"] == pytest.approx(fast["completed"] / fast["simulated_s"])
    batch = run_replay(generated, "lru", 20_000, rate_scale=1e-9, reblocked=rb, model="phi-3-mini")
    batch.arrival[:] = 0.0  # every request at once: no rate
    assert measure(batch)["saturated"] is None


def test_table_and_json_flag_a_saturated_comparison(generated, tmp_path, capsys):
    from sitsprof.cli.main import main
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    path = write_mooncake_jsonl(generate_requests(seed=3, duration_s=120.0), tmp_path / "w.jsonl")
    args = ["policy", "replay", str(path), "-p", "lru,fifo", "-c", "8000", "--model", "phi-3-mini", "--gpu", "h100"]
    assert main([*args, "--rate-scale", "40", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["replay"]
    assert [r["saturated"] for r in rows] == [True, True]
    assert {s["policy"] for s in doc["verdict"]["saturated"]} == {"lru", "fifo"}  # slo.py's verdict takes the flag
    assert main([*args, "--rate-scale", "40"]) == 0
    out = capsys.readouterr().out
    assert "comparing fifo, lru at 8,000 blocks on a saturated replica" in out
    assert main([*args, "--rate-scale", "0.25"]) == 0
    assert "comparing" not in capsys.readouterr().out


def test_search_bisects_to_the_fewest():
    need = 11  # a fake system that meets the SLO from 11 replicas on

    def evaluate(n):
        return {"ttft_p99_ms": 1000.0 if n >= need else 50_000.0, "tpot_p99_ms": 20.0, "saturated": n < need - 2}

    res = fewest_instances(evaluate, 2000.0, 100.0)
    assert res["instances"] == need and res["one_fewer"] == need - 1
    assert [s["instances"] for s in res["steps"]] == [1, 2, 4, 8, 16, 12, 10, 11]
    assert meets({"ttft_p99_ms": 10.0, "tpot_p99_ms": 150.0}, 2000, 100)[1] == "TPOT P99 150.0 ms > 100 ms"
    assert fewest_instances(lambda n: evaluate(1), 2000.0, 100.0, max_instances=4)["instances"] is None


def test_policy_plan_count_meets_and_one_fewer_misses(tmp_path, capsys):
    """`policy plan` on a trace 8x faster than it was recorded: its answer N, rechecked with
    `policy replay --instances N` (meets) and N - 1 (misses)."""
    from sitsprof.cli.main import main
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    path = str(write_mooncake_jsonl(generate_requests(seed=3, duration_s=60.0), tmp_path / "w.jsonl"))
    common = ["-c", "8000", "--model", "phi-3-mini", "--gpu", "h100", "--rate-scale", "8"]
    assert main(["policy", "plan", path, *common, "--slo-ttft-p99", "2000", "--slo-tpot-p99", "100", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    n = plan["instances"]
    assert n is not None and n >= 2, plan["why"]
    for count, ok in ((n, True), (n - 1, False)):
        assert main(["policy", "replay", path, *common, "--instances", str(count), "--json"]) == 0
        (agg,) = json.loads(capsys.readouterr().out)["routing"]["aggregate"]
        assert meets(agg, 2000.0, 100.0)[0] is ok, (count, agg["ttft_p99_ms"], agg["saturated"])
    assert main(["policy", "plan", path, *common, "--slo-tpot-p99", "100"]) == 0
    out = capsys.readouterr().out
    assert f"answer: {n} instance(s)" in out and "misses" in out
