"""`policy simulate` streams a large trace on its own (policies/engine/autostream.py), with the
hits of the whole-trace replay, and holds the whole trace when asked to or when an option needs
it. The bars are lowered here (monkeypatched) so a small file counts as large."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sitsprof.policies.engine import autostream
from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl
from sitsprof.policies.traces.oracle import write_oracle_general

SAYS = "streaming it"


@pytest.fixture(scope="module")
def oracle_file(tmp_path_factory):
    rng = np.random.default_rng(5)
    ids = (rng.zipf(1.3, 6000) % 900).astype(np.int64) * 7919 + 3
    return write_oracle_general(tmp_path_factory.mktemp("auto") / "t.oracleGeneral", ids)


@pytest.fixture(scope="module")
def mooncake_file(tmp_path_factory):
    return write_mooncake_jsonl(generate_requests(seed=3, duration_s=30.0), tmp_path_factory.mktemp("m") / "w.jsonl")


@pytest.fixture
def low_bars(monkeypatch):
    monkeypatch.setattr(autostream, "AUTO_ORACLE_REFS", 1000)
    monkeypatch.setattr(autostream, "AUTO_LINE_REFS", 1000)


def _hits(out: str) -> list:
    return [(r["policy"], r["capacity"], r["hits"]) for r in json.loads(out)["results"]]


def test_a_large_oracle_trace_streams_with_the_whole_replays_hits(cli, oracle_file, low_bars):
    args = ("policy", "simulate", str(oracle_file), "-p", "lru,arc,belady", "-c", "50,300", "--json")
    code, streamed, err = cli(*args)
    assert code == 0, err
    assert SAYS in err and "6,000 references" in err and "--no-stream" in err
    assert "cost" not in json.loads(streamed)["results"][0]["extra"]
    code, whole, err = cli(*args, "--no-stream")
    assert code == 0 and SAYS not in err
    assert "cost" in json.loads(whole)["results"][0]["extra"]
    assert _hits(streamed) == _hits(whole) and len(_hits(whole)) == 6
    code, asked, err = cli(*args, "--stream")
    assert code == 0 and SAYS not in err and _hits(asked) == _hits(whole)


def test_small_files_and_whole_trace_options_hold_the_trace(cli, oracle_file, tmp_path, monkeypatch):
    base = ("policy", "simulate", str(oracle_file), "-p", "lru", "-c", "50", "--json")
    code, _, err = cli(*base)  # the real bar: 6,000 records are not large
    assert code == 0 and SAYS not in err
    monkeypatch.setattr(autostream, "AUTO_ORACLE_REFS", 1000)
    for extra in (["--events", str(tmp_path / "e.jsonl")], ["--jobs", "2"], ["--skip-bad-lines"],
                  ["-p", "sits", "--threshold"]):
        code, out, err = cli(*base, *extra)
        assert code == 0, (extra, err)
        assert SAYS not in err, extra
        assert "cost" in json.loads(out)["results"][0]["extra"], extra


def test_jsonl_streams_only_when_every_policy_streams_from_lines(cli, mooncake_file, low_bars):
    code, streamed, err = cli("policy", "simulate", str(mooncake_file), "-p", "lru,s3fifo", "-c", "10%", "--json")
    assert code == 0 and SAYS in err and "about" in err
    code, whole, err = cli("policy", "simulate", str(mooncake_file), "-p", "lru,s3fifo", "-c", "10%", "--json",
                           "--no-stream")
    assert code == 0 and _hits(streamed) == _hits(whole)
    code, _, err = cli("policy", "simulate", str(mooncake_file), "-p", "lru,belady", "-c", "10%", "--json")
    assert code == 0 and SAYS not in err  # belady needs next uses a JSONL stream does not give


def test_estimates_and_bars():
    assert autostream.estimated_references("-", "oracle") is None
    assert autostream.whole_trace_options("oracle", reading={"block_tokens": 16}) == ["--block-tokens"]
    assert autostream.whole_trace_options("mooncake", reading={"block_tokens": 16}) == []
    assert autostream.whole_trace_options("mooncake", reading={"sort_by_time": True}) == ["--sort-by-time"]


def test_one_blas_thread_before_numpy_where_the_run_streams_or_may(tmp_path):
    """autostream.before_numpy, in a fresh interpreter (numpy not loaded yet): OPENBLAS_NUM_THREADS=1
    for --stream, and without a flag for a file of 4M oracleGeneral records' size (a sparse file
    here); not for --no-stream, a small file, or a thread count already set."""
    import os
    import subprocess
    import sys

    big, small = tmp_path / "big.bin", tmp_path / "small.bin"
    with open(big, "wb") as fh:
        fh.truncate(autostream.AUTO_ORACLE_REFS * autostream.ORACLE_RECORD_BYTES)
    small.write_bytes(b"\0" * 240)
    code = ("import os, sys; from sitsprof.policies.engine.autostream import before_numpy\n"
            "flag = {'none': None, 'stream': True, 'no-stream': False}[sys.argv[2]]\n"
            "said = before_numpy(sys.argv[1], flag)\n"
            "import numpy\n"
            "print(said, os.environ.get('OPENBLAS_NUM_THREADS'))")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")}

    def run(path, flag, **extra):
        out = subprocess.run([sys.executable, "-c", code, str(path), flag], env={**env, **extra},
                             capture_output=True, text=True, check=True)
        return out.stdout.split()

    assert run(big, "none") == ["True", "1"]
    assert run(small, "stream") == ["True", "1"]
    assert run(big, "no-stream") == ["False", "None"]
    assert run(small, "none") == ["False", "None"]
    assert run(big, "none", OPENBLAS_NUM_THREADS="2") == ["False", "2"]
