"""`ReplayConfig` (policies/serving/config.py): one frozen object built at the CLI's edge and
passed down, instead of a dozen keyword arguments through four signatures (issue 24).

The same results before and after the refactor are the serving tests' business
(test_serving*.py, the differential tests against the reference engines); here: the object is
built once, reaches `run_replay` unchanged, and the keyword form still equals it.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from sitsprof.policies.errors import ServingReplayError
from sitsprof.policies.serving.config import ReplayConfig


def test_frozen_and_keyword_form():
    cfg = ReplayConfig(rate_scale=2.0, max_num_seqs=64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.rate_scale = 3.0
    assert ReplayConfig.of(cfg, seed=4) == dataclasses.replace(cfg, seed=4)
    assert ReplayConfig.of(None, engine="sglang").engine == "sglang"
    assert ReplayConfig.of(cfg) is cfg
    with pytest.raises(TypeError, match="rate_scael"):
        ReplayConfig.of(cfg, rate_scael=2)
    for bad, says in (({"engine": "trt"}, "unknown engine"), ({"rate_scale": 0.0}, "--rate-scale"),
                      ({"max_num_seqs": 0}, "--max-num-seqs"), ({"block_tokens": 0}, "--block-tokens")):
        with pytest.raises(ServingReplayError, match=says):
            ReplayConfig(**bad).checked()
    assert ReplayConfig().reserve_full_isl is True  # the admission rule's seam (vLLM 0.33's default)


def test_config_and_keywords_replay_alike(tmp_path):
    from sitsprof.policies.serving.reblock import reblock
    from sitsprof.policies.serving.scheduler import run_replay
    from sitsprof.policies.traces.generator import generate_requests, requests_to_trace

    trace = requests_to_trace(generate_requests(seed=5, duration_s=20.0))
    rb = reblock(trace, 16)
    cfg = ReplayConfig(rate_scale=3.0, max_num_batched_tokens=2048, max_num_seqs=32, seed=2, model="phi-3-mini")
    a = run_replay(trace, "lru", 2000, cfg, reblocked=rb).summary()
    b = run_replay(trace, "lru", 2000, reblocked=rb, rate_scale=3.0, max_num_batched_tokens=2048, max_num_seqs=32,
                   seed=2, model="phi-3-mini").summary()
    a.pop("seconds"), b.pop("seconds")
    assert a == b
    c = run_replay(trace, "lru", 2000, cfg, reblocked=rb, max_num_seqs=4).summary()  # a keyword over the config
    assert c["peak_running"] <= 4 < a["peak_running"]


def test_the_cli_builds_it_once(tmp_path, monkeypatch, capsys):
    """`policy replay` builds one ReplayConfig (model with its TP and precision in it) and every
    replay of the document receives that object."""
    from sitsprof.cli.main import main
    from sitsprof.policies.serving import summary
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    path = write_mooncake_jsonl(generate_requests(seed=2, duration_s=20.0), tmp_path / "w.jsonl")
    seen = []
    real = summary.run_replay

    def spy(trace, policy, cap, config, **kw):
        seen.append(config)
        return real(trace, policy, cap, config, **kw)

    monkeypatch.setattr(summary, "run_replay", spy)
    assert main(["policy", "replay", str(path), "-p", "lru,fifo", "-c", "2000,3000", "--tp", "2", "--kv-dtype", "fp8",
                 "--max-num-seqs", "64", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(seen) == 4 and all(c is seen[0] for c in seen)
    cfg = seen[0]
    assert isinstance(cfg, ReplayConfig) and cfg.max_num_seqs == 64 and cfg.capacities == "2000,3000"
    assert cfg.model.tensor_parallel == 2 and cfg.model.kv_dtype == "fp8"
    assert doc["engine"]["max_num_seqs"] == 64
