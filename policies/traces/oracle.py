"""libCacheSim's oracleGeneral binary traces, read and written, for comparison with libCacheSim.

24-byte little-endian records `<u4 timestamp, <u8 obj_id, <u4 obj_size, <i8 next_access_vtime>`.
Each record is one request of one block; `obj_size` becomes the reference's token weight.
Writing computes `next_access_vtime`, which libCacheSim's oracle policies read.

Reading validates what the format allows, record by record (compiled, `_validate`), so
random bytes or another binary format are refused naming the record ("FILE:record N:
problem (fix)") instead of replayed: `obj_size` > 0 (libCacheSim skips size-0 requests),
timestamps non-decreasing, and `next_access_vtime` either "never" (-1, or INT64_MAX, as
libCacheSim's reader also takes it) or a later record holding the same `obj_id`; a pointer
past the last record is taken as from a longer trace this file is a prefix of (`head -c`
cuts them so) when it is below 2**40 records, and refused above (random bytes). Writers
count records from 0 (`write_oracle_general`) or from 1 (libCacheSim's traceConv:
"reference count starts with 1"); the convention with fewer problems is the file's.
`skip_bad_lines` drops the records that break a rule.
"""
from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from sitsprof.common.atomic import atomic_write
from sitsprof.common.jit import njit
from sitsprof.common.prefetch import AHEAD, prefetch

from ..errors import TraceFormatError
from .factorize import factorize_int64
from .ids import INT32_MAX, constant_column, dense_ids, trace_from_ids
from .lines import MAX_SKIP_EXAMPLES, BadLines, with_skips
from .opening import compression, data_size, open_binary
from .trace import Trace

__all__ = [
    "ORACLE_DTYPE",
    "iter_oracle_chunks",
    "next_access_vtime",
    "oracle_records",
    "read_oracle",
    "write_oracle_general",
]

# libCacheSim oracleGeneral record; a packed structured dtype is exactly 24 bytes.
ORACLE_DTYPE = np.dtype(
    [("timestamp", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access_vtime", "<i8")]
)
assert ORACLE_DTYPE.itemsize == 24
_NEVER = (-1, 2**63 - 1)
_FIX = ("is it an oracleGeneral trace? (24-byte records: u32 timestamp, u64 obj_id, u32 obj_size, "
        "i64 next_access_vtime); --skip-bad-lines drops the records that break a rule")
#: Problem codes of `_validate`.
_SIZE0, _TIME_BACK, _NEXT_NOT_LATER, _NEXT_PAST_END, _NEXT_OTHER_ID = 1, 2, 3, 4, 5
#: A next access past the file's last record is taken from a longer trace below this many records.
_PREFIX_LIMIT = 2**40


def _validate(obj_id, time, nxt, sizes, base, limit, problem):
    """Set problem[i] to the first rule record i breaks (0: none); returns how many break one.

    sizes: one per record, or empty when they are all the same (checked by the caller);
    base: 0 or 1, what next_access_vtime counts records from; limit: pointers past the last
    record and below it are taken as from a longer trace (this file a prefix of it)."""
    n = obj_id.shape[0]
    bad = 0
    last_t = -1.0
    for i in range(n):
        code = 0
        v = nxt[i]
        if sizes.shape[0] and sizes[i] <= 0:
            code = 1
        elif time[i] < last_t:
            code = 2
        elif v != -1 and v != 9223372036854775807:
            j = v - base
            if j <= i:
                code = 3
            elif j >= n:
                if j >= limit:
                    code = 4
            elif obj_id[j] != obj_id[i]:
                code = 5
        problem[i] = code
        if code:
            bad += 1
        else:
            last_t = time[i]
    return bad


_compiled = []


def _validator():
    """`_validate` compiled (numba loads on the first oracleGeneral read, not on import)."""
    if not _compiled:
        from sitsprof.common.jit import njit

        _compiled.append(njit(cache=True)(_validate))
    return _compiled[0]


def _problem_text(code: int, i: int, obj_id, time, nxt, base: int, n: int) -> str:
    """The problem `code` at record `i` in words; `time`, `nxt` and `obj_id` are read only where
    the code needs them (iter_oracle_chunks passes None for a size-0 record)."""
    if code == _SIZE0:
        return "obj_size is 0 (every request carries at least one byte or token; libCacheSim skips size-0 requests)"
    if code == _TIME_BACK:
        earlier = time[:i][time[:i] > time[i]]
        return (f"timestamp {time[i]:.0f} is earlier than a record before it ({earlier.max():.0f}); "
                "oracleGeneral records are in time order")
    v = int(nxt[i])
    if code == _NEXT_NOT_LATER:
        return (f"next_access_vtime {v} does not point after this record; it must be -1 (no next access) "
                "or a later record")
    if code == _NEXT_PAST_END:
        return (f"next_access_vtime {v} points past the end of the trace ({n:,} records) and past "
                f"2**40 records, beyond any trace this one could be a prefix of")
    j = v - base
    return (f"next_access_vtime {v} points at record {j + 1}, which holds obj_id {int(obj_id[j]) & (2**64 - 1)}, "
            f"not this record's {int(obj_id[i]) & (2**64 - 1)}")


def _check_records(path: Path, bad: BadLines, obj_id, time, nxt, tokens):
    """The records' rule problems (module docstring): raises on the first, or in skip mode
    returns the mask of the records to keep (None when all are good)."""
    n = len(obj_id)
    sizes = np.zeros(0, dtype=np.int32)
    if tokens.strides[0] == 0:
        if int(tokens[0]) <= 0:
            bad.bad("record 1", _problem_text(_SIZE0, 0, obj_id, time, nxt, 0, n), fix=_FIX)
            bad.count += n - 1  # skip mode: every record has that size
            raise bad.empty("records")
    else:
        sizes = np.ascontiguousarray(tokens)
    best = None
    for base in (0, 1):
        problem = np.zeros(n, dtype=np.uint8)
        count = int(_validator()(obj_id, time, nxt, sizes, base, _PREFIX_LIMIT, problem))
        if best is None or count < best[0]:
            best = (count, base, problem)
        if count == 0:
            break
    count, base, problem = best
    if not count:
        return None
    flagged = np.flatnonzero(problem)
    for i in flagged[:MAX_SKIP_EXAMPLES + 1]:
        bad.bad(f"record {i + 1}", _problem_text(int(problem[i]), int(i), obj_id, time, nxt, base, n), fix=_FIX)
    bad.count += len(flagged) - min(len(flagged), MAX_SKIP_EXAMPLES + 1)
    return problem == 0


#: Slots of `_ingest`'s running state.
_LO, _HI, _LAST_T, _FIRST_SIZE, _SIZES_DIFFER, _BROKEN = range(6)


def _new_state() -> np.ndarray:
    return np.array([2**63 - 1, -(2**63), -1, -1, 0, 0], dtype=np.int64)


@njit(cache=True)
def _ingest(stamps, ids, sizes, lo, obj_id, time, state):
    """Copy one run of records (the strided fields of the records as they lie in the file or
    the read buffer) into the columns from `lo`, and fold them into `state`: the ids' min and
    max, the last timestamp, the first size, whether sizes differ, and whether a rule that
    needs no other record is broken (size 0, a timestamp going back). One pass, no temporaries."""
    lo_id = state[0]
    hi_id = state[1]
    last_t = state[2]
    first = state[3]
    differ = state[4]
    broken = state[5]
    for i in range(ids.shape[0]):
        key = ids[i]
        obj_id[lo + i] = key
        if key < lo_id:
            lo_id = key
        if key > hi_id:
            hi_id = key
        t = np.int64(stamps[i])
        time[lo + i] = t
        if t < last_t:
            broken = 1
        last_t = t
        size = np.int64(sizes[i])
        if size == 0:
            broken = 1
        if first < 0:
            first = size
        elif size != first:
            differ = 1
    state[0] = lo_id
    state[1] = hi_id
    state[2] = last_t
    state[3] = first
    state[4] = differ
    state[5] = broken


@njit(cache=True)
def _next_accesses_hold(codes, nxt, base, limit):
    """True when every next_access_vtime (counted from `base`) is "never", past the last
    record and below `limit`, or a later record of the same id: `_validate`'s pointer rules,
    in one pass that reads the dense int32 codes (not the int64 ids) and writes nothing. The
    record-by-record check runs only when this fails. (Written with the common case, a
    pointer inside the file, tested first and no early exit: twice as fast as the plain form.)"""
    n = codes.shape[0]
    bad = 0
    for i in range(n):
        if i + AHEAD < n:  # the code the pointer AHEAD records on names (common/prefetch.py)
            prefetch(codes, nxt[i + AHEAD] - base)
        v = nxt[i]
        j = v - base
        if j >= 0 and j < n:
            if j <= i or codes[j] != codes[i]:
                bad += 1
        elif v != -1 and v != 9223372036854775807 and (j < 0 or j >= limit):
            bad += 1
    return bad == 0


def _mapped_records(path: Path, n: int) -> np.ndarray:
    """The file's first `n` records as a read-only array over a memory map: no copy, the
    page cache's pages are read in place."""
    with open(path, "rb") as handle:
        try:
            mapping = mmap.mmap(handle.fileno(), n * ORACLE_DTYPE.itemsize, access=mmap.ACCESS_READ)
        except ValueError:  # the file shrank since its size was taken
            raise TraceFormatError(path, f"the file ended before record {n} while being read") from None
    return np.frombuffer(mapping, dtype=ORACLE_DTYPE, count=n)


def _read_chunks(path: Path, n: int, chunk: int):
    """(index of the first record, records) over the decompressed stream, `chunk` records at
    a time into one reused buffer."""
    buf = np.empty(min(chunk, n), dtype=ORACLE_DTYPE)
    raw = memoryview(buf.view(np.uint8))
    with open_binary(path, buffering=0) as handle:
        for lo in range(0, n, len(buf)):
            hi = min(n, lo + len(buf))
            want = (hi - lo) * ORACLE_DTYPE.itemsize
            got = 0
            while got < want:
                step = handle.readinto(raw[got:want])
                if not step:
                    raise TraceFormatError(
                        path, f"the file ended at record {lo + got // 24 + 1} of {n} while being read"
                    )
                got += step
            yield lo, buf[: hi - lo]


def read_oracle(path, skip_bad_lines: bool = False, chunk: int = 1 << 18) -> Trace:
    """Read a libCacheSim oracleGeneral binary trace (one reference per record).

    A plain file is memory-mapped and its records read in place; a compressed one is read in
    chunks into one reused buffer (peak: the columns plus one chunk, 6 MB). Either way one
    compiled pass per chunk (`_ingest`) splits the records into the columns and checks what
    needs no other record, the ids' range it finds picks the factoriser's path, and one pass
    over the int32 codes (`_next_accesses_hold`) checks the next-access pointers; only a file
    that breaks a rule goes through the record-by-record check that names the record. When
    every record has the same size (as in most cache traces: size 1) `tokens` is a constant
    zero-stride column."""
    path = Path(path)
    bad = BadLines(path, skip_bad_lines)
    size = data_size(path)
    n, rest = divmod(size, ORACLE_DTYPE.itemsize)
    if rest:
        bad.bad(
            n + 1,
            f"truncated record: the file is {size} bytes, not a multiple of the 24-byte "
            f"oracleGeneral record ({rest} bytes left over)",
            fix="is it really an oracleGeneral trace? --skip-bad-lines drops the partial record",
        )
    if n == 0:
        raise bad.empty("records")
    chunk = max(1, int(chunk))
    obj_id = np.empty(n, dtype=np.int64)
    time = np.empty(n, dtype=np.float64)
    state = _new_state()
    tokens = None  # allocated only once two records differ in size
    if compression(path) is None:
        mapped = _mapped_records(path, n)
        nxt = mapped["next_access_vtime"]  # read in place
        pieces = ((lo, mapped[lo:lo + chunk]) for lo in range(0, n, chunk))
    else:
        mapped = None
        nxt = np.empty(n, dtype=np.int64)
        pieces = _read_chunks(path, n, chunk)
    for lo, records in pieces:
        hi = lo + len(records)
        sizes = records["obj_size"]
        _ingest(records["timestamp"], records["obj_id"].view(np.int64), sizes, lo, obj_id, time, state)
        if mapped is None:
            nxt[lo:hi] = records["next_access_vtime"]
        if tokens is None and state[_SIZES_DIFFER]:
            tokens = np.empty(n, dtype=np.int32)
            tokens[:lo] = min(int(state[_FIRST_SIZE]), INT32_MAX)
        if tokens is not None:
            tokens[lo:hi] = np.minimum(sizes, INT32_MAX)
    if tokens is None:
        tokens = constant_column(min(int(state[_FIRST_SIZE]), INT32_MAX), n, np.int32)
    codes = None
    if not state[_BROKEN]:
        codes = factorize_int64(obj_id, bounds=(int(state[_LO]), int(state[_HI])))
        if not any(_next_accesses_hold(codes[0], nxt, base, _PREFIX_LIMIT) for base in (0, 1)):
            codes = None
    keep = None if codes is not None else _check_records(path, bad, obj_id, time, np.ascontiguousarray(nxt), tokens)
    del nxt, mapped, pieces
    if keep is not None:
        if not keep.any():
            raise bad.empty("records")
        obj_id, time = obj_id[keep], time[keep]
        tokens = tokens[: int(keep.sum())] if tokens.strides[0] == 0 else tokens[keep]
    trace = trace_from_ids(obj_id, times=time, tokens=tokens, source=str(path), codes=codes)
    if bad.count:
        return with_skips(trace, bad)
    return trace


def next_access_vtime(obj_ids) -> np.ndarray:
    """For each request i, the index of the next request to the same object, -1 if none."""
    ids = np.asarray(obj_ids)
    n = len(ids)
    result = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return result
    codes, _ = dense_ids(ids)
    order = np.argsort(codes, kind="stable")  # stable: each object's requests stay in time order
    same = codes[order[1:]] == codes[order[:-1]]
    result[order[:-1][same]] = order[1:][same]
    return result


def write_oracle_general(path, obj_ids, timestamps=None, sizes=None, chunk: int = 1 << 20) -> Path:
    """Write an oracleGeneral trace libCacheSim can read; next_access_vtime is computed here.

    obj_ids: integer ids (int64 or uint64); timestamps: seconds as u4 (default 0..n-1);
    sizes: u4 object sizes (default 1). Written in chunks, so memory stays near the inputs.
    """
    path = Path(path)
    ids = np.asarray(obj_ids)
    n = len(ids)
    if n == 0:
        raise TraceFormatError(path, "refusing to write an empty trace")
    if ids.dtype.kind not in "iu":
        raise TraceFormatError(path, f"object ids must be integers, got dtype {ids.dtype}")
    columns = {}
    for name, values, default, low in (
        ("timestamp", timestamps, None, 0),
        ("obj_size", sizes, 1, 1),  # the reader refuses size 0, as libCacheSim skips it
    ):
        if values is None:
            columns[name] = np.arange(n, dtype=np.int64) if default is None else np.full(n, default)
            continue
        arr = np.asarray(values)
        if len(arr) != n:
            raise TraceFormatError(path, f"{name} has {len(arr)} entries, obj_ids has {n}")
        if arr.dtype.kind not in "iu" or (arr.size and (arr.min() < low or arr.max() > 2**32 - 1)):
            raise TraceFormatError(path, f"{name} must be integers in [{low}, 2**32)")
        columns[name] = arr
    nxt = next_access_vtime(ids)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:
            for lo in range(0, n, chunk):
                hi = min(n, lo + chunk)
                rec = np.empty(hi - lo, dtype=ORACLE_DTYPE)
                rec["timestamp"] = columns["timestamp"][lo:hi]
                rec["obj_id"] = ids[lo:hi].view(np.uint64) if ids.dtype.kind == "i" else ids[lo:hi]
                rec["obj_size"] = columns["obj_size"][lo:hi]
                rec["next_access_vtime"] = nxt[lo:hi]
                rec.tofile(handle)

    atomic_write(path, write)  # an interrupted write leaves the old file whole
    return path


def oracle_records(path) -> int:
    """How many 24-byte records an oracleGeneral file holds (TraceFormatError when it is not
    a whole number of records or is empty)."""
    path = Path(path)
    size = data_size(path)
    n, rest = divmod(size, ORACLE_DTYPE.itemsize)
    if rest:
        raise TraceFormatError(path, f"truncated record: the file is {size} bytes, not a multiple of the 24-byte "
                                     f"oracleGeneral record ({rest} bytes left over)", line=n + 1, fix=_FIX)
    if n == 0:
        raise TraceFormatError(path, "no records", fix=_FIX)
    return n


def _first_bad(sizes, time, nxt, lo, last_t):
    """Index of the first record in a chunk that breaks a local rule, -1 if none (one pass
    over the strided record fields)."""
    for i in range(sizes.shape[0]):
        t = np.int64(time[i])
        v = nxt[i]
        if sizes[i] == 0 or t < last_t or (v != -1 and v != 9223372036854775807 and v <= lo + i):
            return i
        last_t = t
    return -1


_chunk_compiled = []


def _chunk_checker():
    if not _chunk_compiled:
        from sitsprof.common.jit import njit

        _chunk_compiled.append(njit(cache=True)(_first_bad))
    return _chunk_compiled[0]


def iter_oracle_chunks(path, chunk: int = 1 << 22):
    """Yield (index of the first record, records) over an oracleGeneral file, `chunk` records
    at a time, for a replay that streams (engine/stream.py): memory is one chunk (24 bytes a
    record), whatever the file's length. The yielded array is a reused buffer, valid until the
    next one.

    Checked record by record as the whole-file reader does, except what needs the whole file:
    obj_size > 0, timestamps non-decreasing (across chunks too), next_access_vtime "never"
    or after its own record; that the record it points at holds the same obj_id is not checked
    (it may lie in another chunk), nor is a bad record skipped: the first one is refused."""
    path = Path(path)
    n = oracle_records(path)
    last_t = -1
    for lo, records in _read_chunks(path, n, max(1, int(chunk))):
        sizes = records["obj_size"]
        time = records["timestamp"]
        nxt = records["next_access_vtime"]
        i = int(_chunk_checker()(sizes, time, nxt, lo, last_t))
        if i >= 0:
            if sizes[i] == 0:
                problem = _problem_text(_SIZE0, 0, None, None, None, 0, n)
            elif (i == 0 and int(time[0]) < last_t) or (i > 0 and time[i] < time[i - 1]):
                problem = (f"timestamp {int(time[i])} is earlier than the record before it; oracleGeneral "
                           "records are in time order")
            else:
                problem = (f"next_access_vtime {int(nxt[i])} does not point after this record; it must be -1 "
                           "(no next access) or a later record")
            raise TraceFormatError(path, problem, line=f"record {lo + i + 1}", fix=_FIX)
        last_t = int(time[-1])
        yield lo, records
