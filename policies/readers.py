"""Trace readers and writers: Mooncake JSONL, libCacheSim oracleGeneral binary, CSV -> `Trace`.

Formats
-------
mooncake  One JSON object a line: `timestamp` (ms from the trace start), `input_length` and
          `output_length` (tokens) and `hash_ids` (one id per 512-token block of the prompt; an
          id names the block together with its whole prefix). Each line is one request; its
          blocks are its references, in order. Every block carries 512 tokens except the
          last, which carries `input_length - 512*(n-1)` clamped to [1, 512].
oracle    libCacheSim's oracleGeneral binary: 24-byte little-endian records
          `<u4 timestamp, <u8 obj_id, <u4 obj_size, <i8 next_access_vtime>`. Each record is
          one request of one block; `obj_size` becomes the reference's token weight.
csv       `timestamp,obj_id[,size][,tenant]`, header optional (with a header the columns may
          come in any order: timestamp|time|ts, obj_id|id|block|block_id, size|obj_size|tokens,
          tenant|model_stack|stack). Each row is one request of one block; timestamp in
          seconds; size (default 1) is the token weight; tenant is any label.
requests  The DESIGN.md request format, one JSON object a line: `model_stack`,
          `input_tokens`, `max_new_tokens` (and `request_id`, `priority_class`), plus the
          block ids to replay, `hash_ids`, and optionally `arrival_ms` and `output_tokens`
          (what `sitsprof policy generate --as requests` writes). Tenant = model stack.
          A `.jsonl` file whose first object has `model_stack` is read as this format.

Dense block ids come from one compiled factorisation (`factorize.py`, first-appearance
order), never a Python dict per id. Bad input raises `TraceFormatError` naming the file,
the line (or record) and the problem; with `skip_bad_lines=True` bad lines are dropped,
counted in `Trace.skipped_lines`, and the first few are kept in `Trace.skipped_examples`.
"""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np

from .errors import TraceFormatError
from .trace import DEFAULT_BLOCK_TOKENS, Trace

FORMATS: tuple[str, ...] = ("mooncake", "oracle", "csv", "requests")

# libCacheSim oracleGeneral record; a packed structured dtype is exactly 24 bytes.
ORACLE_DTYPE = np.dtype(
    [("timestamp", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access_vtime", "<i8")]
)
assert ORACLE_DTYPE.itemsize == 24

MAX_SKIP_EXAMPLES = 5
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT32_MAX = 2**31 - 1
_FORMAT_FIX = "pass --format mooncake, oracle, csv or requests"

_SUFFIXES = {
    ".jsonl": "mooncake",
    ".ndjson": "mooncake",
    ".json": "mooncake",
    ".csv": "csv",
    ".oraclegeneral": "oracle",
    ".oracle": "oracle",
    ".bin": "oracle",
}
_COMPRESSED = (".zst", ".gz", ".bz2", ".xz", ".lz4")


class _BadLines:
    """Raises on the first bad line, or (skip mode) counts them and keeps a few examples."""

    def __init__(self, path: Path, skip: bool):
        self.path = path
        self.skip = skip
        self.count = 0
        self.examples: list[str] = []

    def bad(self, line: int, problem: str, fix: str | None = None) -> None:
        if not self.skip:
            raise TraceFormatError(self.path, problem, line=line, fix=fix)
        self.count += 1
        if len(self.examples) < MAX_SKIP_EXAMPLES:
            self.examples.append(f"{self.path}:{line}: {problem}")

    def empty(self, what: str) -> TraceFormatError:
        """The error for a trace with nothing usable in it."""
        if self.count:
            return TraceFormatError(
                self.path,
                f"no valid {what}: all {self.count} were bad (first: {self.examples[0]})",
            )
        return TraceFormatError(self.path, f"empty trace: no {what}")


def dense_ids(original: np.ndarray) -> tuple[np.ndarray, int]:
    """Factorise ids into dense int32 codes 0..k-1 in order of first appearance; returns (codes, k).

    Integer ids go through the compiled factorisation in `factorize.py` (the codes of
    `pandas.factorize(ids, sort=False)`, without importing pandas); uint64 ids are taken as
    their int64 bit patterns, which keeps them distinct and in the same order. Anything else
    (floats, objects) falls back to pandas.factorize."""
    ids = np.asarray(original)
    if ids.dtype.kind in "iub" and ids.ndim == 1 and len(ids) <= _INT32_MAX:
        from .factorize import factorize_int64

        if ids.dtype == np.uint64:
            ids = ids.view(np.int64)
        return factorize_int64(ids)
    import pandas as pd

    codes, uniques = pd.factorize(ids, sort=False)
    if len(uniques) > _INT32_MAX:
        raise TraceFormatError("<trace>", f"{len(uniques)} distinct blocks do not fit int32 ids")
    return codes.astype(np.int32, copy=False), len(uniques)


def constant_column(value, n: int, dtype) -> np.ndarray:
    """A read-only length-`n` column holding `value` everywhere, in no memory (zero stride)."""
    return np.broadcast_to(np.asarray(value, dtype=dtype), (n,))


def trace_from_ids(
    obj_ids,
    times=None,
    tokens=None,
    tenant=None,
    tenant_names: tuple[str, ...] = (),
    source: str = "",
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
) -> Trace:
    """A Trace where every reference is its own request (oracle/CSV style, synthetic traces).

    `request` is then 0..n-1 as int32 (int64 past 2^31 references) and the columns that are
    the same for every reference (position 0; tokens 1 and tenant -1 when not given) are
    read-only zero-stride views, so a trace costs about 20 bytes a reference plus its times
    (docs/CONTRACTS.md, `Trace`)."""
    original = np.ascontiguousarray(obj_ids)
    if original.dtype == np.uint64:
        original = original.view(np.int64)
    original = original.astype(np.int64, copy=False)
    n = len(original)
    block, n_blocks = dense_ids(original)
    return Trace(
        time=constant_column(0.0, n, np.float64) if times is None else np.asarray(times, dtype=np.float64),
        request=np.arange(n, dtype=np.int32 if n <= _INT32_MAX else np.int64),
        block=block,
        original_id=original,
        position=constant_column(0, n, np.int32),
        tokens=constant_column(1, n, np.int32) if tokens is None else np.asarray(tokens, dtype=np.int32),
        tenant=constant_column(-1, n, np.int32) if tenant is None else np.asarray(tenant, dtype=np.int32),
        tenant_names=tuple(tenant_names),
        source=source,
        block_tokens=block_tokens,
        n_blocks=n_blocks,
    )


# --------------------------------------------------------------------------- dispatch


def detect_format(path) -> str:
    """The trace format of `path`, from its extension, else from its first bytes."""
    path = Path(path)
    name = path.name.lower()
    if name.endswith(_COMPRESSED):
        raise TraceFormatError(path, "compressed traces are not read directly", fix="decompress it first")
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix):
            return _sniff_jsonl(path) if fmt == "mooncake" else fmt
    with open(path, "rb") as handle:
        head = handle.read(4096)
    if not head.strip():
        raise TraceFormatError(path, "empty trace: the file has no data")
    if b"\x00" in head:
        return "oracle"
    text = head.lstrip()
    if text.startswith(b"{"):
        return _sniff_jsonl(path)
    first_line = text.split(b"\n", 1)[0]
    if b"," in first_line:
        return "csv"
    raise TraceFormatError(path, "cannot tell the trace format from its name or content", fix=_FORMAT_FIX)


def _sniff_jsonl(path: Path) -> str:
    """'requests' when the first JSON object has a `model_stack` field, else 'mooncake'."""
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                try:
                    first = json.loads(raw)
                except ValueError:
                    return "mooncake"  # the reader reports the bad line
                return "requests" if isinstance(first, dict) and "model_stack" in first else "mooncake"
    return "mooncake"


def read_trace(
    path,
    format: str | None = None,  # noqa: A002 - mirrors the CLI's --format
    skip_bad_lines: bool = False,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
) -> Trace:
    """Read a trace file in any supported format (auto-detected when `format` is None)."""
    try:
        return _read_trace(Path(path), format, skip_bad_lines, block_tokens)
    except OSError as exc:  # unreadable file, vanished mid-read, ...
        raise TraceFormatError(path, f"cannot read the file: {exc.strerror or exc}") from None


def _read_trace(path: Path, format, skip_bad_lines: bool, block_tokens: int) -> Trace:  # noqa: A002
    if not path.exists():
        raise TraceFormatError(path, "no such file")
    if path.is_dir():
        raise TraceFormatError(path, "is a directory, not a trace file")
    if format is None:
        fmt = detect_format(path)
    else:
        fmt = str(format).strip().lower()
        if fmt == "oraclegeneral":
            fmt = "oracle"
        if fmt not in FORMATS:
            raise TraceFormatError(path, f"unknown trace format {format!r}", fix=_FORMAT_FIX)
    if fmt == "mooncake":
        return read_mooncake(path, skip_bad_lines=skip_bad_lines, block_tokens=block_tokens)
    if fmt == "oracle":
        return read_oracle(path, skip_bad_lines=skip_bad_lines)
    if fmt == "requests":
        return read_requests(path, skip_bad_lines=skip_bad_lines, block_tokens=block_tokens)
    return read_csv(path, skip_bad_lines=skip_bad_lines)


# --------------------------------------------------------------------------- Mooncake JSONL

_MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def _is_int(value) -> bool:
    return type(value) is int  # bool is a subclass of int and is not a count


def _mooncake_problem(row) -> str | None:
    """Why a parsed Mooncake line is unusable, or None when it is fine."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got {type(row).__name__}"
    for name in _MOONCAKE_FIELDS:
        if name not in row:
            return f"missing field {name!r}"
    ts = row["timestamp"]
    if not (_is_int(ts) or type(ts) is float) or not math.isfinite(ts):
        return f"timestamp must be a number of milliseconds, got {ts!r}"
    if ts < 0:
        return f"negative timestamp {ts!r}"
    for name in ("input_length", "output_length"):
        value = row[name]
        if not _is_int(value):
            return f"{name} must be an integer token count, got {value!r}"
        if value < 0:
            return f"negative size: {name} is {value}"
    return _hash_ids_problem(row["hash_ids"])


def _hash_ids_problem(ids) -> str | None:
    if not isinstance(ids, list):
        return f"hash_ids must be a list of integers, got {type(ids).__name__}"
    if not ids:
        return "hash_ids is empty (a request needs at least one block)"
    if not all(type(h) is int for h in ids):
        bad = next(h for h in ids if type(h) is not int)
        return f"hash_ids holds a non-integer id {bad!r}"
    if min(ids) < _INT64_MIN or max(ids) > _INT64_MAX:
        return "hash_ids holds an id outside the 64-bit integer range"
    return None


def _jsonl_rows(path: Path, bad: _BadLines, problem_of):
    """The parsed objects of a JSONL file that `problem_of` finds nothing wrong with."""
    loads = json.loads
    with open(path, "rb") as handle:
        for lineno, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                row = loads(raw)
            except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
                detail = getattr(exc, "msg", None) or type(exc).__name__
                bad.bad(lineno, f"not valid JSON ({detail})")
                continue
            problem = problem_of(row)
            if problem is not None:
                bad.bad(lineno, problem)
                continue
            yield row


def read_mooncake(path, skip_bad_lines: bool = False, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> Trace:
    """Read a Mooncake JSONL trace: one request a line, one reference per hash id."""
    path = Path(path)
    bad = _BadLines(path, skip_bad_lines)
    stamps: list = []
    inputs: list[int] = []
    outputs: list[int] = []
    id_lists: list[list[int]] = []
    for row in _jsonl_rows(path, bad, _mooncake_problem):
        stamps.append(row["timestamp"])
        inputs.append(row["input_length"])
        outputs.append(row["output_length"])
        id_lists.append(row["hash_ids"])
    if not id_lists:
        raise bad.empty("requests")

    trace = trace_from_requests(
        id_lists, stamps, inputs, outputs, source=str(path), block_tokens=block_tokens
    )
    return _with_skips(trace, bad) if bad.count else trace


_REQUEST_HASH_FIX = "the request format needs block ids to be replayed; `sitsprof policy generate --as requests` writes them"


def _request_problem(row) -> str | None:
    """Why a parsed DESIGN.md request line is unusable, or None when it is fine."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got {type(row).__name__}"
    for name in ("model_stack", "input_tokens", "max_new_tokens"):
        if name not in row:
            return f"missing field {name!r}"
    if "hash_ids" not in row:
        return f"missing field 'hash_ids' ({_REQUEST_HASH_FIX})"
    if not isinstance(row["model_stack"], str) or not row["model_stack"]:
        return f"model_stack must be a non-empty string, got {row['model_stack']!r}"
    for name in ("input_tokens", "max_new_tokens", "output_tokens", "arrival_ms"):
        if name not in row:
            continue
        value = row[name]
        if not (_is_int(value) or (name == "arrival_ms" and type(value) is float and math.isfinite(value))):
            return f"{name} must be an integer, got {value!r}"
        if value < 0:
            return f"negative size: {name} is {value}"
    return _hash_ids_problem(row["hash_ids"])


def read_requests(path, skip_bad_lines: bool = False, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> Trace:
    """Read DESIGN.md request JSONL carrying `hash_ids`; tenant = model stack."""
    import pandas as pd

    path = Path(path)
    bad = _BadLines(path, skip_bad_lines)
    stamps: list = []
    inputs: list[int] = []
    outputs: list[int] = []
    stacks: list[str] = []
    id_lists: list[list[int]] = []
    for row in _jsonl_rows(path, bad, _request_problem):
        stamps.append(row.get("arrival_ms", 0))
        inputs.append(row["input_tokens"])
        outputs.append(row.get("output_tokens", -1))
        stacks.append(row["model_stack"])
        id_lists.append(row["hash_ids"])
    if not id_lists:
        raise bad.empty("requests")
    codes, names = pd.factorize(np.asarray(stacks, dtype=object), sort=False)
    trace = trace_from_requests(
        id_lists, stamps, inputs, outputs, tenant=codes, tenant_names=tuple(str(n) for n in names),
        source=str(path), block_tokens=block_tokens,
    )
    return _with_skips(trace, bad) if bad.count else trace


def trace_from_requests(
    hash_ids,
    arrival_ms,
    input_tokens,
    output_tokens=None,
    tenant=None,
    tenant_names: tuple[str, ...] = (),
    source: str = "",
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
) -> Trace:
    """A Trace of multi-block requests, Mooncake style: one reference per hash id.

    hash_ids: one sequence of block ids per request; arrival_ms, input_tokens, output_tokens
    and tenant (codes into tenant_names): one value per request. Every block carries
    `block_tokens` tokens except a request's last: `input - block_tokens*(n-1)` in [1, block_tokens].
    """
    n_per = np.fromiter((len(ids) for ids in hash_ids), dtype=np.int64, count=len(hash_ids))
    total = int(n_per.sum())
    ends = np.cumsum(n_per)
    request = np.repeat(np.arange(len(n_per), dtype=np.int64), n_per)
    position = (np.arange(total, dtype=np.int64) - np.repeat(ends - n_per, n_per)).astype(np.int32)
    tokens = np.full(total, block_tokens, dtype=np.int32)
    last = np.asarray(input_tokens, dtype=np.int64) - block_tokens * (n_per - 1)
    tokens[ends - 1] = np.clip(last, 1, block_tokens)
    original = np.fromiter(itertools.chain.from_iterable(hash_ids), dtype=np.int64, count=total)
    block, n_blocks = dense_ids(original)
    per_request_tenant = np.full(len(n_per), -1) if tenant is None else np.asarray(tenant)
    return Trace(
        time=np.repeat(np.asarray(arrival_ms, dtype=np.float64) / 1000.0, n_per),
        request=request,
        block=block,
        original_id=original,
        position=position,
        tokens=tokens,
        tenant=np.repeat(per_request_tenant.astype(np.int32), n_per),
        tenant_names=tuple(tenant_names),
        request_output_tokens=None if output_tokens is None else np.asarray(output_tokens, dtype=np.int64),
        source=source,
        block_tokens=block_tokens,
        n_blocks=n_blocks,
    )


# --------------------------------------------------------------------------- oracleGeneral


def read_oracle(path, skip_bad_lines: bool = False, chunk: int = 1 << 18) -> Trace:
    """Read a libCacheSim oracleGeneral binary trace (one reference per record).

    Records are read in chunks into one reused buffer and split straight into the columns,
    so the peak is the columns plus one chunk (6 MB). When every record has the same size
    (as in most cache traces: size 1) `tokens` is a constant zero-stride column."""
    path = Path(path)
    bad = _BadLines(path, skip_bad_lines)
    size = path.stat().st_size
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
    with open(path, "rb", buffering=0) as handle:
        for lo in range(0, n, len(buf)):
            hi = min(n, lo + len(buf))
            want = (hi - lo) * ORACLE_DTYPE.itemsize
            got = 0
            while got < want:
                step = handle.readinto(raw[got:want])
                if not step:
                    raise TraceFormatError(path, f"the file ended at record {lo + got // 24 + 1} of {n} while being read")
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
                tokens[:lo] = min(first_size, _INT32_MAX)
            tokens[lo:hi] = np.minimum(sizes, _INT32_MAX)
    if tokens is None:
        tokens = constant_column(min(first_size, _INT32_MAX), n, np.int32)
    trace = trace_from_ids(obj_id, times=time, tokens=tokens, source=str(path))
    if bad.count:
        return _with_skips(trace, bad)
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
    with open(path, "wb") as handle:
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            rec = np.empty(hi - lo, dtype=ORACLE_DTYPE)
            rec["timestamp"] = columns["timestamp"][lo:hi]
            rec["obj_id"] = ids[lo:hi].view(np.uint64) if ids.dtype.kind == "i" else ids[lo:hi]
            rec["obj_size"] = columns["obj_size"][lo:hi]
            rec["next_access_vtime"] = nxt[lo:hi]
            rec.tofile(handle)
    return path


# --------------------------------------------------------------------------- CSV

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
    with open(path, encoding="utf-8-sig", errors="replace") as handle:
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
        frame = pd.read_csv(
            path, header=None, names=columns, skiprows=skip, dtype={c: dtypes[c] for c in columns},
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
        frame["obj_id"].to_numpy(), times=times, tokens=np.minimum(sizes, _INT32_MAX).astype(np.int32),
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
    bad = _BadLines(path, skip_bad_lines)
    columns: list[str] | None = None
    times: list[float] = []
    ids: list[int] = []
    sizes: list[int] = []
    tenants: list[str] = []
    with open(path, encoding="utf-8-sig", errors="replace") as handle:
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
                bad.bad(lineno, f"timestamp {row['timestamp']!r} is not a number")
                continue
            if not math.isfinite(ts) or ts < 0:
                bad.bad(lineno, f"timestamp {row['timestamp']!r} must be a finite number >= 0")
                continue
            try:
                obj = int(row["obj_id"])
            except ValueError:
                bad.bad(lineno, f"obj_id {row['obj_id']!r} is not an integer")
                continue
            if not _INT64_MIN <= obj <= _INT64_MAX:
                bad.bad(lineno, f"obj_id {obj} is outside the 64-bit integer range")
                continue
            size = 1
            if "size" in row:
                try:
                    size = int(row["size"])
                except ValueError:
                    bad.bad(lineno, f"size {row['size']!r} is not an integer")
                    continue
                if size < 0:
                    bad.bad(lineno, f"negative size {size}")
                    continue
                size = min(size, _INT32_MAX)
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
        np.asarray(ids, dtype=np.int64),
        times=np.asarray(times, dtype=np.float64),
        tokens=np.asarray(sizes, dtype=np.int32),
        tenant=tenant,
        tenant_names=names,
        source=str(path),
    )
    return _with_skips(trace, bad) if bad.count else trace


def _with_skips(trace: Trace, bad: _BadLines) -> Trace:
    import dataclasses

    return dataclasses.replace(trace, skipped_lines=bad.count, skipped_examples=tuple(bad.examples))


def write_csv(path, trace: Trace) -> Path:
    """Write a trace as `timestamp,obj_id,size,tenant` CSV (one row per reference)."""
    path = Path(path)
    names = np.asarray(list(trace.tenant_names) + [""], dtype=object)
    tenant = names[np.where(trace.tenant >= 0, trace.tenant, len(names) - 1)]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("timestamp,obj_id,size,tenant\n")
        for row in zip(trace.time.tolist(), trace.original_id.tolist(), trace.tokens.tolist(), tenant):
            handle.write(f"{row[0]!r},{row[1]},{row[2]},{row[3]}\n")
    return path


__all__ = [
    "FORMATS",
    "ORACLE_DTYPE",
    "dense_ids",
    "detect_format",
    "next_access_vtime",
    "read_csv",
    "read_mooncake",
    "read_oracle",
    "read_requests",
    "read_trace",
    "trace_from_ids",
    "trace_from_requests",
    "write_csv",
    "write_oracle_general",
]
