"""The oracleGeneral reader's fast path against its exact record-by-record check.

`read_oracle` splits the records in one compiled pass (`_ingest`), factorises, and checks the
next-access pointers in one pass over the codes (`_next_accesses_hold`); only a file that fails
goes through `_validate`, the record-by-record check that names the record. These tests build
random record sets (good ones, and ones with each kind of broken pointer, counted from 0 or 1,
pointers that skip occurrences of their id, zero sizes, timestamps going back) and check that
the reader gives exactly what the exact check alone gives: the same trace, or the same error,
or in skip mode the same kept records and messages; on plain files (memory-mapped) and on
gzip ones (read in chunks), at several chunk sizes.
"""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from sitsprof.policies.errors import TraceFormatError
from sitsprof.policies.traces import oracle
from sitsprof.policies.traces.ids import dense_ids, trace_from_ids
from sitsprof.policies.traces.lines import BadLines, with_skips
from sitsprof.policies.traces.oracle import ORACLE_DTYPE, next_access_vtime, read_oracle


def _write(path, ids, nxt, sizes, stamps):
    rec = np.zeros(len(ids), dtype=ORACLE_DTYPE)
    rec["obj_id"] = np.asarray(ids, dtype=np.int64).view(np.uint64)
    rec["next_access_vtime"] = nxt
    rec["obj_size"] = sizes
    rec["timestamp"] = stamps
    path.write_bytes(rec.tobytes())
    return path


def _reference(path, ids, nxt, sizes, stamps, skip):
    """What the reader gave before the fast path: every record through `_check_records`."""
    bad = BadLines(path, skip)
    obj_id = np.asarray(ids, dtype=np.int64)
    time = np.asarray(stamps, dtype=np.float64)
    sizes = np.asarray(sizes)
    tokens = (oracle.constant_column(int(sizes[0]), len(sizes), np.int32) if (sizes == sizes[0]).all()
              else sizes.astype(np.int32))
    keep = oracle._check_records(path, bad, obj_id, time, np.asarray(nxt, dtype=np.int64), tokens)
    if keep is not None:
        if not keep.any():
            raise bad.empty("records")
        obj_id, time = obj_id[keep], time[keep]
        tokens = tokens[: int(keep.sum())] if tokens.strides[0] == 0 else tokens[keep]
    trace = trace_from_ids(obj_id, times=time, tokens=tokens, source=str(path))
    return with_skips(trace, bad) if bad.count else trace


def _outcome(fn, *args, **kwargs):
    try:
        return "ok", fn(*args, **kwargs)
    except TraceFormatError as exc:
        return "error", str(exc)


def _same(a, b):
    assert a[0] == b[0], (a, b)
    if a[0] == "error":
        assert a[1] == b[1]
        return
    x, y = a[1], b[1]
    for name in ("time", "request", "block", "original_id", "position", "tokens", "tenant"):
        assert np.array_equal(np.asarray(getattr(x, name)), np.asarray(getattr(y, name))), name
        assert np.asarray(getattr(x, name)).dtype == np.asarray(getattr(y, name)).dtype, name
    assert (x.n_blocks, x.skipped_lines, x.skipped_examples) == (y.n_blocks, y.skipped_lines, y.skipped_examples)


def _case(rng, kind):
    n = int(rng.integers(1, 60))
    ids = rng.integers(0, max(1, n // 3), n) * (1 if rng.random() < 0.5 else 2**61 + 7)  # dense or spread
    if rng.random() < 0.2:
        ids = ids - 2**62  # negative ids
    nxt = next_access_vtime(ids)
    sizes = np.ones(n, dtype=np.int64) if rng.random() < 0.6 else rng.integers(1, 5, n)
    stamps = np.sort(rng.integers(0, 1000, n))
    i = int(rng.integers(0, n))
    if kind == "one-based":
        nxt = np.where(nxt >= 0, nxt + 1, nxt)
        if rng.random() < 0.5:
            nxt[nxt == -1] = 2**63 - 1
    elif kind == "skips":  # a pointer to a later, not the next, occurrence of its id: allowed
        later = np.flatnonzero(ids == ids[i])
        later = later[later > i]
        if len(later):
            nxt[i] = int(later[-1])
    elif kind == "other id":
        nxt[i] = int(rng.integers(i + 1, n + 1)) if i + 1 < n else 0
    elif kind == "not later":
        nxt[i] = int(rng.integers(0, i + 1))
    elif kind == "past end":
        nxt[i] = n + int(rng.integers(0, 5)) if rng.random() < 0.5 else 2**41 + int(rng.integers(0, 9))
    elif kind == "size 0":
        sizes[i] = 0
    elif kind == "time back":
        stamps[i] = stamps[i] + 2000 if i + 1 < n else stamps[i]
    return ids, nxt, sizes, stamps


KINDS = ("good", "one-based", "skips", "other id", "not later", "past end", "size 0", "time back")


@pytest.mark.parametrize("kind", KINDS)
def test_reader_equals_the_exact_check(tmp_path, kind):
    rng = np.random.default_rng(KINDS.index(kind))
    for case in range(40):
        ids, nxt, sizes, stamps = _case(rng, kind)
        path = _write(tmp_path / f"{case}.oracleGeneral", ids, nxt, sizes, stamps)
        packed = tmp_path / f"{case}.oracleGeneral.gz"
        packed.write_bytes(gzip.compress(path.read_bytes()))
        for skip in (False, True):
            want = _outcome(_reference, path, ids, nxt, sizes, stamps, skip)
            for chunk in (1, 7, 1 << 18):
                _same(_outcome(read_oracle, path, skip_bad_lines=skip, chunk=chunk), want)
            got = _outcome(read_oracle, packed, skip_bad_lines=skip, chunk=5)
            if want[0] == "error":  # the message names the file it read
                assert got == ("error", want[1].replace(str(path), str(packed)))
                continue
            assert got[0] == "ok", got
            for name in ("time", "block", "original_id", "tokens"):
                assert np.array_equal(np.asarray(getattr(got[1], name)), np.asarray(getattr(want[1], name)))
            assert got[1].skipped_lines == want[1].skipped_lines


def test_pointer_pass_agrees_with_validate():
    """`_next_accesses_hold` is True exactly when `_validate` finds no broken pointer."""
    rng = np.random.default_rng(7)
    for _ in range(400):
        n = int(rng.integers(1, 30))
        ids = rng.integers(0, 5, n)
        nxt = np.where(rng.random(n) < 0.3, -1, rng.integers(-3, n + 4, n))
        nxt[rng.random(n) < 0.05] = 2**63 - 1
        nxt[rng.random(n) < 0.05] = 2**41
        codes, _ = dense_ids(ids)
        for base in (0, 1):
            problem = np.zeros(n, dtype=np.uint8)
            exact = oracle._validate(ids, np.zeros(n), nxt, np.zeros(0, dtype=np.int32), base, 2**40, problem)
            assert bool(oracle._next_accesses_hold(codes, nxt, base, 2**40)) == (exact == 0), (ids, nxt, base)


def test_a_file_that_shrinks_before_it_is_mapped_is_refused(tmp_path, monkeypatch):
    path = _write(tmp_path / "s.oracleGeneral", [1, 2, 1], [2, -1, -1], [1, 1, 1], [0, 1, 2])
    monkeypatch.setattr(oracle, "data_size", lambda p: 24 * 5)  # as if 2 records went missing since
    with pytest.raises(TraceFormatError, match="the file ended before record 5 while being read"):
        read_oracle(path)
