"""`policy claims --under-load`: the brief's claims through the serving replay (policies/claims.py
`run_claims_under_load`). The block-level LRU count is the LRU kernel's hit ratio on the same
16-token references (an independent replay); each verdict is the claim's comparison of the
rows it sits beside; semantic shard is reported as not run, never given figures."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sitsprof.policies import claims
from sitsprof.policies.registry import get_policy
from sitsprof.policies.serving.reblock import reblock
from sitsprof.policies.traces.generator import generate_workload

RATES, POOLS = (1.0, 4.0), (0.05,)


@pytest.fixture(scope="module")
def small():
    return generate_workload(seed=5, duration_s=40.0)


@pytest.fixture(scope="module")
def doc(small):
    return claims.run_claims_under_load(small, name="generated", rates=RATES, pools=POOLS)


def _rows(claim, rate):
    return {r["policy"]: r for r in claim["rows"] if r["rate_scale"] == rate}


def test_block_level_lru_is_the_kernel_on_the_same_references(small, doc):
    rb = reblock(small, 16)
    cap = int(rb.n_ids * POOLS[0])
    hit = np.zeros(len(rb.ref_ids), dtype=np.uint8)
    get_policy("lru").KERNEL(np.ascontiguousarray(rb.ref_ids), np.ascontiguousarray(rb.ref_offsets),
                             int(rb.ref_ids.max()) + 1, cap, hit)
    hit_claim = doc[0]
    assert hit_claim["under_load"]["capacities"] == [cap]
    for rate in RATES:
        row = _rows(hit_claim, rate)[claims.BLOCK_LRU]
        assert row["block_hit_ratio"] == pytest.approx(hit.mean())
        assert row["ttft_p95_ms"] is None  # not a serving run: no latency given


def test_verdicts_are_the_claimed_comparisons_of_the_rows(doc):
    hit_claim, lirs_claim = doc
    for rate in RATES:
        (v,) = [v for v in lirs_claim["verdicts"] if v["rate_scale"] == rate]
        rows = _rows(lirs_claim, rate)
        assert set(rows) == {"lirs", "lru", "lfu"}
        lirs, lru = rows["lirs"], rows["lru"]
        holds = (lirs["block_hit_ratio"] > lru["block_hit_ratio"] and lirs["ttft_p95_ms"] < lru["ttft_p95_ms"]
                 and lirs["output_tokens_per_s"] > lru["output_tokens_per_s"])
        assert v["verdict"] == (claims.HOLDS if holds else claims.FAILS)
        (h,) = [v for v in hit_claim["verdicts"] if v["rate_scale"] == rate]
        rows = _rows(hit_claim, rate)
        assert rows["semantic-shard"]["block_hit_ratio"] is None and "not run" in rows["semantic-shard"]["note"]
        prefix_beats_blocks = rows[claims.PREFIX]["block_hit_ratio"] > rows[claims.BLOCK_LRU]["block_hit_ratio"]
        assert h["verdict"] == (claims.HOLDS if prefix_beats_blocks else claims.FAILS)
        assert [c["holds"] for c in h["checks"]][0] is None  # semantic shard: not measured
        # the prefix row is the engine's LRU replay, the same one the LIRS claim compares
        assert rows[claims.PREFIX]["block_hit_ratio"] == _rows(lirs_claim, rate)["lru"]["block_hit_ratio"]


def test_load_shows_in_the_rows(doc):
    lirs_claim = doc[1]
    for p in ("lru", "lirs", "lfu"):
        a, b = _rows(lirs_claim, 1.0)[p], _rows(lirs_claim, 4.0)[p]
        assert b["ttft_p99_ms"] > a["ttft_p99_ms"], p


def test_cli_under_load_table_and_json(tmp_path, monkeypatch, small):
    from click.testing import CliRunner

    from sitsprof.cli.main import cli
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    real = claims.run_claims_under_load
    seen = {}

    def quick(trace, **kwargs):
        seen["calibration"] = kwargs.get("calibration")
        return real(trace, rates=RATES, pools=POOLS, progress=kwargs.get("progress"))

    monkeypatch.setattr(claims, "run_claims", lambda **kwargs: [])
    monkeypatch.setattr(claims, "run_claims_under_load", quick)
    path = write_mooncake_jsonl(generate_requests(seed=5, duration_s=40.0), tmp_path / "w.jsonl")
    runner = CliRunner()
    res = runner.invoke(cli, ["policy", "claims", "--mooncake", str(path), "--under-load", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [d["under_load"]["rates"] for d in doc] == [list(RATES)] * 2
    res = runner.invoke(cli, ["policy", "claims", "--mooncake", str(path), "--under-load"])
    assert res.exit_code == 0, res.output
    for text in ("vllm-prefix", "lru-blocks", "semantic-shard: not run", "x4, ", "TTFT P95 s"):
        assert text in res.output, text
