"""SGLang's admission in the serving replay (ReplayConfig.sglang_admission, sglang_admission.py)
checked against SGLang 0.5.23's own PrefillAdder, PrefillBudget, NewTokenRatioTracker and decode
retraction order, driven on CPU by bench/sglang_admission_reference.py through closed loops
(tests/data/sglang_admission_reference.json): per request, the step of its first admission, of
its first token and of its finish, and how often it was retracted, must be SGLang's exactly.
Every step is priced at 1 ms (a flat per-op profile) and a constant fraction of a microsecond, so
a time is a step number."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_serving_prefill_first import FLAT, _calibration, tiny  # noqa: F401  (the 1 ms step, the model)

from sitsprof.policies.errors import ServingReplayError
from sitsprof.policies.serving.reblock import reblock
from sitsprof.policies.serving.scheduler import DONE, run_replay
from sitsprof.policies.serving.workload import closed_loop
from sitsprof.policies.traces.trace import Trace

DATA = json.loads((Path(__file__).parent / "data" / "sglang_admission_reference.json").read_text())
CASES = {c["name"]: c for c in DATA["cases"]}
BT = DATA["page_size"]


def _trace(isl, osl) -> Trace:
    """Prompts of the given lengths in BT-token blocks, no block shared, timestamps 0."""
    per = [-(-int(x) // BT) for x in isl]
    n = int(sum(per))
    block = np.arange(n, dtype=np.int32)
    tokens = np.full(n, BT, dtype=np.int32)
    ends = np.cumsum(per) - 1
    tokens[ends] = [int(x) - (p - 1) * BT for x, p in zip(isl, per)]
    return Trace(time=np.zeros(n), request=np.repeat(np.arange(len(isl), dtype=np.int64), per), block=block,
                 original_id=block.astype(np.int64),
                 position=np.concatenate([np.arange(p, dtype=np.int32) for p in per]), tokens=tokens,
                 tenant=np.broadcast_to(np.int32(-1), (n,)),
                 request_output_tokens=np.asarray(osl, dtype=np.int64), source="sglang admission reference",
                 block_tokens=BT, n_blocks=n)


def replay(case, model, sglang_admission=True):
    trace = _trace(case["isl"], case["osl"])
    rb = closed_loop(reblock(trace, BT), case["concurrency"])
    return run_replay(trace, "lru", case["pages"], reblocked=rb, block_tokens=BT,
                      max_num_batched_tokens=DATA["chunked_prefill_size"], max_num_seqs=1024,
                      calibration=_calibration(), model=model, seed=0, step_profile=FLAT, engine="sglang",
                      prefill_first=True, sglang_admission=sglang_admission, sglang_ignore_eos=case["ignore_eos"])


def steps(t, res):
    """Step numbers of times: each step is the 1 ms overhead plus the same fraction of a microsecond
    (the model's HBM latency term at the schema's top bandwidth), so the mean step divides them."""
    dt = res.end_s / res.summary()["steps"]
    return np.rint(np.asarray(t) / dt).astype(np.int64)


@pytest.mark.parametrize("name", sorted(CASES))
def test_admission_equals_sglang(tiny, name):  # noqa: F811
    case = CASES[name]
    res = replay(case, tiny)
    assert (res.status == DONE).all()
    assert res.summary()["steps"] == case["steps"]
    np.testing.assert_array_equal(steps(res.t_sched, res) + 1, case["admitted"])
    np.testing.assert_array_equal(steps(res.t_first, res), case["first"])
    np.testing.assert_array_equal(steps(res.t_done, res), case["done"])
    np.testing.assert_array_equal(res.n_preempt, case["retracted"])


def test_the_reference_exercises_each_rule():
    """The data hold a retraction, a chunked prompt, a pool that binds, and ignore_eos."""
    assert any(sum(c["retracted"]) for c in DATA["cases"])
    assert any(max(c["isl"]) > DATA["chunked_prefill_size"] for c in DATA["cases"])
    assert any(c["ignore_eos"] for c in DATA["cases"])
    # the pool binds: some request waits past its arrival round
    assert any(len(set(c["admitted"][: c["concurrency"]])) > 2 for c in DATA["cases"])


def test_differs_from_vllm_admission(tiny):  # noqa: F811
    """vLLM's rule admits on the prompt's blocks alone: more run at once, and it preempts."""
    case = CASES["c24-isl2048-osl800-ratio-retracts"]
    sg = replay(case, tiny).summary()
    vl = replay(case, tiny, sglang_admission=False).summary()
    assert vl["peak_running"] > sg["peak_running"]
    assert sg["rules"]["admission"].startswith("SGLang")


def test_refused_without_the_sglang_engine():
    with pytest.raises(ServingReplayError, match="--engine sglang"):
        run_replay(_trace([32], [2]), "lru", 100, sglang_admission=True)
