"""libCacheSim's oracleGeneral binary traces, read and written, for comparison with libCacheSim.

24-byte little-endian records `<u4 timestamp, <u8 obj_id, <u4 obj_size, <i8 next_access_vtime>`.
Each record is one request of one block; `obj_size` becomes the reference's token weight.
Writing computes `next_access_vtime`, which libCacheSim's oracle policies read.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from sitsprof.common.atomic import atomic_write

from ..errors import TraceFormatError
from .ids import INT32_MAX, constant_column, dense_ids, trace_from_ids
from .lines import BadLines, with_skips
from .opening import data_size, open_binary
from .trace import Trace

# libCacheSim oracleGeneral record; a packed structured dtype is exactly 24 bytes.
ORACLE_DTYPE = np.dtype(
    [("timestamp", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access_vtime", "<i8")]
)
assert ORACLE_DTYPE.itemsize == 24


def read_oracle(path, skip_bad_lines: bool = False, chunk: int = 1 << 18) -> Trace:
    """Read a libCacheSim oracleGeneral binary trace (one reference per record).

    Records are read in chunks into one reused buffer and split straight into the columns,
    so the peak is the columns plus one chunk (6 MB). When every record has the same size
    (as in most cache traces: size 1) `tokens` is a constant zero-stride column."""
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
    obj_id = np.empty(n, dtype=np.int64)
    time = np.empty(n, dtype=np.float64)
    tokens = None  # allocated only once two records differ in size
    first_size = None
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
            records = buf[: hi - lo]
            obj_id[lo:hi] = records["obj_id"].view(np.int64)
            time[lo:hi] = records["timestamp"]
            sizes = records["obj_size"]
            if tokens is None:
                if first_size is None:
                    first_size = int(sizes[0])
                if int(sizes.min()) == first_size == int(sizes.max()):
                    continue
                tokens = np.empty(n, dtype=np.int32)
                tokens[:lo] = min(first_size, INT32_MAX)
            tokens[lo:hi] = np.minimum(sizes, INT32_MAX)
    if tokens is None:
        tokens = constant_column(min(first_size, INT32_MAX), n, np.int32)
    trace = trace_from_ids(obj_id, times=time, tokens=tokens, source=str(path))
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
    for name, values, default in (
        ("timestamp", timestamps, None),
        ("obj_size", sizes, 1),
    ):
        if values is None:
            columns[name] = np.arange(n, dtype=np.int64) if default is None else np.full(n, default)
            continue
        arr = np.asarray(values)
        if len(arr) != n:
            raise TraceFormatError(path, f"{name} has {len(arr)} entries, obj_ids has {n}")
        if arr.dtype.kind not in "iu" or (arr.size and (arr.min() < 0 or arr.max() > 2**32 - 1)):
            raise TraceFormatError(path, f"{name} must be integers in [0, 2**32)")
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
