"""CSV traces, `timestamp,obj_id[,size][,tenant]`, read and written.

Header optional (with a header the columns may come in any order: timestamp|time|ts,
obj_id|id|block|block_id, size|obj_size|tokens, tenant|model_stack|stack). Each row is one
request of one block; timestamp in seconds; size (default 1) is the token weight; tenant is
any label. A clean file goes through pandas' C parser; any other is read again line by line
so that every problem names its line.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sitsprof.common.atomic import atomic_write

from ..errors import TraceFormatError
from .ids import INT32_MAX, hash_id_array, trace_from_ids
from .lines import INT64_MIN, UINT64_MAX, BadLines, shown, with_skips
from .opening import open_binary, open_text
from .trace import Trace

__all__ = ["read_csv", "write_csv"]

_CSV_NAMES = {
    "timestamp": "timestamp", "time": "timestamp", "ts": "timestamp",
    "obj_id": "obj_id", "id": "obj_id", "block": "obj_id", "block_id": "obj_id", "object": "obj_id",
    "size": "size", "obj_size": "size", "tokens": "size",
    "tenant": "tenant", "model_stack": "tenant", "stack": "tenant",
}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _csv_header(path: Path, fields: list[str], lineno: int) -> list[str]:
    names = []
    for field in fields:
        key = _CSV_NAMES.get(field.strip().lower())
        if key is None:
            raise TraceFormatError(
                path, f"unknown CSV column {field.strip()!r}", line=lineno,
                fix="columns are timestamp,obj_id[,size][,tenant]",
            )
        if key in names:
            raise TraceFormatError(path, f"CSV column {key!r} appears twice", line=lineno)
        names.append(key)
    for need in ("timestamp", "obj_id"):
        if need not in names:
            raise TraceFormatError(path, f"the CSV header has no {need!r} column", line=lineno)
    return names


def read_csv(path, skip_bad_lines: bool = False) -> Trace:
    """Read `timestamp,obj_id[,size][,tenant]` rows (header optional, '#' lines are comments).

    A clean file goes through pandas' C parser; anything it does not take as is (a comment,
    a bad or partial row, a negative size) is read again line by line, which names the line.
    """
    path = Path(path)
    fast = _read_csv_fast(path)
    if fast is not None:
        return fast
    return _read_csv_lines(path, skip_bad_lines)


def _csv_layout(path: Path) -> tuple[list[str], int] | None:
    """(columns, lines before the data) from the first line with content; None if unusual."""
    with open_text(path, encoding="utf-8-sig", errors="replace") as handle:
        for lineno, line in enumerate(handle, 1):
            text = line.strip()
            if not text:
                continue
            if text.startswith("#"):
                return None
            fields = [f.strip() for f in text.split(",")]
            if not _is_number(fields[0]):
                try:
                    return _csv_header(path, fields, lineno), lineno
                except TraceFormatError:
                    return None
            if not 2 <= len(fields) <= 4:
                return None
            return ["timestamp", "obj_id", "size", "tenant"][: len(fields)], lineno - 1
    return None


def _read_csv_fast(path: Path) -> Trace | None:
    """The trace when pandas reads the file cleanly and every value is valid, else None."""
    import pandas as pd

    layout = _csv_layout(path)
    if layout is None:
        return None
    columns, skip = layout
    dtypes = {"timestamp": np.float64, "obj_id": np.int64, "size": np.int64, "tenant": object}
    try:
        with open_binary(path) as handle:
            frame = pd.read_csv(
                handle, header=None, names=columns, skiprows=skip, dtype={c: dtypes[c] for c in columns},
                skipinitialspace=True, keep_default_na=False, na_values=[], encoding="utf-8-sig",
                encoding_errors="replace", engine="c",
            )
    except (ValueError, OverflowError, TypeError):  # ParserError is a ValueError
        return None
    if frame.empty or frame.isna().to_numpy().any():
        return None
    times = frame["timestamp"].to_numpy()
    if not np.all(np.isfinite(times)) or times.min() < 0:
        return None
    sizes = frame["size"].to_numpy() if "size" in frame else np.ones(len(frame), dtype=np.int64)
    if sizes.min() < 0:
        return None
    tenant, names = None, ()
    if "tenant" in frame:
        labels = frame["tenant"].astype(str).str.strip().to_numpy(dtype=object)
        tenant, names = _tenant_codes(labels)
    return trace_from_ids(
        frame["obj_id"].to_numpy(), times=times, tokens=np.minimum(sizes, INT32_MAX).astype(np.int32),
        tenant=tenant, tenant_names=names, source=str(path),
    )


def _tenant_codes(labels: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Tenant labels -> int32 codes in order of first appearance ("" -> -1) and the names."""
    import pandas as pd

    labels = labels.copy()
    labels[labels == ""] = None  # factorize codes missing values as -1
    codes, uniques = pd.factorize(labels, sort=False)
    return codes.astype(np.int32), tuple(str(u) for u in uniques)


def _read_csv_lines(path: Path, skip_bad_lines: bool) -> Trace:
    """The line-by-line CSV reader: exact line numbers for every problem."""
    bad = BadLines(path, skip_bad_lines)
    columns: list[str] | None = None
    times: list[float] = []
    ids: list[int] = []
    sizes: list[int] = []
    tenants: list[str] = []
    with open_text(path, encoding="utf-8-sig", errors="replace") as handle:
        for lineno, line in enumerate(handle, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            fields = [f.strip() for f in text.split(",")]
            if columns is None:
                if not _is_number(fields[0]):
                    columns = _csv_header(path, fields, lineno)
                    continue
                if not 2 <= len(fields) <= 4:
                    bad.bad(
                        lineno, f"expected 2 to 4 comma-separated fields, got {len(fields)}",
                        fix="columns are timestamp,obj_id[,size][,tenant]",
                    )
                    continue
                columns = ["timestamp", "obj_id", "size", "tenant"][: len(fields)]
            if len(fields) != len(columns):
                bad.bad(lineno, f"expected {len(columns)} fields ({','.join(columns)}), got {len(fields)}")
                continue
            row = dict(zip(columns, fields))
            try:
                ts = float(row["timestamp"])
            except ValueError:
                bad.bad(lineno, f"timestamp {shown(row['timestamp'])} is not a number")
                continue
            if not math.isfinite(ts) or ts < 0:
                bad.bad(lineno, f"timestamp {shown(row['timestamp'])} must be a finite number >= 0")
                continue
            try:
                obj = int(row["obj_id"])
            except ValueError:
                bad.bad(lineno, f"obj_id {shown(row['obj_id'])} is not an integer")
                continue
            if not INT64_MIN <= obj <= UINT64_MAX:  # unsigned 64-bit hashes (vLLM, SGLang) too
                bad.bad(lineno, f"obj_id {shown(obj)} is outside the 64-bit integer range")
                continue
            size = 1
            if "size" in row:
                try:
                    size = int(row["size"])
                except ValueError:
                    bad.bad(lineno, f"size {shown(row['size'])} is not an integer")
                    continue
                if size < 0:
                    bad.bad(lineno, f"negative size {size}")
                    continue
                size = min(size, INT32_MAX)
            times.append(ts)
            ids.append(obj)
            sizes.append(size)
            if "tenant" in row:
                tenants.append(row["tenant"])  # "" = unknown tenant
    if not ids:
        raise bad.empty("rows")
    tenant = None
    names: tuple[str, ...] = ()
    if tenants:
        tenant, names = _tenant_codes(np.asarray(tenants, dtype=object))
    trace = trace_from_ids(
        hash_id_array([ids], len(ids), str(path)),
        times=np.asarray(times, dtype=np.float64),
        tokens=np.asarray(sizes, dtype=np.int32),
        tenant=tenant,
        tenant_names=names,
        source=str(path),
    )
    return with_skips(trace, bad) if bad.count else trace


def write_csv(path, trace: Trace) -> Path:
    """Write a trace as `timestamp,obj_id,size,tenant` CSV (one row per reference)."""
    path = Path(path)
    names = np.asarray(list(trace.tenant_names) + [""], dtype=object)
    tenant = names[np.where(trace.tenant >= 0, trace.tenant, len(names) - 1)]

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write("timestamp,obj_id,size,tenant\n")
            for row in zip(trace.time.tolist(), trace.original_id.tolist(), trace.tokens.tolist(), tenant):
                handle.write(f"{row[0]!r},{row[1]},{row[2]},{row[3]}\n")

    atomic_write(path, write)  # an interrupted write leaves the old file whole
    return path
