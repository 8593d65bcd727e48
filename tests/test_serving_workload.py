"""The closed-loop workload (workload.py, `policy replay --concurrency N`) and the silicon
table's reader (silicon.py): the loop keeps exactly N requests in flight and issues each new
one at a finish; one client's step times are the step model's own; the reader gives the CSV's
numbers as written."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from sitsprof.policies.errors import ServingReplayError, SiliconTableError
from sitsprof.policies.serving import workload
from sitsprof.policies.serving.latency import StepCostModel
from sitsprof.policies.serving.scheduler import DONE, run_replay
from sitsprof.policies.serving.silicon import read_silicon

EXCERPT = Path(__file__).parent / "data" / "silicon_excerpt.csv"


def _run(concurrency, isl, osl, requests, capacity=100_000, **kw):
    trace, rb = workload.synthetic(concurrency, isl, osl, requests)
    return rb, run_replay(trace, "lru", capacity, reblocked=rb, model="phi-3-mini", **kw)


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_closed_loop_issues_each_request_at_a_finish(concurrency):
    rb, res = _run(concurrency, 300, 20, 5 * concurrency)
    assert (res.status == DONE).all()
    assert (res.arrival[:concurrency] == 0).all()
    # request N + j arrives at the j-th finish (in time order): never more than N in flight
    finishes = np.sort(res.t_done)
    np.testing.assert_array_equal(res.arrival[concurrency:], finishes[: len(finishes) - concurrency])
    times = np.concatenate([res.arrival, res.t_done])
    for t in times:
        in_flight = int(((res.arrival <= t) & (res.t_done > t)).sum())
        assert in_flight <= concurrency
    assert res.summary()["peak_running"] == concurrency


def test_one_client_is_the_step_model_step_by_step():
    """Concurrency 1, a prompt inside one step's budget: TTFT is one prefill step, every later
    token one decode step, each priced by StepCostModel.step on the same counts."""
    isl, osl = 1000, 5
    rb, res = _run(1, isl, osl, 3)
    m = StepCostModel.from_calibration(None, "phi-3-mini", 16, 0)
    blocks = -(-isl // 16)
    prefill = m.step(prefill_tokens=isl, attn_token_pairs=isl * isl / 2, context_tokens=isl, kv_write_tokens=isl,
                     n_running=1, table_blocks=-(-(isl + osl - 1) // 16))
    assert blocks <= -(-(isl + osl - 1) // 16)
    ttft = res.t_first - res.arrival
    np.testing.assert_allclose(ttft, prefill, rtol=1e-12)
    decode = [m.step(context_tokens=isl + k + 1, kv_write_tokens=1, n_running=1,
                     table_blocks=-(-(isl + osl - 1) // 16)) for k in range(osl - 1)]
    np.testing.assert_allclose(res.t_done - res.t_first, sum(decode), rtol=1e-12)
    np.testing.assert_allclose(res.arrival[1:], res.t_done[:-1], rtol=0)


def test_frontend_delay_is_in_ttft_and_the_engine_waits_for_it():
    """One client and a frontend delay: each request reaches the idle engine its own drawn delay
    after its send (the previous finish), so its TTFT is that delay plus the one prefill step the
    step model prices; the sends are still the finishes."""
    isl, osl = 1000, 5
    trace, rb = workload.synthetic(1, isl, osl, 4, frontend_delay_s=3e-3, seed=7)
    d = rb.frontend_delay
    assert d.shape == (4,) and (d > 0).all() and len(set(d.tolist())) == 4
    again = workload.synthetic(1, isl, osl, 4, frontend_delay_s=3e-3, seed=7)[1].frontend_delay
    np.testing.assert_array_equal(d, again)
    res = run_replay(trace, "lru", 100_000, reblocked=rb, model="phi-3-mini")
    m = StepCostModel.from_calibration(None, "phi-3-mini", 16, 0)
    prefill = m.step(prefill_tokens=isl, attn_token_pairs=isl * isl / 2, context_tokens=isl, kv_write_tokens=isl,
                     n_running=1, table_blocks=-(-(isl + osl - 1) // 16))
    np.testing.assert_allclose(res.t_first - res.arrival, d + prefill, rtol=1e-12)
    np.testing.assert_allclose(res.arrival[1:], res.t_done[:-1], rtol=0)
    assert workload.synthetic(1, isl, osl, 4)[1].frontend_delay is None  # no delay: the old arrays


def test_without_a_frontend_delay_clients_stay_in_lock_step():
    """Four clients whose prompts fit one step: with no delay they prefill together, finish
    together and restart together every round (one first-token time a round); any delay makes
    the first arrival start alone on the idle engine and the rest wait for its step."""
    def rounds(delay):
        trace, rb = workload.synthetic(4, 200, 10, 16, frontend_delay_s=delay)
        res = run_replay(trace, "lru", 100_000, reblocked=rb, model="phi-3-mini")
        assert (res.status == DONE).all()
        return [len(set(np.round(res.t_first[k * 4:(k + 1) * 4], 12).tolist())) for k in range(4)]

    assert rounds(0.0) == [1, 1, 1, 1]
    assert max(rounds(1e-3)[1:]) > 1


def test_a_shorter_frontend_delay_reaches_the_engine_first():
    """Two clients finish together and send together; the request with the longer delay (index 2,
    50 ms) must not hold back the one sent beside it with a 1 ms delay (index 3): that one is
    scheduled first, no earlier than its own send + delay."""
    import dataclasses

    trace, rb = workload.synthetic(2, 200, 10, 4)
    rb = dataclasses.replace(rb, frontend_delay=np.array([0.0, 0.0, 0.05, 0.001]))
    res = run_replay(trace, "lru", 100_000, reblocked=rb, model="phi-3-mini")
    assert (res.status == DONE).all() and res.arrival[2] == res.arrival[3]  # sent at the same finish
    assert res.arrival[3] + 0.001 <= res.t_sched[3] < res.arrival[2] + 0.05 <= res.t_sched[2]


def test_a_trace_in_closed_loop_keeps_its_prompts():
    from sitsprof.policies.serving.reblock import reblock
    from sitsprof.policies.traces.generator import generate_workload

    trace = generate_workload(seed=3, duration_s=30.0)
    rb = workload.closed_loop(reblock(trace, 16), 4)
    res = run_replay(trace, "lru", 50_000, reblocked=rb, model="phi-3-mini")
    assert (res.status == DONE).all()
    np.testing.assert_array_equal(np.sort(res.t_done)[: rb.n_requests - 4], res.arrival[4:])
    assert res.summary()["prefix_hit_ratio"] > 0  # the trace's shared prefixes are still shared


def test_bad_workload_options_are_one_line(capsys):
    from sitsprof.cli.main import main

    for args, says in ((["--concurrency", "0", "--isl", "10", "--osl", "2"], "at least one client"),
                       (["--concurrency", "2", "--isl", "10"], "--osl"),
                       (["--isl", "10", "--osl", "2"], "add --concurrency"),
                       (["--concurrency", "2", "--isl", "10", "--osl", "2", "--instances", "2"], "--instances"),
                       ([], "TRACE")):
        assert main(["policy", "replay", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    with pytest.raises(ServingReplayError):
        workload.synthetic(2, 0, 5)


def test_cli_closed_loop_json():
    from click.testing import CliRunner

    from sitsprof.cli.main import cli

    res = CliRunner().invoke(cli, ["policy", "replay", "--concurrency", "4", "--isl", "200", "--osl", "10",
                                   "--requests", "12", "-c", "10k", "--model", "phi-3-mini", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    row = doc["replay"][0]
    assert doc["trace"]["requests"] == 12 and row["completed"] == 12 and row["peak_running"] == 4
    assert row["prefix_hit_ratio"] == 0.0  # random, unshared prompts


def test_silicon_reader_gives_the_csv_text_as_numbers(tmp_path):
    rows = read_silicon(EXCERPT)
    with EXCERPT.open(newline="") as fh:
        raw = list(csv.DictReader(fh))
    assert len(rows) == len(raw) == 12
    for r, x in zip(rows, raw):
        assert r.id == x["id"] and r.model == x["model_path"] and r.system == x["system"]
        assert r.measured_ttft_ms == float(x["silicon_ttft_ms"]) and r.measured_tpot_ms == float(x["silicon_tpot_ms"])
        assert (r.isl, r.osl, r.tp) == (int(x["isl"]), int(x["osl"]), int(x["tp_size"] or 1))
        assert r.concurrency == int(x["batch_size"] or 256)  # the disaggregated row: silicon_concurrency=256
    assert {r.backend for r in rows} == {"vllm", "sglang", "trtllm"}
    bad = tmp_path / "bad.csv"
    bad.write_text("id,backend\nx,vllm\n")
    with pytest.raises(SiliconTableError, match="column"):
        read_silicon(bad)
    text = EXCERPT.read_text().splitlines()
    bad.write_text("\n".join([text[0], text[1].replace(",vllm,", ",vllm,", 1).rsplit(",", 1)[0] + ",fast"]) + "\n")
    with pytest.raises(SiliconTableError, match=r"bad.csv:2: column silicon_tpot_ms is 'fast'"):
        read_silicon(bad)
    with pytest.raises(SiliconTableError, match="no such file"):
        read_silicon(tmp_path / "none.csv")
