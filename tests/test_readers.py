"""Trace readers: the real Mooncake trace, oracleGeneral round trips, CSV, and every bad input."""
from __future__ import annotations

import json
import lzma

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sitsprof.policies.errors import TraceFormatError
from sitsprof.policies.traces.csvfile import write_csv
from sitsprof.policies.traces.detect import detect_format, read_trace
from sitsprof.policies.traces.ids import trace_from_ids
from sitsprof.policies.traces.oracle import ORACLE_DTYPE, next_access_vtime, write_oracle_general


def _brute_next(ids):
    out = []
    for i, x in enumerate(ids):
        nxt = -1
        for j in range(i + 1, len(ids)):
            if ids[j] == x:
                nxt = j
                break
        out.append(nxt)
    return np.array(out, dtype=np.int64)


def _assert_first_appearance(block):
    """Dense ids 0..k-1 that appear for the first time in increasing order."""
    running_max = np.maximum.accumulate(block)
    assert block[0] == 0
    assert np.all(np.diff(running_max) <= 1)
    assert np.all(block <= running_max)


# --------------------------------------------------------------------------- Mooncake


@pytest.fixture(scope="module")
def mooncake(mooncake_path):
    return read_trace(mooncake_path)


def test_mooncake_real_trace_counts(mooncake, mooncake_path):
    assert detect_format(mooncake_path) == "mooncake"
    assert mooncake.n_requests == 12_031
    assert len(mooncake) == 288_500
    assert mooncake.n_blocks == 182_790 == len(np.unique(mooncake.original_id))
    # an infinite cache hits every reference except first ones: .3664 in the shared README
    assert round(1 - mooncake.n_blocks / len(mooncake), 4) == 0.3664
    assert mooncake.block.dtype == np.int32 and mooncake.request.dtype == np.int64
    _assert_first_appearance(mooncake.block)
    assert mooncake.skipped_lines == 0


def test_mooncake_real_trace_matches_file(mooncake, mooncake_path):
    with lzma.open(mooncake_path, "rt") as handle:  # the bundled copy is xz-compressed
        rows = [json.loads(line) for line in handle]
    offsets = mooncake.request_offsets
    for r in (0, 1, 777, len(rows) - 1):
        row = rows[r]
        lo, hi = offsets[r], offsets[r + 1]
        assert mooncake.original_id[lo:hi].tolist() == row["hash_ids"]
        assert mooncake.position[lo:hi].tolist() == list(range(hi - lo))
        assert np.all(mooncake.time[lo:hi] == row["timestamp"] / 1000.0)
        assert mooncake.request_output_tokens[r] == row["output_length"]
        expect_last = min(512, max(1, row["input_length"] - 512 * (hi - lo - 1)))
        assert mooncake.tokens[hi - 1] == expect_last
        assert np.all(mooncake.tokens[lo : hi - 1] == 512)
    # the same original id always maps to the same dense id and vice versa
    pairs = np.unique(np.stack([mooncake.block.astype(np.int64), mooncake.original_id]), axis=1)
    assert pairs.shape[1] == mooncake.n_blocks


def test_mooncake_last_block_tokens_clamped(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2, 3]},  # 76
        {"timestamp": 5, "input_length": 100, "output_length": 1, "hash_ids": [1, 4, 5]},  # < 0 -> 1
        {"timestamp": 9, "input_length": 9000, "output_length": 1, "hash_ids": [7]},  # > 512 -> 512
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    trace = read_trace(path)
    assert trace.tokens.tolist() == [512, 512, 76, 512, 512, 1, 512]
    assert trace.block.tolist() == [0, 1, 2, 0, 3, 4, 5]
    assert trace.request.tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert trace.time.tolist() == [0, 0, 0, 0.005, 0.005, 0.005, 0.009]


# --------------------------------------------------------------------------- oracleGeneral


def test_next_access_vtime_matches_brute_force():
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 40, size=500)
    assert next_access_vtime(ids).tolist() == _brute_next(ids.tolist()).tolist()
    assert next_access_vtime(np.array([5])).tolist() == [-1]


def test_oracle_round_trip(tmp_path):
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 300, size=2_000).astype(np.uint64)
    ids[::97] = np.uint64(2**64 - 3)  # ids past int64 survive as their bit pattern
    stamps = np.sort(rng.integers(0, 10_000, size=2_000))
    sizes = rng.integers(1, 5_000, size=2_000)  # obj_size 0 is refused (issue 13)
    path = write_oracle_general(tmp_path / "z.oracleGeneral", ids, timestamps=stamps, sizes=sizes)
    assert path.stat().st_size == 24 * 2_000
    raw = np.fromfile(path, dtype=ORACLE_DTYPE)
    assert raw["obj_id"].tolist() == ids.tolist()
    assert raw["timestamp"].tolist() == stamps.tolist()
    assert raw["obj_size"].tolist() == sizes.tolist()
    assert raw["next_access_vtime"].tolist() == _brute_next(ids.tolist()).tolist()

    trace = read_trace(path)
    assert len(trace) == trace.n_requests == 2_000
    assert trace.original_id.view(np.uint64).tolist() == ids.tolist()
    assert trace.tokens.tolist() == sizes.tolist()
    assert trace.time.tolist() == stamps.astype(float).tolist()
    assert trace.n_blocks == len(np.unique(ids))
    _assert_first_appearance(trace.block)
    # dense ids name objects: equal ids <-> equal dense ids
    assert np.array_equal(trace.block[1:] == trace.block[:-1], ids[1:] == ids[:-1])


def test_oracle_defaults_and_detection(tmp_path):
    path = write_oracle_general(tmp_path / "noext", [10, 11, 10])
    assert detect_format(path) == "oracle"
    raw = np.fromfile(path, dtype=ORACLE_DTYPE)
    assert raw["timestamp"].tolist() == [0, 1, 2]
    assert raw["obj_size"].tolist() == [1, 1, 1]
    assert raw["next_access_vtime"].tolist() == [2, -1, -1]


def test_oracle_readable_by_libcachesim(tmp_path):
    lcs = pytest.importorskip("libcachesim")
    ids = np.array([3, 4, 3, 3, 9, 4], dtype=np.uint64)
    path = write_oracle_general(tmp_path / "t.oracleGeneral", ids, sizes=[1, 2, 1, 1, 7, 2])
    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    seen = [(r.obj_id, r.obj_size, r.next_access_vtime) for r in reader]
    never = 2**63 - 1  # libCacheSim turns our -1 into "never" (INT64_MAX)
    assert seen == [(3, 1, 2), (4, 2, 5), (3, 1, 3), (3, 1, never), (9, 7, never), (4, 2, never)]


def test_oracle_truncated_record(tmp_path):
    good = write_oracle_general(tmp_path / "a.bin", [1, 2, 1])
    cut = tmp_path / "cut.bin"
    cut.write_bytes(good.read_bytes()[:-10])
    with pytest.raises(TraceFormatError) as err:
        read_trace(cut)
    assert f"{cut}:3:" in str(err.value) and "truncated record" in str(err.value)
    trace = read_trace(cut, skip_bad_lines=True)
    assert len(trace) == 2 and trace.skipped_lines == 1
    assert "truncated" in trace.skipped_examples[0]


def test_write_oracle_rejects_bad_input(tmp_path):
    with pytest.raises(TraceFormatError, match="empty"):
        write_oracle_general(tmp_path / "e.bin", [])
    with pytest.raises(TraceFormatError, match="sizes|obj_size"):
        write_oracle_general(tmp_path / "n.bin", [1, 2], sizes=[1, -1])
    with pytest.raises(TraceFormatError, match="entries"):
        write_oracle_general(tmp_path / "l.bin", [1, 2], timestamps=[1])


# --------------------------------------------------------------------------- CSV


def test_csv_without_header(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("0,100\n1.5,200\n# a comment\n\n2,100\n")
    trace = read_trace(path)
    assert trace.original_id.tolist() == [100, 200, 100]
    assert trace.block.tolist() == [0, 1, 0]
    assert trace.time.tolist() == [0, 1.5, 2]
    assert trace.tokens.tolist() == [1, 1, 1]
    assert trace.tenant.tolist() == [-1, -1, -1]


def test_csv_header_any_order_with_tenant(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("tenant,obj_id,timestamp,size\nqwen,7,0,512\nphi,8,1,3\nqwen,7,2,512\n,9,3,1\n")
    trace = read_trace(path)
    assert trace.original_id.tolist() == [7, 8, 7, 9]
    assert trace.tokens.tolist() == [512, 3, 512, 1]
    assert trace.tenant_names == ("qwen", "phi")
    assert trace.tenant.tolist() == [0, 1, 0, -1]


def test_csv_write_read_round_trip(tmp_path):
    trace = trace_from_ids([5, 6, 5, 7], times=[0, 0.5, 1, 2], tokens=[1, 2, 3, 4], tenant=[0, 1, -1, 0],
                           tenant_names=("a", "b"))
    back = read_trace(write_csv(tmp_path / "r.csv", trace))
    for name in ("time", "original_id", "block", "tokens", "tenant"):
        assert getattr(back, name).tolist() == getattr(trace, name).tolist(), name
    assert back.tenant_names == ("a", "b")


# --------------------------------------------------------------------------- bad input

GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}'

BAD_MOONCAKE = [
    ("{not json", "not valid JSON"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 5}', "missing field 'hash_ids'"),
    ('{"input_length": 600, "output_length": 5, "hash_ids": [1]}', "missing field 'timestamp'"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, "x"]}', "non-integer id 'x'"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2.5]}', "non-integer id 2.5"),
    ('{"timestamp": 0, "input_length": -600, "output_length": 5, "hash_ids": [1]}', "negative size: input_length"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": []}', "hash_ids is empty"),
    ('{"timestamp": "soon", "input_length": 600, "output_length": 5, "hash_ids": [1]}', "timestamp must be"),
    ("[1, 2, 3]", "expected a JSON object"),
]


@pytest.mark.parametrize("line,problem", BAD_MOONCAKE)
def test_mooncake_bad_line_names_file_line_problem(tmp_path, line, problem):
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{GOOD}\n\n{GOOD}\n{line}\n{GOOD}\n")
    with pytest.raises(TraceFormatError) as err:
        read_trace(path)
    message = str(err.value)
    assert message.startswith(f"{path}:4: ")
    assert problem in message
    assert err.value.exit_code == 2 and err.value.line == 4


def test_mooncake_skip_bad_lines_counts(tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = [GOOD] + [line for line, _ in BAD_MOONCAKE] + [GOOD]
    path.write_text("\n".join(lines) + "\n")
    trace = read_trace(path, skip_bad_lines=True)
    assert trace.n_requests == 2 and len(trace) == 4
    assert trace.skipped_lines == len(BAD_MOONCAKE)
    assert len(trace.skipped_examples) == 5
    assert trace.skipped_examples[0].startswith(f"{path}:2: not valid JSON")


def test_all_lines_bad_is_an_error_even_when_skipping(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("{x\n[1]\n")
    with pytest.raises(TraceFormatError, match="no valid requests: all 2 were bad"):
        read_trace(path, skip_bad_lines=True)


@pytest.mark.parametrize(
    "text,line,problem",
    [
        ("0,1\n1,-5\n", 2, "obj_id"),  # negative ids are fine ...
        ("0,1,1\n1,2,-5\n", 2, "negative size -5"),
        ("0,1\n1,abc\n", 2, "obj_id 'abc' is not an integer"),
        ("0,1\nxyz,2\n", 2, "timestamp 'xyz' is not a number"),
        ("0,1\n1,2,3\n", 2, "expected 2 fields"),
        ("timestamp,obj_id,size\n0,1,2\n1,2,-1\n", 3, "negative size -1"),
        ("timestamp,colour\n0,1\n", 1, "unknown CSV column 'colour'"),
    ],
)
def test_csv_bad_lines(tmp_path, text, line, problem):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    if problem == "obj_id":  # ... and read back as such
        assert read_trace(path).original_id.tolist() == [1, -5]
        return
    with pytest.raises(TraceFormatError) as err:
        read_trace(path)
    assert str(err.value).startswith(f"{path}:{line}: ") and problem in str(err.value)


def test_csv_skip_bad_lines(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("0,1,1\n1,2,-5\n2,x,1\n3,1,1\n")
    trace = read_trace(path, format="csv", skip_bad_lines=True)
    assert trace.original_id.tolist() == [1, 1] and trace.skipped_lines == 2


def test_unknown_format_empty_and_missing(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(GOOD + "\n")
    with pytest.raises(TraceFormatError, match=r"unknown trace format 'parquet'.*--format"):
        read_trace(path, format="parquet")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(TraceFormatError, match="empty trace"):
        read_trace(empty)
    empty_bin = tmp_path / "empty.bin"
    empty_bin.write_bytes(b"")
    with pytest.raises(TraceFormatError, match="empty trace"):
        read_trace(empty_bin)
    with pytest.raises(TraceFormatError, match="no such file"):
        read_trace(tmp_path / "absent.csv")
    odd = tmp_path / "trace.txt"
    odd.write_text("hello world\n")
    with pytest.raises(TraceFormatError, match="cannot tell the trace format"):
        read_trace(odd)
    with pytest.raises(TraceFormatError, match="compressed"):
        read_trace(_touch(tmp_path / "t.jsonl.lz4"))  # zstd is read since issue 13; lz4 is not


def _touch(path):
    path.write_bytes(b"\x28\xb5\x2f\xfd")
    return path


def test_format_sniffing_by_content(tmp_path):
    jsonl = tmp_path / "noext1"
    jsonl.write_text("  " + GOOD + "\n")
    csv = tmp_path / "noext2"
    csv.write_text("timestamp,obj_id\n0,1\n")
    assert detect_format(jsonl) == "mooncake" and read_trace(jsonl).n_requests == 1
    assert detect_format(csv) == "csv" and len(read_trace(csv)) == 1


def test_csv_with_byte_order_mark(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes("timestamp,obj_id\n0,4\n1,4\n".encode("utf-8-sig"))
    assert read_trace(path).block.tolist() == [0, 0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1) | st.sampled_from([0, 1, 2]), min_size=1, max_size=60))
def test_oracle_round_trip_property(tmp_path_factory, ids):
    path = tmp_path_factory.mktemp("prop") / "p.oracleGeneral"
    write_oracle_general(path, np.array(ids, dtype=np.uint64))
    raw = np.fromfile(path, dtype=ORACLE_DTYPE)
    assert raw["next_access_vtime"].tolist() == _brute_next(ids).tolist()
    trace = read_trace(path)
    assert trace.original_id.view(np.uint64).tolist() == ids
    # dense ids: equal exactly where the original ids are equal, numbered by first appearance
    first = {}
    assert trace.block.tolist() == [first.setdefault(x, len(first)) for x in ids]


REQ = ('{"request_id": "r1", "model_stack": "phi-3-mini", "input_tokens": 700, "max_new_tokens": 64, '
       '"priority_class": "high", "hash_ids": [4, 5]}')


@pytest.mark.parametrize(
    "line,problem",
    [
        (REQ.replace('"input_tokens": 700', '"input_tokens": -1'), "negative size: input_tokens is -1"),
        (REQ.replace('"model_stack": "phi-3-mini", ', ""), "missing field 'model_stack'"),
        (REQ.replace('"model_stack": "phi-3-mini"', '"model_stack": 3'), "model_stack must be a non-empty string"),
        (REQ.replace("[4, 5]", "[4, null]"), "non-integer id None"),
    ],
)
def test_request_format_bad_lines(tmp_path, line, problem):
    path = tmp_path / "req.jsonl"
    path.write_text(f"{REQ}\n{line}\n")
    with pytest.raises(TraceFormatError) as err:
        read_trace(path, format="requests")
    assert str(err.value).startswith(f"{path}:2: ") and problem in str(err.value)
    trace = read_trace(path, skip_bad_lines=True)  # detected as the request format
    assert trace.skipped_lines == 1 and trace.tenant_names == ("phi-3-mini",)
    assert trace.tokens.tolist() == [512, 188] and trace.time.tolist() == [0.0, 0.0]


def _same_trace(a, b):
    for name in ("time", "request", "block", "original_id", "position", "tokens", "tenant"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.tenant_names == b.tenant_names


@settings(max_examples=30, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=1e9, allow_nan=False),
            st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.integers(0, 5),
            st.integers(min_value=0, max_value=2**40),
            st.sampled_from(["", "qwen2-72b", "phi", "NA", "x y"]),
        ),
        min_size=1, max_size=40,
    ),
    width=st.integers(2, 4),
    header=st.booleans(),
)
def test_csv_fast_path_equals_line_reader(tmp_path_factory, rows, width, header):
    from sitsprof.policies.traces import csvfile

    path = tmp_path_factory.mktemp("csv") / "p.csv"
    names = ["timestamp", "obj_id", "size", "tenant"][:width]
    lines = ([",".join(names)] if header else []) + [",".join(map(str, row[:width])) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    fast = csvfile._read_csv_fast(path)
    assert fast is not None
    _same_trace(fast, csvfile._read_csv_lines(path, skip_bad_lines=False))


def test_csv_fast_path_is_taken_and_falls_back(tmp_path, monkeypatch):
    from sitsprof.policies.traces import csvfile

    clean = tmp_path / "clean.csv"
    clean.write_text("ts,id,tenant\n0,1,a\n1,2,b\n2,1,a\n")
    messy = tmp_path / "messy.csv"
    messy.write_text("0,1\n# comment\n1,2\n")

    def no_slow_path(*_args):
        raise AssertionError("the line reader ran on a clean file")

    with monkeypatch.context() as patch:
        patch.setattr(csvfile, "_read_csv_lines", no_slow_path)
        assert read_trace(clean).tenant_names == ("a", "b")
        with pytest.raises(AssertionError, match="line reader"):
            read_trace(messy)
    assert read_trace(messy).original_id.tolist() == [1, 2]


def test_request_offsets_are_csr_offsets():
    rng = np.random.default_rng(2)
    sizes = rng.integers(1, 6, size=300)
    trace = trace_from_ids(rng.integers(0, 50, size=int(sizes.sum())))
    trace = type(trace)(**{**trace.__dict__, "request": np.repeat(np.arange(300), sizes)})
    offsets = trace.request_offsets
    assert offsets.dtype == np.int64 and offsets[0] == 0 and offsets[-1] == len(trace)
    assert offsets.tolist() == np.searchsorted(trace.request, np.arange(301)).tolist()
    assert np.diff(offsets).tolist() == sizes.tolist()
    one = trace_from_ids([7])
    assert one.request_offsets.tolist() == [0, 1]


def test_unreadable_file_is_a_trace_error(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    path.write_text(GOOD + "\n")

    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("builtins.open", refuse)
    with pytest.raises(TraceFormatError, match=r"t.jsonl: cannot read the file: Permission denied"):
        read_trace(path)


def test_oracle_sizes_and_constant_columns_across_chunks(tmp_path):
    """Sizes equal so far cost nothing; a different size later (in a later chunk) fills the
    column; one-reference requests get int32 request ids and read-only constant columns."""
    from sitsprof.policies.traces.oracle import read_oracle, write_oracle_general

    ids = np.array([3, 1, 3, 9, 1, 3, 7], dtype=np.int64)
    for sizes in ([4] * 7, [4, 4, 4, 4, 4, 9, 4], [2, 4, 4, 4, 4, 4, 4]):
        path = write_oracle_general(tmp_path / "s.oracleGeneral", ids, sizes=np.array(sizes))
        for chunk in (2, 3, 100):
            trace = read_oracle(path, chunk=chunk)
            assert trace.tokens.tolist() == sizes
            assert trace.original_id.tolist() == ids.tolist()
            assert trace.block.tolist() == [0, 1, 0, 2, 1, 0, 3]
            assert trace.time.tolist() == list(range(7))
            assert trace.request.tolist() == list(range(7)) and trace.request.dtype == np.int32
            assert trace.position.tolist() == [0] * 7 and trace.tenant.tolist() == [-1] * 7
            assert not trace.position.flags.writeable and not trace.tenant.flags.writeable
            assert trace.request_offsets.tolist() == list(range(8))
            assert (trace.tokens.strides[0] == 0) == (len(set(sizes)) == 1)
