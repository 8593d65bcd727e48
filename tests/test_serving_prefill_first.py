"""SGLang's batches in the serving replay (ReplayConfig.prefill_first, scheduler RULE_PREFILL_FIRST):
a step with prefill work (a chunked prompt to continue, waiting requests to admit) runs it alone
and the decodes wait; a decode step admits nobody. Checked against a plain-Python simulation of
that rule on closed loops, with every step priced at exactly 1 ms (a flat per-op profile, KV
at an unbounded bandwidth), and against vLLM's mixed batches, which it must differ from."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from sitsprof.calibration import load_calibration
from sitsprof.policies.serving.scheduler import DONE, run_replay
from sitsprof.policies.serving.workload import synthetic

FLAT = {"grid_tokens": [1, 1_000_000], "gemm_ms": [0.0, 0.0], "lm_head_ms": [0.0, 0.0],
        "allreduce_ms": [0.0, 0.0], "attn_tflops": 1e30, "overhead_ms": 1.0}


#: a step is the 1 ms overhead plus a KV term kept below a microsecond (a one-layer model with one
#: 8-wide KV head, 32 bytes a token, at the schema's top bandwidth); the checks allow 0.1 ms
ATOL = 1e-4


def _calibration():
    cal = copy.deepcopy(load_calibration(None))
    for k in ("hbm_read_gbs", "hbm_write_gbs"):
        cal["bandwidth"][k] = 1e5
    return cal


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    p = tmp_path_factory.mktemp("tiny") / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
                             "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 8,
                             "intermediate_size": 128, "vocab_size": 1000, "torch_dtype": "bfloat16"}))
    return str(p)


def reference(concurrency, isl, osl, requests, budget, prefill_first=True):
    """Step by step, 1 ms each: (t_first, t_done) per request."""
    arrival = [0.0 if i < concurrency else None for i in range(requests)]
    nxt_issue = concurrency
    comp, gen = [0] * requests, [0] * requests
    t_first, t_done = [None] * requests, [None] * requests
    running, waiting, seen = [], [], 0
    now, done = 0.0, 0
    while done < requests:
        while seen < requests and arrival[seen] is not None and arrival[seen] <= now + 1e-12:
            waiting.append(seen)
            seen += 1

        def decoding(r):
            return gen[r] > 0 and isl + gen[r] - comp[r] == 1

        batch = {}
        left = budget
        for r in running:
            if left <= 0:
                break
            if prefill_first and decoding(r):
                continue
            new = min(isl + gen[r] - comp[r], left)
            batch[r] = new
            left -= new
        while waiting and left > 0:
            r = waiting.pop(0)
            running.append(r)
            batch[r] = min(isl, left)
            left -= batch[r]
        if prefill_first and not any(not decoding(r) for r in batch):
            batch = {r: 1 for r in running if decoding(r)}
        now += 1e-3
        for r, new in batch.items():
            comp[r] += new
            if comp[r] >= isl + gen[r]:
                gen[r] += 1
                if t_first[r] is None:
                    t_first[r] = now
                if gen[r] >= osl:
                    t_done[r] = now
                    running.remove(r)
                    done += 1
                    if nxt_issue < requests:
                        arrival[nxt_issue] = now
                        nxt_issue += 1
    return np.array(t_first), np.array(t_done)


def replay(model, concurrency, isl, osl, requests, budget, prefill_first, engine):
    trace, rb = synthetic(concurrency, isl, osl, requests, 16)
    res = run_replay(trace, "lru", 1_000_000, reblocked=rb, block_tokens=16, max_num_batched_tokens=budget,
                     max_num_seqs=1024, calibration=_calibration(), model=model, seed=0, step_profile=FLAT,
                     engine=engine, prefill_first=prefill_first)
    assert (res.status == DONE).all()
    return res


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("concurrency,isl,osl,budget", [(3, 5000, 4, 8192), (4, 3000, 6, 4096), (2, 100, 5, 8192),
                                                        (5, 20000, 3, 8192)])
def test_prefill_first_equals_the_reference(tiny, engine, concurrency, isl, osl, budget):
    requests = 3 * concurrency
    res = replay(tiny, concurrency, isl, osl, requests, budget, True, engine)
    first, finish = reference(concurrency, isl, osl, requests, budget)
    np.testing.assert_allclose(res.t_first, first, rtol=0, atol=ATOL)
    np.testing.assert_allclose(res.t_done, finish, rtol=0, atol=ATOL)
    assert res.summary()["engine"] == engine


def test_mixed_batches_are_the_reference_without_the_rule_and_differ(tiny):
    """The same reference with decodes riding along (vLLM) is the replay without the rule, and
    the two rules give different finishing times: the decodes do wait for the prefills."""
    args = (3, 5000, 4, 9, 8192)
    mixed = replay(tiny, *args, False, "vllm")
    first, finish = reference(*args, prefill_first=False)
    np.testing.assert_allclose(mixed.t_done, finish, rtol=0, atol=ATOL)
    alone = replay(tiny, *args, True, "vllm")
    assert not np.allclose(alone.t_done, mixed.t_done)
    # request 0 finished its prefill in step 1; under SGLang's rule it waits out step 2 (request 1's
    # remaining chunk and request 2's prompt), under vLLM's it decodes in it
    assert abs(alone.t_first[0] - 1e-3) < ATOL and abs(mixed.t_first[0] - 1e-3) < ATOL
    assert alone.t_done[0] > mixed.t_done[0] + 0.5e-3


def test_replay_cli_prefill_alone(tiny):
    from click.testing import CliRunner

    from sitsprof.cli.main import cli

    def run(*flags):
        res = CliRunner().invoke(cli, ["policy", "replay", "--concurrency", "3", "--isl", "5000", "--osl", "4",
                                       "--model", tiny, "--engine", "sglang", *flags, "--json"])
        assert res.exit_code == 0, res.output
        return json.loads(res.output[res.output.index("{"):])

    alone, mixed = run("--prefill-alone"), run()
    assert "alone" in alone["engine"]["batches"] and "batches" not in mixed["engine"]
    assert alone["replay"][0]["tpot_p50_ms"] != pytest.approx(mixed["replay"][0]["tpot_p50_ms"])
