"""Compressed traces and the bundled Mooncake trace (`policies/traces/opening.py`).

Every reader opens its file through `opening.open_binary`, so a gzip, xz or bzip2 copy of a
trace must read to exactly the trace the plain file gives, whatever its name says.
"""
from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma

import numpy as np
import pytest

from sitsprof.policies.errors import TraceFormatError
from sitsprof.policies.traces import opening
from sitsprof.policies.traces.csvfile import write_csv
from sitsprof.policies.traces.detect import detect_format, read_trace
from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl, write_requests_jsonl
from sitsprof.policies.traces.ids import trace_from_ids
from sitsprof.policies.traces.oracle import write_oracle_general

COMPRESSORS = {".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress}
#: sha256 of the decompressed Mooncake conversation trace (the upstream file's, see NOTICE).
MOONCAKE_SHA256 = "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df"


def _same(a, b):
    assert len(a) == len(b) and a.n_requests == b.n_requests and a.n_blocks == b.n_blocks
    for name in ("block", "original_id", "time", "tokens", "request_offsets"):
        assert np.array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name))), name


@pytest.fixture(scope="module")
def plain_traces(tmp_path_factory):
    """One small file per format: (path, format)."""
    root = tmp_path_factory.mktemp("plain")
    requests = generate_requests(seed=3, duration_s=60)
    ids = np.array([5, 7, 5, 9, 2**40, 7, 5], dtype=np.int64)
    return [
        (write_mooncake_jsonl(requests, root / "t.jsonl"), "mooncake"),
        (write_requests_jsonl(requests, root / "r.jsonl"), "requests"),
        (write_csv(root / "t.csv", trace_from_ids(ids, times=np.arange(7.0))), "csv"),
        (write_oracle_general(root / "t.oracleGeneral", ids, sizes=np.array([1, 2, 1, 3, 1, 2, 1])), "oracle"),
    ]


@pytest.mark.parametrize("suffix", list(COMPRESSORS))
def test_compressed_copies_read_as_the_plain_file(plain_traces, tmp_path, suffix):
    for path, fmt in plain_traces:
        packed = tmp_path / (path.name + suffix)
        packed.write_bytes(COMPRESSORS[suffix](path.read_bytes()))
        assert detect_format(packed) == fmt
        _same(read_trace(packed), read_trace(path))
        # by content, not by name: a gzip stream named like the plain file reads too
        misnamed = tmp_path / f"misnamed-{path.name}"
        misnamed.write_bytes(COMPRESSORS[suffix](path.read_bytes()))
        _same(read_trace(misnamed, format=fmt), read_trace(path))


def test_compressed_csv_line_reader_names_the_line(tmp_path):
    """The line-by-line CSV path (a comment sends it there) reads through the same opener."""
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(b"# a comment\n1,10\n2,11\n3,oops\n"))
    with pytest.raises(TraceFormatError, match=r"t\.csv\.gz:4"):
        read_trace(path)
    assert len(read_trace(path, skip_bad_lines=True)) == 2


def test_damaged_compressed_file_is_one_error(tmp_path, plain_traces):
    path = plain_traces[0][0]
    for suffix, compress in (".gz", gzip.compress), (".xz", lzma.compress):
        cut = tmp_path / f"cut.jsonl{suffix}"
        cut.write_bytes(compress(path.read_bytes())[:-40])
        with pytest.raises(TraceFormatError, match="damaged compressed file|cannot read the file"):
            read_trace(cut)
    fake = tmp_path / "fake.jsonl.gz"
    fake.write_bytes(b"\x1f\x8b not gzip at all")
    with pytest.raises(TraceFormatError):
        read_trace(fake)


def test_lz4_is_named_not_misread(tmp_path):
    """zstd is read since issue 13 (tests/test_readers_formats.py); lz4 is still named, not misread."""
    path = tmp_path / "trace.bin"
    path.write_bytes(b"\x04\x22\x4d\x18" + bytes(40))
    with pytest.raises(TraceFormatError, match="lz4-compressed traces are not read yet"):
        read_trace(path)


def test_bundled_mooncake_is_the_upstream_trace(mooncake_path):
    assert opening.resolve("bundled:mooncake") == mooncake_path
    with lzma.open(mooncake_path, "rb") as handle:
        assert hashlib.sha256(handle.read()).hexdigest() == MOONCAKE_SHA256
    assert mooncake_path.stat().st_size < 300_000  # kept small in the repository
    trace = read_trace("bundled:mooncake")
    assert (trace.n_requests, len(trace), trace.n_blocks) == (12_031, 288_500, 182_790)
    assert detect_format("bundled:mooncake") == "mooncake"


def test_unknown_bundled_name_lists_the_bundled_traces():
    with pytest.raises(TraceFormatError, match="no bundled trace named 'nope'.*bundled:mooncake"):
        read_trace("bundled:nope")


def test_cli_reads_the_bundled_trace(cli):
    code, out, err = cli("policy", "simulate", "bundled:mooncake", "-p", "lru", "-c", "1000", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["trace"]["references"] == 288_500
    assert doc["results"][0]["hits"] == 12_831  # libCacheSim's LRU: 0.0445
