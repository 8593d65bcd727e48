"""`sitsprof policy validate` on the 12-row excerpt of NVIDIA's silicon table: the rows it
picks, the measured figures exactly the CSV's, the unmodellable rows with their reason,
AIConfigurator's estimates the shipped file's, the KV pool from memory by hand."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from sitsprof.policies.serving import validate as v
from sitsprof.policies.serving.silicon import read_silicon

EXCERPT = Path(__file__).parent / "data" / "silicon_excerpt.csv"


@pytest.fixture(scope="module")
def doc():
    from click.testing import CliRunner

    from sitsprof.cli.main import cli

    res = CliRunner().invoke(cli, ["policy", "validate", "--silicon", str(EXCERPT), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_rows_are_the_vllm_hopper_rows_with_the_csv_figures(doc):
    with EXCERPT.open(newline="") as fh:
        raw = {r["id"]: r for r in csv.DictReader(fh)}
    want = [i for i, r in raw.items()
            if r["backend"] == "vllm" and r["mode"] == "agg" and r["system"] in ("h100_sxm", "h200_sxm")]
    assert [r["id"] for r in doc["rows"]] == want and len(want) == 8
    for r in doc["rows"]:
        x = raw[r["id"]]
        assert r["measured_ttft_ms"] == float(x["silicon_ttft_ms"])
        assert r["measured_tpot_ms"] == float(x["silicon_tpot_ms"])
        assert (r["backend"], r["system"], r["model"], r["isl"], r["osl"], r["concurrency"], r["tp"],
                r["precision"]) == (x["backend"], x["system"], x["model_path"], int(x["isl"]), int(x["osl"]),
                                    int(x["batch_size"]), int(x["tp_size"]), x["precision"])


def test_unmodellable_rows_say_why_and_predict_nothing(doc):
    kimi = [r for r in doc["rows"] if r["model"] == "moonshotai/Kimi-K2.5"]
    assert len(kimi) == 1 and "int4" in kimi[0]["reason"] and "predicted_tpot_ms" not in kimi[0]
    assert doc["summary"]["matched"] == 7 and doc["summary"]["unmodellable"] == 1
    rows = {r.id: r for r in read_silicon(EXCERPT)}
    reasons = {r.backend + "/" + r.mode + "/" + r.system: v.unmodellable(r) for r in rows.values()}
    assert "only vLLM" in reasons["sglang/agg/h200_sxm"] and "only vLLM" in reasons["trtllm/agg/h100_sxm"]
    assert "disaggregated" in reasons["vllm/disagg/gb200"] and "no figures" in reasons["vllm/agg/b200_sxm"]


def test_predicted_rows_carry_shares_and_aic(doc):
    aic = v.read_aic()
    for r in doc["rows"]:
        if "reason" in r:
            continue
        assert r["predicted_ttft_ms"] > 0 and r["predicted_tpot_ms"] > 0
        assert abs(sum(r["term_share"].values()) - 1.0) < 1e-9
        assert r["ttft_error"] == pytest.approx(r["predicted_ttft_ms"] / r["measured_ttft_ms"] - 1)
        assert (r["aic_ttft_ms"], r["aic_tpot_ms"]) == aic[r["id"]][:2]
        # the profiled step model prices the TP all-reduce, and only where there is TP
        assert (r["term_share"]["allreduce"] > 0) == (r["tp"] > 1), r["id"]
        assert "per-op profile" in r["latency_model"]


def test_kv_pool_from_memory_by_hand():
    from sitsprof.policies.cost.models import from_hf_config

    spec = from_hf_config(v.config_path("meta-llama/Llama-3.1-70B"), dtype="fp8", tp=8)
    # 80 layers x 8 KV heads x 128 x K,V x 2 bytes / 8 GPUs = 40 KiB a token a GPU
    assert spec.kv_bytes_per_token_per_gpu == 80 * 8 * 128 * 2 * 2 / 8
    free = 0.9 * 143771 * 2**20 - spec.weight_bytes_per_gpu - 4 * 2**30
    assert v.pool_blocks(spec, v.SYSTEMS["h200_sxm"]) == int(free // (40 * 1024 * 16))


def test_bad_silicon_is_one_line(tmp_path, capsys):
    from sitsprof.cli.main import main

    assert main(["policy", "validate", "--silicon", str(tmp_path / "none.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such file" in err[0]


@pytest.mark.parametrize("content, says", [
    (b"\xb2\x00binary", "not a silicon table"),                       # not UTF-8
    (b"id," + b"x" * 200_000 + b"\n", "not a silicon table"),         # a field past csv's limit
    (None, "column isl is missing (a short row)"),                    # a row cut short
    ("inf", "column isl is 'inf', not a number"),                     # inf where an int belongs
])
def test_damaged_silicon_is_one_line(tmp_path, capsys, content, says):
    """Whatever the file holds, one line and exit 2, never an internal error."""
    from sitsprof.cli.main import main

    bad = tmp_path / "bad.csv"
    with EXCERPT.open(newline="", encoding="utf-8") as fh:
        header, row = list(csv.reader(fh))[:2]
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        if content is None:
            row = row[:5]
        else:
            row[header.index("isl")] = content
        with bad.open("w", newline="", encoding="utf-8") as fh:
            csv.writer(fh).writerows([header, row])
    assert main(["policy", "validate", "--silicon", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_bench_run_step_budget_rules(doc):
    """The step token budget: AIConfigurator's generator rule (batch + ISL + 1500) or vLLM's
    default 8192; each replayed row says the budget it ran with, the shipped rule's."""
    from sitsprof.policies.errors import SiliconTableError

    rows = {r.id: r for r in read_silicon(EXCERPT)}
    for r in doc["rows"]:
        if "reason" in r:
            continue
        row = rows[r["id"]]
        assert v.BenchRun(batched_tokens="aic").max_num_batched_tokens(row) == row.concurrency + row.isl + 1500
        assert v.BenchRun(batched_tokens="vllm").max_num_batched_tokens(row) == 8192
        assert r["max_num_batched_tokens"] == v.BENCH_RUN.max_num_batched_tokens(row)
    assert doc["bench"]["batched_tokens"] == v.BENCH_RUN.batched_tokens
    with pytest.raises(SiliconTableError, match="choose aic or vllm"):
        v.BenchRun(batched_tokens="sglang").max_num_batched_tokens(next(iter(rows.values())))


def test_ttft_statistic_leaves_out_the_warmup_rounds():
    """warmup_rounds 0 times every request (aiperf's timed phase starts with every client at once):
    the TTFT is the mean over all of them; 1 leaves each client's first request out of the same
    replay (same requests, same every-request mean, another TTFT)."""
    from sitsprof.calibration import load_calibration

    row = next(r for r in read_silicon(EXCERPT) if v.unmodellable(r) is None and r.model == "Qwen/Qwen3-32B")
    cal, prof = load_calibration(None), v.read_profiles()
    every = v.replay_row(row, cal, None, 0, prof, bench=v.BenchRun(rounds=2, warmup_rounds=0, frontend_delay_s=1e-3,
                                                                    batched_tokens="aic"))
    assert every["predicted_ttft_ms"] == pytest.approx(every["predicted_ttft_every_request_ms"], rel=1e-12)
    later = v.replay_row(row, cal, None, 0, prof, bench=v.BenchRun(rounds=2, warmup_rounds=1, frontend_delay_s=1e-3,
                                                                    batched_tokens="aic"))
    assert later["predicted_ttft_every_request_ms"] == every["predicted_ttft_every_request_ms"]
    assert later["predicted_ttft_ms"] != every["predicted_ttft_ms"]
