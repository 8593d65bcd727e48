"""Streaming replay of request files (policies/engine/stream_lines.py): the in-memory replay's figures.

The serving replay's trace formats (Mooncake, Bailian JSONL) read in chunks of 1, 7, 1000
requests and whole, every policy a request file can stream at several capacities, against
`simulate` on the whole trace `read_trace` gives: hits, evictions, the most blocks resident,
block, token and prefix hit ratios and the hits of every request. Bad lines are refused (or
skipped) as the in-memory reader does, the 64-bit id rule holds across chunks, and the policies
it cannot serve are refused with the reason; then the CLI's `--stream` on a Mooncake file.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sitsprof.policies.engine.stream import StreamError
from sitsprof.policies.engine.stream_lines import count_distinct_lines, line_streamable, stream_simulate_lines
from sitsprof.policies.errors import TraceFormatError
from sitsprof.policies.registry import get_policy, policy_names
from sitsprof.policies.sweep import simulate
from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

SITSPROF = Path(sys.executable).with_name("sitsprof")
LINE_POLICIES = [get_policy(n) for n in policy_names() if line_streamable(get_policy(n))]
CAPACITIES = [3, 60, 700, 100_000]
FIGURES = ("hits", "evictions", "max_resident", "block_hit_ratio", "token_hit_ratio", "prefix_hit_ratio")


@pytest.fixture(scope="module")
def mooncake(tmp_path_factory) -> Path:
    return write_mooncake_jsonl(generate_requests(seed=5, duration_s=120),
                                tmp_path_factory.mktemp("lines") / "generated.jsonl")


@pytest.fixture(scope="module")
def bailian(tmp_path_factory) -> Path:
    """Bailian lines (stamps in seconds, unsigned ids up to 2**64 - 1, its extra fields)."""
    rng = np.random.default_rng(9)
    pool = [int(x) for x in rng.integers(0, 2**63, 300, dtype=np.int64)] + [2**64 - 1 - k for k in range(40)]
    lines = []
    for i in range(600):
        n = int(rng.integers(1, 9))
        ids = [pool[int(j)] for j in rng.integers(0, len(pool), n)]
        lines.append(json.dumps({"chat_id": i, "parent_chat_id": -1, "timestamp": 0.25 * i,
                                 "input_length": 16 * n - int(rng.integers(0, 16)), "output_length": 20,
                                 "type": "text", "turn": 1, "hash_ids": ids}))
    path = tmp_path_factory.mktemp("lines") / "bailian.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _same(path: Path, fmt: str, chunk: int, **read) -> None:
    trace = read_trace(path, format=fmt, **read)
    got, summary = stream_simulate_lines(path, fmt, LINE_POLICIES, CAPACITIES, chunk_requests=chunk, keep_hits=True,
                                         **read)
    assert summary["references"] == len(trace.block) and summary["distinct_blocks"] == trace.n_blocks
    assert summary["requests"] == len(got[0].request_hits)
    k = 0
    for module in LINE_POLICIES:
        for capacity in CAPACITIES:
            want = simulate(trace, module, capacity)
            streamed = got[k]
            k += 1
            assert (streamed.policy, streamed.capacity) == (want.policy, want.capacity)
            for name in FIGURES:
                assert getattr(streamed, name) == getattr(want, name), (module.NAME, capacity, chunk, name)
            assert np.array_equal(np.asarray(streamed.request_hits), np.asarray(want.request_hits))


@pytest.mark.parametrize("chunk", [1, 7, 1000, 10**9], ids=lambda c: f"chunk{c if c < 10**9 else 'whole'}")
def test_mooncake_streamed_equals_in_memory(mooncake, chunk):
    _same(mooncake, "mooncake", chunk)


@pytest.mark.parametrize("chunk", [7, 10**9])
def test_bailian_streamed_equals_in_memory(bailian, chunk):
    _same(bailian, "bailian", chunk)


def test_bundled_mooncake_prefix_and_block_size(tmp_path):
    """The real conversation trace's first 2,000 requests, at another block size too."""
    import lzma

    head = tmp_path / "head.jsonl"
    bundled = Path(__file__).resolve().parents[1] / "policies" / "data" / "mooncake_conversation.jsonl.xz"
    with lzma.open(bundled, "rt") as fh:
        head.write_text("".join(line for _, line in zip(range(2000), fh)))
    _same(head, "mooncake", 333)
    _same(head, "mooncake", 1000, block_tokens=128)


def test_bad_lines_refused_or_skipped_as_in_memory(mooncake, tmp_path):
    lines = mooncake.read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines[:50] + ['{"timestamp": 5, "input_length": 3}'] + lines[50:]) + "\n")
    with pytest.raises(TraceFormatError) as memory:
        read_trace(broken, format="mooncake")
    with pytest.raises(TraceFormatError) as streamed:
        stream_simulate_lines(broken, "mooncake", LINE_POLICIES[:1], [10], chunk_requests=7)
    assert str(streamed.value) == str(memory.value) and ":51" in str(streamed.value)
    _same(broken, "mooncake", 7, skip_bad_lines=True)
    _, summary = stream_simulate_lines(broken, "mooncake", LINE_POLICIES[:1], [10], skip_bad_lines=True)
    assert summary["skipped_lines"] == read_trace(broken, format="mooncake", skip_bad_lines=True).skipped_lines == 1


def test_signed_and_unsigned_ids_in_different_chunks_are_refused(tmp_path):
    """hash_id_array's rule is for the whole trace: negative ids in one chunk and ids of 2**63
    and up in a later one could collide as bit patterns, so both readers refuse the file."""
    path = tmp_path / "mixed.jsonl"
    rows = [{"timestamp": i, "input_length": 512, "output_length": 1, "hash_ids": [-(i + 1)]} for i in range(5)]
    rows += [{"timestamp": 10 + i, "input_length": 512, "output_length": 1, "hash_ids": [2**64 - 1 - i]}
             for i in range(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TraceFormatError, match="mix negative ids with ids of 2"):
        read_trace(path, format="mooncake")
    with pytest.raises(TraceFormatError, match="mix negative ids with ids of 2"):
        stream_simulate_lines(path, "mooncake", LINE_POLICIES[:1], [2], chunk_requests=3)


def test_policies_it_cannot_serve_and_formats_it_cannot_read(mooncake, tmp_path):
    for name, reason in (("belady", "each reference's next use"), ("sits", "the trace's time span"),
                         ("semantic-shard", "the trace's time span")):
        with pytest.raises(StreamError, match=f"policy '{name}' reads {reason}"):
            stream_simulate_lines(mooncake, "mooncake", [get_policy(name)], [10])
    csv = tmp_path / "t.csv"
    csv.write_text("timestamp,obj_id\n0,1\n")
    with pytest.raises(StreamError, match="reads oracleGeneral, Mooncake and Bailian traces"):
        stream_simulate_lines(csv, "csv", LINE_POLICIES[:1], [10])
    assert count_distinct_lines(mooncake, "mooncake", chunk_requests=9) == read_trace(mooncake).n_blocks


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(SITSPROF), *args], capture_output=True, text=True, timeout=300)


def test_cli_stream_on_a_mooncake_file(mooncake):
    streamed = _cli("policy", "simulate", str(mooncake), "--stream", "-p", "all", "-c", "100,10%", "--json")
    assert streamed.returncode == 0, streamed.stderr
    assert "sitsprof: --stream leaves out sits, semantic-shard, belady (they need the whole trace)" in streamed.stderr
    doc = json.loads(streamed.stdout)
    assert doc["trace"]["streamed"] and doc["trace"]["format"] == "mooncake"
    memory = json.loads(_cli("policy", "simulate", str(mooncake), "-p", ",".join(m.NAME for m in LINE_POLICIES),
                             "-c", "100,10%", "--json").stdout)
    pick = ("policy", "capacity", "hits", "evictions", "block_hit_ratio", "token_hit_ratio", "prefix_hit_ratio")
    assert [{k: r[k] for k in pick} for r in doc["results"]] == [{k: r[k] for k in pick} for r in memory["results"]]
    refused = _cli("policy", "simulate", str(mooncake), "--stream", "-p", "belady", "-c", "100")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        "sitsprof: error: policy 'belady' reads each reference's next use, which a request file streamed in "
        "chunks does not give; replay it without --stream, or leave it out"]


def test_out_of_order_requests_counted_as_in_memory_and_sort_refused(mooncake, tmp_path):
    from sitsprof.policies.traces.timing import TraceWarning, out_of_order

    lines = mooncake.read_text().splitlines()
    rng = np.random.default_rng(2)
    for k in rng.choice(len(lines) - 1, 40, replace=False):  # swap neighbours: some arrive early
        lines[k], lines[k + 1] = lines[k + 1], lines[k]
    shuffled = tmp_path / "shuffled.jsonl"
    shuffled.write_text("\n".join(lines) + "\n")
    with pytest.warns(TraceWarning, match="arrive earlier than the one before them"):
        want = out_of_order(read_trace(shuffled, format="mooncake"))
    assert want > 0
    for chunk in (1, 5, 10**9):
        _, summary = stream_simulate_lines(shuffled, "mooncake", LINE_POLICIES[:1], [10], chunk_requests=chunk)
        assert summary["out_of_order"] == want
    with pytest.warns(TraceWarning):
        _same(shuffled, "mooncake", 5)
    out = _cli("policy", "simulate", str(shuffled), "--stream", "-p", "lru", "-c", "50")
    assert out.returncode == 0 and f"{want:,} request(s) arrive earlier than the one before them" in out.stderr
    refused = _cli("policy", "simulate", str(shuffled), "--stream", "--sort-by-time", "-p", "lru", "-c", "50")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        "sitsprof: error: --sort-by-time reorders the whole trace, which --stream never holds; drop one of them"]


def test_cli_stream_reads_with_the_block_size_given(mooncake):
    args = ("policy", "simulate", str(mooncake), "-p", "lru,arc", "-c", "200", "--block-tokens", "64", "--json")
    streamed, memory = (json.loads(_cli(*args, *extra).stdout)["results"] for extra in (("--stream",), ()))
    assert [r["token_hit_ratio"] for r in streamed] == [r["token_hit_ratio"] for r in memory]
    default = json.loads(_cli(*args[:-3], "--json", "--stream").stdout)["results"]
    assert [r["token_hit_ratio"] for r in default] != [r["token_hit_ratio"] for r in streamed]


def test_cli_stream_names_a_missing_file_or_a_folder(tmp_path):
    for path, problem in ((tmp_path / "nope.jsonl", "no such file"), (tmp_path / "gone.oracleGeneral", "no such file"),
                          (tmp_path, "is a directory, not a trace file")):
        out = _cli("policy", "simulate", str(path), "--stream", "-p", "lru", "-c", "10%")
        assert out.returncode == 2 and out.stdout == ""
        assert out.stderr.strip().splitlines() == [f"sitsprof: error: {path}: {problem}"]
