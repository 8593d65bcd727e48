"""`sitsprof policy simulate|mrc|list|generate` and `sitsprof demo`, through the real entry point."""
from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from sitsprof.policies.engine.capacity import parse_capacities
from sitsprof.policies.errors import CapacityError
from sitsprof.policies.sweep import simulate
from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "small.jsonl"
    write_mooncake_jsonl(generate_requests(seed=4, duration_s=150), path)
    return path


def test_simulate_json_equals_the_engine(cli, small_trace):
    code, out, err = cli("policy", "simulate", str(small_trace), "-p", "lru,fifo", "-c", "100,2k", "--json")
    assert code == 0, err
    doc = json.loads(out)
    trace = read_trace(small_trace)
    assert doc["trace"]["references"] == len(trace) and doc["trace"]["requests"] == trace.n_requests
    assert doc["trace"]["distinct_blocks"] == trace.n_blocks and doc["trace"]["format"] == "mooncake"
    got = [(r["policy"], r["capacity"]) for r in doc["results"]]
    assert got == [("lru", 100), ("lru", 2000), ("fifo", 100), ("fifo", 2000)]
    for row in doc["results"]:
        direct = simulate(trace, row["policy"], row["capacity"])
        assert row["hits"] == direct.hits
        assert row["block_hit_ratio"] == direct.block_hit_ratio
        assert row["prefix_hit_ratio"] == direct.prefix_hit_ratio
        assert row["evictions"] == direct.evictions
    assert err == ""  # no progress bar or warnings around machine-readable output


def test_the_json_is_versioned_and_reads_back(cli, small_trace, tmp_path):
    from sitsprof.policies.engine.results import FORMAT, PolicyResultsError, read_results

    code, out, err = cli("policy", "simulate", str(small_trace), "-p", "lru", "-c", "100", "--json")
    assert code == 0, err
    path = tmp_path / "r.json"
    path.write_text(out)
    doc = read_results(path)
    assert doc["format"] == FORMAT == "sitsprof.policy-results" and doc["format_version"] == 1
    assert [r["policy"] for r in doc["results"]] == ["lru"]
    legacy = tmp_path / "legacy.json"  # what earlier versions wrote: no marker, or a bare list
    legacy.write_text(json.dumps(doc["results"]))
    assert read_results(legacy) == doc["results"]
    for bad, message in (({**doc, "format_version": 2}, "format_version 2 is not one this sitsprof reads"),
                         ({**doc, "format": "other"}, "format 'other' is not"),
                         ({"results": [{"capacity": 1}]}, "at least 'policy'"), (3, "expected a list")):
        path.write_text(json.dumps(bad))
        with pytest.raises(PolicyResultsError, match=message) as caught:
            read_results(path)
        assert str(caught.value).startswith(f"{path}: ") and caught.value.exit_code == 2
    path.write_text("{not json")
    with pytest.raises(PolicyResultsError, match="not JSON"):
        read_results(path)


def test_results_module_imports_no_numba():
    """reports import the results format: it must load without numba or the policies."""
    import subprocess
    import sys

    code = ("import sys; import sitsprof.policies.engine.results; "
            "bad = sorted(m for m in sys.modules if m == 'numba' or m.startswith(('sitsprof.policies.engine.replay', "
            "'sitsprof.policies.classic', 'sitsprof.policies.adaptive', 'sitsprof.policies.registry'))); "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_simulate_real_mooncake_lru(cli, mooncake_path):
    code, out, _ = cli("policy", "simulate", str(mooncake_path), "-p", "LRU", "-c", "10000", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["trace"]["references"] == 288_500 and doc["trace"]["distinct_blocks"] == 182_790
    assert doc["results"][0]["block_hit_ratio"] == pytest.approx(0.2112, abs=0.001)  # libCacheSim 0.3.5's LRU


def test_simulate_csv_and_table(cli, small_trace):
    code, out, _ = cli("policy", "simulate", str(small_trace), "-p", "lru", "-c", "1%,50", "--csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    n_blocks = read_trace(small_trace).n_blocks
    assert [int(r["capacity"]) for r in rows] == [round(n_blocks / 100), 50]
    assert {"block_hit_ratio", "token_hit_ratio", "prefix_hit_ratio", "evictions"} <= set(rows[0])
    code, out, _ = cli("policy", "simulate", str(small_trace), "-p", "lru,fifo", "-c", "100")
    assert code == 0
    assert "block hit" in out and "prefix hit" in out and "fifo" in out and f"{n_blocks:,} distinct blocks" in out


def test_json_and_csv_together_is_a_usage_error(cli, small_trace):
    code, _, err = cli("policy", "simulate", str(small_trace), "--json", "--csv")
    assert code == 2 and "pick one" in err


@pytest.mark.parametrize(
    "args,message",
    [
        (["-c", "0"], "capacity 0 is not positive"),
        (["-c", "lots"], "capacity 'lots' is not a block count"),
        (["-p", "mru"], "unknown policy 'mru'"),
    ],
)
def test_bad_options_are_one_line_errors(cli, small_trace, args, message):
    code, out, err = cli("policy", "simulate", str(small_trace), *args, "--json")
    assert code == 2 and out == ""
    assert err.startswith("sitsprof: error: ") and message in err and err.count("\n") == 1


def test_bad_trace_line_exit_2_then_skip(tmp_path, cli):
    good = '{"timestamp": 0, "input_length": 900, "output_length": 3, "hash_ids": [1, 2]}'
    path = tmp_path / "t.jsonl"
    path.write_text(f"{good}\n{good}\n{{oops\n{good}\n" + good.replace("[1, 2]", "[1, -2.5]") + "\n")
    code, out, err = cli("policy", "simulate", str(path), "-p", "lru", "-c", "10", "--json")
    assert code == 2 and out == ""
    assert err == f"sitsprof: error: {path}:3: not valid JSON (Expecting property name enclosed in double quotes)\n"

    code, out, err = cli("policy", "simulate", str(path), "-p", "lru", "-c", "10", "--json", "--skip-bad-lines")
    assert code == 0
    doc = json.loads(out)
    assert doc["trace"]["skipped_lines"] == 2 and doc["trace"]["requests"] == 3
    assert doc["trace"]["skipped_examples"][1].startswith(f"{path}:5: hash_ids holds a non-integer id -2.5")
    assert "skipped 2 bad line(s)" in err
    assert doc["results"][0]["hits"] == 4  # requests 2 and 3 hit both blocks


def test_missing_and_empty_trace(tmp_path, cli):
    code, _, err = cli("policy", "simulate", str(tmp_path / "none.jsonl"))
    assert code == 2 and "none.jsonl: no such file" in err
    empty = tmp_path / "empty.csv"
    empty.write_text("timestamp,obj_id\n")
    code, _, err = cli("policy", "mrc", str(empty))
    assert code == 2 and "empty trace" in err


def test_oracle_format_flag(tmp_path, cli):
    from sitsprof.policies.traces.oracle import write_oracle_general

    ids = np.random.default_rng(0).zipf(1.3, size=3_000) % 500
    path = write_oracle_general(tmp_path / "z.dat", ids)
    code, out, err = cli("policy", "simulate", str(path), "--format", "oracle", "-p", "lru", "-c", "50", "--json")
    assert code == 0, err
    assert json.loads(out)["results"][0]["hits"] == simulate(ids, "lru", 50).hits


def test_mrc_json_matches_lru_simulation(cli, small_trace):
    code, out, err = cli("policy", "mrc", str(small_trace), "--points", "4", "--json")
    assert code == 0, err
    points = json.loads(out)["curves"][0]["points"]  # the lru curve; belady (headroom) follows
    trace = read_trace(small_trace)
    caps = [p["capacity"] for p in points]
    assert len(points) == 4 and caps == sorted(caps) and caps[-1] == trace.n_blocks
    ratios = [p["hit_ratio"] for p in points]
    assert ratios == sorted(ratios)
    for p in points[:2]:
        assert p["hit_ratio"] == pytest.approx(simulate(trace, "lru", p["capacity"]).block_hit_ratio, abs=1e-12)
        assert p["miss_ratio"] == pytest.approx(1 - p["hit_ratio"])
    code, out, _ = cli("policy", "mrc", str(small_trace), "--points", "2")
    assert code == 0 and "hit ratio" in out and f"{trace.n_blocks:,}" in out


def test_parse_capacities():
    assert parse_capacities("1000, 10k,2M", 10) == [1000, 10_000, 2_000_000]
    assert parse_capacities("10%,50%,5", 200) == [20, 100, 5]
    assert parse_capacities("0.1%,1,1", 100) == [1]  # at least one block, repeats dropped
    for bad in ("", "-5", "1e3", "3.5", "5kb"):
        with pytest.raises(CapacityError):
            parse_capacities(bad, 100)


def test_list_and_generate(tmp_path, cli):
    from sitsprof.policies.registry import policy_names

    code, out, _ = cli("policy", "list")
    assert code == 0 and all(name in out for name in policy_names())
    out_path = tmp_path / "w.jsonl"
    code, out, _ = cli("policy", "generate", str(out_path), "--seed", "2", "--duration", "60")
    assert code == 0
    assert read_trace(out_path).n_requests == len(generate_requests(seed=2, duration_s=60))
    assert "wrote" in out


def test_demo_writes_results(tmp_path, cli):
    out_dir = tmp_path / "demo"
    code, out, err = cli("demo", "--out", str(out_dir), "--duration", "120", "-p", "lru,s3fifo")
    assert code == 0, err
    doc = json.loads((out_dir / "results.json").read_text())
    assert doc["policies"] == ["lru", "s3fifo"] and len(doc["capacities"]) == 5
    assert len(doc["results"]) == 10
    assert set(doc["workload"]["stacks"]) == {"qwen2-72b", "deepseek-v2", "phi-3-mini"}
    row = doc["results"][0]
    per_stack = [row[f"hit_ratio[{s}]"] for s in ("qwen2-72b", "deepseek-v2", "phi-3-mini")]
    assert all(0 <= r <= 1 for r in per_stack)
    with open(out_dir / "results.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 10
    replay = read_trace(out_dir / "workload.jsonl")
    assert len(replay) == doc["workload"]["references"]
    # the saved workload replays to the same figures
    again = simulate(replay, "lru", doc["capacities"][0])
    assert again.hits == row["hits"]
    assert "s3fifo" in out and "results.json" in out


def test_progress_bar_on_a_terminal_only(small_trace):
    from rich.console import Console

    from sitsprof.cli.console import run_with_progress

    trace = read_trace(small_trace)
    screen = io.StringIO()
    tty = Console(file=screen, force_terminal=True, width=100)
    shown = run_with_progress(trace, ["lru", "fifo"], [50, 500], show=True, console=tty)
    assert "done fifo @ 500" in screen.getvalue() and "4/4" in screen.getvalue()
    pipe = io.StringIO()
    quiet = run_with_progress(trace, ["lru", "fifo"], [50, 500], show=True, console=Console(file=pipe))
    assert pipe.getvalue() == ""
    assert [r.hits for r in shown] == [r.hits for r in quiet] == [
        simulate(trace, p, c).hits for p in ("lru", "fifo") for c in (50, 500)
    ]
