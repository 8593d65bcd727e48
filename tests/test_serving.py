"""The serving replay (policies/serving): in its no-concurrency, all-evictable mode the cache is
each policy's whole-trace kernel, hit for hit; the vLLM rules on real traffic (pinning,
preemption, rejection) hold their invariants; the CLI prints the table and --json."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sitsprof.policies.registry import get_policy
from sitsprof.policies.serving.evictors import POLICY_IDS
from sitsprof.policies.serving.reblock import reblock
from sitsprof.policies.serving.scheduler import DONE, REJECTED, run_replay
from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.generator import generate_workload

MOONCAKE = Path("/work/shared/data/mooncake/conversation_trace.jsonl")


def _mooncake():
    from sitsprof.policies.traces.opening import BUNDLED

    for p in (BUNDLED["mooncake"], MOONCAKE):
        if p.exists():
            return read_trace(p)
    pytest.skip("the Mooncake conversation trace is not here (neither the bundled copy nor /work/shared/data)")


@pytest.fixture(scope="module")
def generated():
    return generate_workload(seed=3, duration_s=120.0)


# sits adapts per window (its kernel and its replay switch on different signals); pinned, it is
# ARC or LRU: tests/test_serving_sits.py
KERNEL_POLICIES = sorted(set(POLICY_IDS) - {"sits"})


def _kernel_hits(trace, policy, capacity):
    hit = np.zeros(len(trace.block), dtype=np.uint8)
    get_policy(policy).KERNEL(np.ascontiguousarray(trace.block), np.ascontiguousarray(trace.request_offsets),
                              trace.n_blocks, capacity, hit)
    return hit


def test_reblock_at_the_trace_block_size_is_the_trace(generated):
    rb = reblock(generated, generated.block_tokens)
    assert np.array_equal(rb.ref_ids, generated.block)
    assert np.array_equal(rb.ref_offsets, generated.request_offsets)


def test_reblock_to_16_tokens(generated):
    rb = reblock(generated, 16)
    k = generated.block_tokens // 16
    off = generated.request_offsets
    for r in range(0, generated.n_requests, max(1, generated.n_requests // 40)):
        toks = generated.tokens[off[r]:off[r + 1]]
        assert rb.prompt_tokens[r] == toks.sum()
        assert rb.n_full[r] == toks.sum() // 16
        n_blocks = rb.offsets[r + 1] - rb.offsets[r]
        assert n_blocks == -(-(rb.prompt_tokens[r] + rb.output_tokens[r] - 1) // 16)
        ids = rb.ids[rb.offsets[r]:rb.offsets[r + 1]]
        assert (ids[: rb.n_full[r]] < rb.n_shared).all() and (ids[rb.n_full[r]:] >= rb.n_shared).all()
    # two requests sharing a coarse block share its fine blocks, and only those
    first = {}
    for r in range(generated.n_requests):
        c = int(generated.block[off[r]])
        if generated.tokens[off[r]] == generated.block_tokens:
            first.setdefault(c, []).append(r)
    pairs = [v for v in first.values() if len(v) > 1]
    assert pairs
    a, b = pairs[0][:2]
    assert np.array_equal(rb.ids[rb.offsets[a]:rb.offsets[a] + k], rb.ids[rb.offsets[b]:rb.offsets[b] + k])
    # private ids are never shared
    priv = rb.ids[rb.ids >= rb.n_shared]
    assert len(np.unique(priv)) == len(priv)


def test_reblock_refuses_a_size_that_does_not_divide():
    from sitsprof.policies.errors import ServingReplayError

    with pytest.raises(ServingReplayError, match="does not divide"):
        reblock(generate_workload(seed=1, duration_s=10.0), 48)


@pytest.mark.parametrize("policy", KERNEL_POLICIES)
def test_no_concurrency_all_evictable_is_the_kernel_on_mooncake(policy):
    trace = _mooncake()
    for capacity in (2000, 20000):
        r = run_replay(trace, policy, capacity, block_tokens=trace.block_tokens, rate_scale=1e-6,
                       all_evictable=True)
        hit = _kernel_hits(trace, policy, capacity)
        assert int(hit.sum()) > 0
        assert np.array_equal(r.ref_hit, hit), f"{policy} at {capacity}: {int((r.ref_hit != hit).sum())} differ"


@pytest.mark.parametrize("policy", KERNEL_POLICIES)
def test_no_concurrency_all_evictable_is_the_kernel_on_a_generated_workload(policy, generated):
    for capacity in (50, 400, 3000):
        r = run_replay(generated, policy, capacity, block_tokens=generated.block_tokens, rate_scale=1e-6,
                       all_evictable=True)
        hit = _kernel_hits(generated, policy, capacity)
        assert np.array_equal(r.ref_hit, hit), f"{policy} at {capacity}: {int((r.ref_hit != hit).sum())} differ"
        assert (r.status == DONE).all()


@pytest.mark.parametrize("policy", sorted(POLICY_IDS))
def test_vllm_rules_under_load(policy, generated):
    rb = reblock(generated, 16)
    # a pool a little over the largest request: preemptions, but every request fits
    need = np.diff(rb.offsets)
    capacity = int(need.max()) + 200
    r = run_replay(generated, policy, capacity, rate_scale=4.0, reblocked=rb, log_evictions=True)
    s = r.summary()
    assert s["completed"] == generated.n_requests and s["rejected"] == 0
    assert s["peak_pinned_blocks"] <= capacity
    assert s["preemptions"] > 0 and s["warnings"]
    # cached prefix never beyond the full prompt blocks, nor past prompt - 1 tokens
    assert (r.hit_blocks <= rb.n_full).all()
    assert (r.hit_blocks * 16 <= rb.prompt_tokens - 1).all()
    done = r.status == DONE
    assert (r.t_first[done] >= r.t_sched[done]).all() and (r.t_done[done] >= r.t_first[done]).all()
    assert (r.t_sched[done] >= r.arrival[done]).all()
    assert len(r.evictions_log) == s["evictions"]


def test_sglang_radix_under_load(generated):
    rb = reblock(generated, 16)
    capacity = int(np.diff(rb.offsets).max()) + 200
    r = run_replay(generated, "lru", capacity, engine="sglang", rate_scale=4.0, reblocked=rb, log_evictions=True)
    s = r.summary()
    assert s["completed"] == generated.n_requests and s["peak_pinned_blocks"] <= capacity
    assert len(r.evictions_log) == s["evictions"] > 0
    assert (r.hit_blocks * 16 <= rb.prompt_tokens - 1).all()
    # a roomy pool: the radix tree and vLLM's pool hit the same prefixes when nothing is evicted
    big = 10 * int(rb.offsets[-1])
    a = run_replay(generated, "lru", big, engine="sglang", reblocked=rb)
    b = run_replay(generated, "lru", big, engine="vllm", reblocked=rb)
    assert a.summary()["evictions"] == b.summary()["evictions"] == 0
    assert np.array_equal(a.hit_blocks, b.hit_blocks)


def test_a_request_larger_than_the_pool_is_rejected(generated):
    rb = reblock(generated, 16)
    need = np.diff(rb.offsets)
    capacity = int(np.percentile(need, 50))
    r = run_replay(generated, "lru", capacity, reblocked=rb)
    assert ((r.status == REJECTED) == (need > capacity)).all()
    assert r.summary()["rejected"] == int((need > capacity).sum()) > 0


def test_more_load_more_waiting(generated):
    rb = reblock(generated, 16)
    slow = run_replay(generated, "lru", 20000, rate_scale=1.0, reblocked=rb).summary()
    fast = run_replay(generated, "lru", 20000, rate_scale=8.0, reblocked=rb).summary()
    assert fast["queue_wait_p99_ms"] >= slow["queue_wait_p99_ms"]
    assert fast["ttft_p99_ms"] > slow["ttft_p99_ms"]


def test_cli_replay_table_and_json(tmp_path):
    from click.testing import CliRunner

    from sitsprof.cli.main import cli
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    path = write_mooncake_jsonl(generate_requests(seed=2, duration_s=60.0), tmp_path / "w.jsonl")
    runner = CliRunner()
    res = runner.invoke(cli, ["policy", "replay", str(path), "-p", "lru,sieve", "-c", "3000", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    rows = doc["replay"]
    assert [r["policy"] for r in rows] == ["lru", "sieve"]
    assert all(r["capacity"] == 3000 and r["completed"] > 0 for r in rows)
    res = runner.invoke(cli, ["policy", "replay", str(path), "-c", "3000", "--engine", "sglang", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["replay"][0]["engine"] == "sglang"
    res = runner.invoke(cli, ["policy", "replay", str(path), "-c", "3000", "--rate-scale", "2"])
    assert res.exit_code == 0, res.output
    assert "TTFT" in res.output



def test_cli_replay_bad_input_is_one_line(tmp_path, capsys):
    from sitsprof.cli.main import main
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    path = write_mooncake_jsonl(generate_requests(seed=2, duration_s=20.0), tmp_path / "w.jsonl")
    for args, says in ((["--block-tokens", "48"], "does not divide"), (["-p", "belady"], "incremental form"),
                       (["-c", "10", "-p", "s3fifo"], "20 blocks"),
                       (["--engine", "sglang", "-p", "arc"], "radix form")):
        assert main(["policy", "replay", str(path), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err


def test_report_draws_the_replay(tmp_path):
    from click.testing import CliRunner

    from sitsprof.cli.main import cli
    from sitsprof.policies.engine.results import PolicyResultsError, read_results
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl
    from sitsprof.reports.policy_report import policy_section

    path = write_mooncake_jsonl(generate_requests(seed=4, duration_s=60.0), tmp_path / "w.jsonl")
    res = CliRunner().invoke(cli, ["policy", "replay", str(path), "-p", "lru,arc", "-c", "2000", "--json"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "replay.json"
    out.write_text(res.output)
    doc = read_results(out)
    assert len(doc["replay"][0]["ttft_cdf_ms"]) == 101 and len(doc["replay"][0]["series"]) == 100
    section = policy_section(doc, str(out))
    titles = [f.title for f in section.figures]
    assert any("TTFT distribution" in t for t in titles) and any("Waiting requests" in t for t in titles)
    assert any("hit ratio over time" in t for t in titles)
    assert any(t.title == "Serving replay" and len(t.rows) == 2 for t in section.tables)
    out.write_text(json.dumps(dict(doc, replay=[{"policy": "lru"}])))
    with pytest.raises(PolicyResultsError, match="replay"):
        read_results(out)
