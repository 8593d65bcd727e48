"""The traces people have (issue 13): Bailian/Qwen JSONL, unsigned 64-bit block hashes,
nanosecond-string timestamps, --block-tokens, zstd and stdin, out-of-order timestamps and
--sort-by-time, time units declared or guessed (--time-unit), and oracleGeneral validation.

References are independent of the code under test: a plain-Python LRU for the token-weighted
hit ratio, hand-built records for the oracleGeneral rules (next_access_vtime counted from 0,
as our writer does, and from 1, as libCacheSim's traceConv does).
"""
from __future__ import annotations

import io
import json
import os
import sys
import warnings
from collections import OrderedDict

import numpy as np
import pytest

from sitsprof.policies.errors import TraceFormatError
from sitsprof.policies.traces import opening
from sitsprof.policies.traces.detect import detect_format, read_trace
from sitsprof.policies.traces.oracle import ORACLE_DTYPE, write_oracle_general
from sitsprof.policies.traces.timing import TraceWarning, guess_unit

zstandard = pytest.importorskip("zstandard")

#: The record of the Bailian README (alibaba-edu/qwen-bailian-usagetraces-anon), ids shortened.
README_RECORD = {"chat_id": 159, "parent_chat_id": 55, "timestamp": 61.114, "input_length": 521,
                 "output_length": 132, "type": "text", "turn": 2, "hash_ids": list(range(1089, 1089 + 33))}


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _bailian_rows(seed=5, n=300):
    """Requests of 16-token blocks sharing prefixes: chats whose turns extend the previous prompt."""
    rng = np.random.default_rng(seed)
    rows, chats, next_id, t = [], [], 0, 0.0
    for chat_id in range(n):
        t += float(rng.exponential(0.5))
        if chats and rng.random() < 0.6:
            parent = chats[int(rng.integers(len(chats)))]
            ids = parent["hash_ids"] + list(range(next_id, next_id + int(rng.integers(1, 6))))
            turn, parent_id = parent["turn"] + 1, parent["chat_id"]
        else:
            ids = list(range(next_id, next_id + int(rng.integers(1, 12))))
            turn, parent_id = 1, -1
        next_id = max(ids) + 1
        row = {"chat_id": chat_id, "parent_chat_id": parent_id, "timestamp": round(t, 3),
               "input_length": 16 * len(ids) - int(rng.integers(0, 16)), "output_length": int(rng.integers(1, 300)),
               "type": ["text", "search", "image", "file"][int(rng.integers(4))], "turn": turn, "hash_ids": ids}
        rows.append(row)
        chats.append(row)
    return rows


def _lru_token_ratio(rows, capacity, block_tokens):
    """Token-weighted LRU hit ratio, plain Python: every block carries block_tokens tokens but
    a request's last, which carries input - block_tokens*(n-1) in [1, block_tokens]."""
    cache, hit, total = OrderedDict(), 0, 0
    for row in rows:
        ids = row["hash_ids"]
        for k, h in enumerate(ids):
            tokens = block_tokens if k < len(ids) - 1 else min(max(row["input_length"] - block_tokens * k, 1),
                                                                block_tokens)
            total += tokens
            if h in cache:
                hit += tokens
                cache.move_to_end(h)
            else:
                cache[h] = True
                if len(cache) > capacity:
                    cache.popitem(last=False)
    return hit / total


def _token_ratio(cli, path, capacity, *extra):
    code, out, err = cli("policy", "simulate", str(path), "-p", "lru", "-c", str(capacity), "--json", *extra)
    assert code == 0, err
    doc = json.loads(out)
    return doc["results"][0]["token_hit_ratio"], doc, err


# -- Bailian / Qwen --------------------------------------------------------------------------------
def test_bailian_readme_record_reads_with_its_meaning(tmp_path):
    path = _jsonl(tmp_path / "qwen_traceA_blksz_16.jsonl",
                  [README_RECORD, {**README_RECORD, "chat_id": 160, "parent_chat_id": -1, "turn": 1,
                                   "timestamp": 62.5, "type": "search", "hash_ids": [1089, 7]}])
    assert detect_format(path) == "bailian"
    trace = read_trace(path)
    assert trace.block_tokens == 16
    assert trace.n_requests == 2 and len(trace) == 35
    assert trace.time[0] == 61.114 and trace.time[-1] == 62.5  # seconds, as the format says
    assert trace.tokens[:33].tolist() == [16] * 32 + [521 - 16 * 32]
    assert trace.tenant_names == () and set(trace.tenant.tolist()) == {-1}  # type is a category, not a tenant
    assert trace.request_output_tokens.tolist() == [132, 132]
    assert trace.block[33] == trace.block[0]  # 1089 is one block


@pytest.mark.parametrize("change, needle", [
    ({"parent_chat_id": -2}, "parent_chat_id must be a chat id or -1"),
    ({"turn": "2"}, "turn must be an integer"),
    ({"hash_ids": [1, -5]}, "negative id -5"),
    ({"hash_ids": [1, 2**64]}, "beyond the unsigned 64-bit range"),
    ({"type": 3}, "type must be a string"),
])
def test_bailian_bad_fields_name_the_line(tmp_path, change, needle):
    path = _jsonl(tmp_path / "b.jsonl", [README_RECORD, {**README_RECORD, **change}])
    with pytest.raises(TraceFormatError, match=f"b.jsonl:2: .*{needle}"):
        read_trace(path)


def test_bailian_token_ratio_matches_plain_lru_and_block_tokens_fixes_mooncake(cli, tmp_path):
    """The token-weighted ratio at the trace's block size: Bailian's 16 by default; the same
    rows read as Mooncake (512) are wrong until --block-tokens 16 says the trace's size."""
    rows = _bailian_rows()
    want = _lru_token_ratio(rows, 200, 16)
    bailian = _jsonl(tmp_path / "q.jsonl", rows)
    got, doc, _ = _token_ratio(cli, bailian, 200)
    assert doc["trace"]["format"] == "bailian"
    assert got == pytest.approx(want, abs=1e-9)
    moon = _jsonl(tmp_path / "m.jsonl", [{k: r[k] for k in ("timestamp", "input_length", "output_length",
                                                            "hash_ids")} | {"timestamp": r["timestamp"] * 1000}
                                         for r in rows])
    wrong, _, _ = _token_ratio(cli, moon, 200)
    assert abs(wrong - want) > 0.01  # 512-token blocks: every last block weighs 1 token
    right, _, _ = _token_ratio(cli, moon, 200, "--block-tokens", "16")
    assert right == pytest.approx(want, abs=1e-9)


def test_block_tokens_applies_to_every_reader(tmp_path):
    ids = [3, 4, 3, 5]
    oracle = write_oracle_general(tmp_path / "t.oracleGeneral", ids)
    csv = tmp_path / "t.csv"
    csv.write_text("0,3\n1,4\n2,3\n3,5\n")
    for path in (oracle, csv, _jsonl(tmp_path / "q.jsonl", [README_RECORD])):
        assert read_trace(path, block_tokens=64).block_tokens == 64
    with pytest.raises(TraceFormatError, match="--block-tokens"):
        read_trace(csv, block_tokens=0)


# -- unsigned 64-bit hashes, nanosecond strings ---------------------------------------------------
def test_unsigned_64_bit_hash_ids_replay_like_small_ids(tmp_path):
    small = [{"timestamp": i, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2 + i % 3]}
             for i in range(30)]
    big_of = {1: 2**64 - 1, 2: 2**63, 3: 2**63 + 12345, 4: 7}
    big = [{**r, "hash_ids": [big_of[h] for h in r["hash_ids"]]} for r in small]
    a = read_trace(_jsonl(tmp_path / "small.jsonl", small))
    b = read_trace(_jsonl(tmp_path / "big.jsonl", big))
    assert np.array_equal(a.block, b.block) and a.n_blocks == b.n_blocks
    assert b.original_id.view(np.uint64)[:2].tolist() == [2**64 - 1, 2**63]
    mixed = _jsonl(tmp_path / "mixed.jsonl", [{**small[0], "hash_ids": [-1, 2**64 - 1]}])
    with pytest.raises(TraceFormatError, match="mix negative ids with ids of 2\\*\\*63"):
        read_trace(mixed)
    over = _jsonl(tmp_path / "over.jsonl", [{**small[0], "hash_ids": [2**64]}])
    with pytest.raises(TraceFormatError, match="over.jsonl:1: .*beyond the unsigned 64-bit range"):
        read_trace(over)


def test_nanosecond_string_timestamps(tmp_path):
    base = 1_717_000_000_123_456_789
    rows = [{"timestamp": str(base + k * 250_000_000), "input_length": 512, "output_length": 1, "hash_ids": [k]}
            for k in range(4)]
    trace = read_trace(_jsonl(tmp_path / "ns.jsonl", rows))
    assert np.allclose(np.diff(trace.time), 0.25, atol=1e-6)
    assert trace.time[0] == pytest.approx(base / 1e9)
    bad = _jsonl(tmp_path / "bad.jsonl", [{**rows[0], "timestamp": "12:00"}])
    with pytest.raises(TraceFormatError, match="bad.jsonl:1: timestamp must be a number, or nanoseconds"):
        read_trace(bad)


# -- zstd and stdin --------------------------------------------------------------------------------
def test_zstd_single_and_multi_frame_read_as_the_plain_file(tmp_path):
    plain = _jsonl(tmp_path / "q.jsonl", _bailian_rows(n=50))
    data = plain.read_bytes()
    one = tmp_path / "q.jsonl.zst"
    one.write_bytes(zstandard.ZstdCompressor().compress(data))
    many = tmp_path / "frames"  # no suffix: known by its first bytes; frames concatenated, as pzstd writes
    half = len(data) // 2
    frames = [zstandard.ZstdCompressor().compress(part) for part in (data[:half], data[half:])]
    many.write_bytes(b"".join(frames))
    want = read_trace(plain)
    for path in (one, many):
        assert detect_format(path) == "bailian"
        got = read_trace(path)
        assert np.array_equal(got.block, want.block) and np.array_equal(got.time, want.time)
    oracle = write_oracle_general(tmp_path / "t.oracleGeneral", [1, 2, 1, 3])
    packed = tmp_path / "t.oracleGeneral.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(oracle.read_bytes()))
    assert read_trace(packed).original_id.tolist() == [1, 2, 1, 3]


def test_zstd_without_the_package_is_one_line(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(json.dumps(README_RECORD).encode()))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import fails
    with pytest.raises(TraceFormatError, match="zstandard package is not installed.*pip install zstandard"):
        read_trace(path)


def _stdin(monkeypatch, data: bytes):
    monkeypatch.setattr(opening, "_stdin_copy", None)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_stdin_dash_reads_any_format_sniffed(cli, tmp_path, monkeypatch):
    rows = _bailian_rows(n=80)
    plain = _jsonl(tmp_path / "q.jsonl", rows)
    want, _, _ = _token_ratio(cli, plain, 50)
    _stdin(monkeypatch, zstandard.ZstdCompressor().compress(plain.read_bytes()))
    got, doc, err = _token_ratio(cli, "-", 50)
    assert got == want and doc["trace"]["format"] == "bailian"
    copy = opening._stdin_copy
    assert copy.name == "stdin" and copy.exists()
    opening._remove_stdin_copy()
    assert not copy.exists()
    _stdin(monkeypatch, write_oracle_general(tmp_path / "o.bin", [4, 5, 4]).read_bytes())
    assert read_trace("-").original_id.tolist() == [4, 5, 4]
    opening._remove_stdin_copy()


# -- arrival order ---------------------------------------------------------------------------------
def test_out_of_order_warns_with_the_count_and_sort_by_time_sorts(cli, tmp_path):
    rows = _bailian_rows(n=60)
    shuffled = list(rows)
    shuffled[10], shuffled[20] = shuffled[20], shuffled[10]  # 2 requests now arrive early
    shuffled[40], shuffled[41] = shuffled[41], shuffled[40]  # and 1 more
    path = _jsonl(tmp_path / "late.jsonl", shuffled)
    with pytest.warns(TraceWarning, match=r"3 request\(s\) arrive earlier .* --sort-by-time"):
        unsorted = read_trace(path)
    assert not np.all(np.diff(unsorted.time) >= 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)
        fixed = read_trace(path, sort_by_time=True)
        want = read_trace(_jsonl(tmp_path / "sorted.jsonl", rows))  # the same rows written in order
    for name in ("time", "request", "block", "original_id", "position", "tokens", "tenant", "request_output_tokens"):
        assert np.array_equal(np.asarray(getattr(fixed, name)), np.asarray(getattr(want, name))), name
    assert fixed.n_blocks == want.n_blocks
    code, out, err = cli("policy", "simulate", str(path), "-p", "lru", "-c", "50", "--json")
    assert code == 0 and "sitsprof: warning: " in err and "3 request(s) arrive earlier" in err
    code, out2, err2 = cli("policy", "simulate", str(path), "-p", "lru", "-c", "50", "--json", "--sort-by-time")
    assert code == 0 and "arrive earlier" not in err2
    _, out3, _ = cli("policy", "simulate", str(tmp_path / "sorted.jsonl"), "-p", "lru", "-c", "50", "--json")
    assert json.loads(out2)["results"][0]["hits"] == json.loads(out3)["results"][0]["hits"]


def test_ties_keep_file_order_when_sorting(tmp_path):
    rows = [{"timestamp": t, "input_length": 512, "output_length": 1, "hash_ids": [k]}
            for k, t in enumerate([5, 1, 1, 0, 5])]
    with pytest.warns(TraceWarning):
        assert read_trace(_jsonl(tmp_path / "t.jsonl", rows)).original_id.tolist() == [0, 1, 2, 3, 4]
    assert read_trace(tmp_path / "t.jsonl", sort_by_time=True).original_id.tolist() == [3, 1, 2, 0, 4]


# -- time units ------------------------------------------------------------------------------------
@pytest.mark.parametrize("stamps, unit", [
    (np.arange(0, 7200, 0.5), "s"),                         # two hours in seconds
    (np.arange(0, 7_200_000, 500), "ms"),                   # two hours in milliseconds
    (1.7e9 + np.arange(100.0), "s"),                        # epoch seconds
    (1.7e12 + np.arange(0, 1e5, 1000), "ms"),               # epoch milliseconds
    (1.7e18 + np.arange(0, 1e11, 1e9), "ns"),               # epoch nanoseconds
    (np.arange(0, 7.2e12, 1e9), "ns"),                      # two hours in nanoseconds
])
def test_guess_unit_by_magnitude(stamps, unit):
    assert guess_unit(stamps)[0] == unit


def test_csv_in_milliseconds_is_guessed_with_one_warning(cli, tmp_path):
    path = tmp_path / "ms.csv"
    path.write_text("".join(f"{1_700_000_000_000 + 250 * k},{k % 7}\n" for k in range(200)))
    with pytest.warns(TraceWarning, match="read as milliseconds, a guess .*--time-unit"):
        trace = read_trace(path)
    assert trace.time[1] - trace.time[0] == pytest.approx(0.25)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)
        assert read_trace(path, time_unit="ms").time[1] - read_trace(path, time_unit="ms").time[0] == \
            pytest.approx(0.25)
        assert read_trace(path, time_unit="s").time[1] - read_trace(path, time_unit="s").time[0] == 250
    code, out, err = cli("policy", "simulate", str(path), "-p", "lru", "-c", "3", "--json")
    assert code == 0 and err.count("sitsprof: warning: ") == 1 and "--time-unit" in err
    code, out, err = cli("policy", "simulate", str(path), "-p", "lru", "-c", "3", "--json", "--time-unit", "ms")
    assert code == 0 and "warning" not in err


def test_declared_units_are_not_guessed(tmp_path):
    moon = _jsonl(tmp_path / "m.jsonl", [{"timestamp": 7_200_000 * k, "input_length": 512, "output_length": 1,
                                          "hash_ids": [k]} for k in range(3)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)
        assert read_trace(moon).time.tolist() == [0.0, 7200.0, 14400.0]  # Mooncake says ms
        assert read_trace(moon, time_unit="s").time.tolist() == [0.0, 7_200_000.0, 14_400_000.0]
        assert read_trace(_jsonl(tmp_path / "q.jsonl", [README_RECORD])).time[0] == 61.114  # Bailian: s
        assert read_trace(_jsonl(tmp_path / "q.jsonl", [README_RECORD]), time_unit="ms").time[0] == \
            pytest.approx(0.061114)
        oracle = write_oracle_general(tmp_path / "o.bin", [1, 2], timestamps=[0, 4_000_000])
        assert read_trace(oracle).time.tolist() == [0.0, 4_000_000.0]  # libCacheSim's clock: s
    with pytest.raises(TraceFormatError, match="unknown time unit 'h'"):
        read_trace(moon, time_unit="h")


# -- oracleGeneral validation ----------------------------------------------------------------------
def _records(path, ids, nxt, sizes=None, stamps=None):
    rec = np.zeros(len(ids), dtype=ORACLE_DTYPE)
    rec["obj_id"] = ids
    rec["next_access_vtime"] = nxt
    rec["obj_size"] = 1 if sizes is None else sizes
    rec["timestamp"] = np.arange(len(ids)) if stamps is None else stamps
    rec.tofile(path)
    return path


def test_random_bytes_are_refused_naming_the_record(cli, tmp_path):
    path = tmp_path / "g.bin"
    path.write_bytes(np.random.default_rng(0).bytes(4800))  # head -c 4800 /dev/urandom > g.bin
    with pytest.raises(TraceFormatError, match=r"g\.bin:record 1: .*\(is it an oracleGeneral trace\?"):
        read_trace(path)
    code, out, err = cli("policy", "simulate", str(path), "-p", "lru", "-c", "10")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "record 1:" in err
    path.write_bytes(os.urandom(4800))
    with pytest.raises(TraceFormatError, match="record"):
        read_trace(path)


def test_libcachesim_counts_records_from_one_and_both_conventions_read(tmp_path):
    ids = [3, 4, 3, 3, 9, 4]
    zero = [2, 5, 3, -1, -1, -1]  # our writer: the next access's index
    one = [3, 6, 4, -1, 2**63 - 1, -1]  # libCacheSim's traceConv: "reference count starts with 1"
    a = read_trace(_records(tmp_path / "zero.bin", ids, zero))
    b = read_trace(_records(tmp_path / "one.bin", ids, one))
    assert a.original_id.tolist() == b.original_id.tolist() == ids
    lcs = pytest.importorskip("libcachesim")
    reader = lcs.TraceReader(str(tmp_path / "one.bin"), lcs.TraceType.ORACLE_GENERAL_TRACE)
    assert [r.obj_id for r in reader] == ids  # libCacheSim reads what we accept


@pytest.mark.parametrize("ids, nxt, sizes, stamps, needle", [
    ([1, 2, 1], [2, -1, -1], [1, 0, 1], None, "record 2: obj_size is 0"),
    ([1, 2, 1], [2, -1, -1], None, [0, 5, 4], "record 3: timestamp 4 is earlier than a record before it \\(5\\)"),
    ([1, 2, 1], [2, 0, -1], None, None, "record 2: next_access_vtime 0 does not point after this record"),
    ([1, 2, 1], [2, 2**50, -1], None, None, f"record 2: next_access_vtime {2**50} points past the end of the trace"),
    ([1, 2, 1, 2], [2, 3, -1, 2], None, None, "record 4: next_access_vtime 2 does not point after"),
    ([1, 2, 3, 1], [3, 2, -1, -1], None, None, "record 2: next_access_vtime 2 points at record 3, which holds "
                                               "obj_id 3, not this record's 2"),
])
def test_oracle_rules_name_the_record(tmp_path, ids, nxt, sizes, stamps, needle):
    path = _records(tmp_path / "t.oracleGeneral", ids, nxt, sizes, stamps)
    with pytest.raises(TraceFormatError, match=f"t\\.oracleGeneral:{needle}"):
        read_trace(path)
    kept = read_trace(path, skip_bad_lines=True)
    assert kept.skipped_lines == 1 and len(kept) == len(ids) - 1
    assert "record" in kept.skipped_examples[0]


def test_a_prefix_of_a_longer_trace_reads(tmp_path):
    """`head -c $((24*N))` of an oracleGeneral trace: next accesses past its end are kept."""
    whole = write_oracle_general(tmp_path / "whole.bin", [1, 2, 3, 1, 2, 3])
    prefix = tmp_path / "prefix.bin"
    prefix.write_bytes(whole.read_bytes()[: 24 * 4])
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)
        assert read_trace(prefix).original_id.tolist() == [1, 2, 3, 1]


def test_writer_output_and_large_traces_pass(tmp_path):
    rng = np.random.default_rng(1)
    ids = rng.zipf(1.3, 200_000) % 5000
    path = write_oracle_general(tmp_path / "z.oracleGeneral", ids, timestamps=np.sort(rng.integers(0, 1e6, ids.size)),
                                sizes=rng.integers(1, 100, ids.size))
    assert len(read_trace(path)) == ids.size
    with pytest.raises(TraceFormatError, match=r"obj_size must be integers in \[1, 2\*\*32\)"):
        write_oracle_general(tmp_path / "s0.bin", [1, 2], sizes=[1, 0])


def test_csv_unsigned_64_bit_ids(tmp_path):
    path = tmp_path / "u.csv"
    path.write_text(f"0,{2**64 - 1}\n1,5\n2,{2**64 - 1}\n3,{2**63}\n")
    trace = read_trace(path)
    assert trace.original_id.view(np.uint64).tolist() == [2**64 - 1, 5, 2**64 - 1, 2**63]
    assert trace.block.tolist() == [0, 1, 0, 2]
    over = tmp_path / "over.csv"
    over.write_text(f"0,1\n1,{2**64}\n")
    with pytest.raises(TraceFormatError, match="over.csv:2: obj_id .* outside the 64-bit integer range"):
        read_trace(over)
