"""The run directory: everything one run recorded, readable even when the run crashed.

Layout (documented in docs/run-directory.md)::

    <parent>/<name>/
        meta.json                     schema/tool version, status, complete flag, times, facts
        probes/<name>.parquet         one table per probe
        samplers/<name>.parquet       one table per sampler
        samplers/<name>.parts/part-NNNNN.parquet   flushed chunks while a sampler runs

Every file is written atomically (temporary file in the same folder, fsync, rename), so a
reader never sees half a file. `meta.json` says `complete: false` until `finish()`; a run that
was killed keeps whatever it had flushed and stays flagged incomplete.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import secrets
import shlex
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from sitsprof.collectors.errors import RunDirectoryError
from sitsprof.common.atomic import atomic_write, atomic_write_text

SCHEMA_VERSION = 1
KINDS = ("probe", "sampler")
META = "meta.json"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def utc_now() -> str:
    """The current time as ISO 8601 UTC with microseconds (the format used in meta.json)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


def tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sitsprof")
    except PackageNotFoundError:
        return "0+unknown"


def _to_arrow(frame: Any):
    import pyarrow as pa

    if isinstance(frame, pa.Table):
        return frame
    if isinstance(frame, dict):
        return pa.table(frame)
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency
        pd = None
    if pd is not None and isinstance(frame, pd.DataFrame):
        return pa.Table.from_pandas(frame, preserve_index=False)
    if isinstance(frame, list):
        return pa.Table.from_pylist(frame)
    raise TypeError(f"cannot write a {type(frame).__name__} as a table")


def _check(name: str, kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    if not _NAME_RE.match(name or ""):
        raise ValueError(f"table name {name!r}: use letters, digits, '.', '_' and '-' only")


class RunDirectory:
    """One run's folder. Create with `RunDirectory.create`, read with `open_run`."""

    def __init__(self, path: Path, meta: dict):
        self.path = Path(path)
        self.meta = meta
        self._lock = threading.RLock()
        self._parts: dict[tuple[str, str], int] = {}

    # -- write side ---------------------------------------------------------------------
    @classmethod
    def create(cls, parent, name: str | None = None, meta: dict | None = None) -> "RunDirectory":
        parent = Path(parent)
        if name is None:
            stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            name = f"run-{stamp}-{secrets.token_hex(3)}"
        if not _NAME_RE.match(name):
            raise RunDirectoryError(f"run name {name!r}: use letters, digits, '.', '_' and '-' only")
        path = parent / name
        try:
            parent.mkdir(parents=True, exist_ok=True)
            path.mkdir()
        except FileExistsError:
            raise RunDirectoryError(f"{path}: already exists (choose another --name or remove it)") from None
        except OSError as exc:
            raise RunDirectoryError(f"{path}: cannot create the run directory: {exc.strerror or exc}") from None
        body = {
            "schema_version": SCHEMA_VERSION,
            "tool_version": tool_version(),
            "status": "running",
            "complete": False,
            "started_at": utc_now(),
            "ended_at": None,
            "command_line": shlex.join(sys.argv),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "tables": {"probes": {}, "samplers": {}},
        }
        body.update(meta or {})
        run = cls(path, body)
        run._write_meta()
        return run

    def _write_meta(self) -> None:
        with self._lock:
            atomic_write_text(self.path / META, json.dumps(self.meta, indent=2, sort_keys=False, default=str) + "\n")

    def update_meta(self, **fields) -> None:
        """Merge `fields` into meta.json (written atomically at once)."""
        with self._lock:
            self.meta.update(fields)
            self._write_meta()

    def _record_table(self, kind: str, name: str, rows: int, parts: int | None = None) -> None:
        entry = {"rows": rows, "file": f"{kind}s/{name}.parquet"}
        if parts is not None:
            entry = {"rows": rows, "file": f"{kind}s/{name}.parts/", "parts": parts}
        self.meta.setdefault("tables", {}).setdefault(f"{kind}s", {})[name] = entry
        self._write_meta()

    def write_table(self, name: str, frame, kind: str = "probe") -> Path:
        """Write `<kind>s/<name>.parquet` atomically (replaces an earlier one of that name)."""
        import pyarrow.parquet as pq

        _check(name, kind)
        table = _to_arrow(frame)
        folder = self.path / f"{kind}s"
        folder.mkdir(exist_ok=True)
        target = folder / f"{name}.parquet"
        atomic_write(target, lambda tmp: pq.write_table(table, tmp))
        with self._lock:
            self._record_table(kind, name, table.num_rows)
        return target

    def append_table(self, name: str, frame, kind: str = "sampler") -> Path | None:
        """Flush one chunk of a growing table as its own part file (merged by `finish`)."""
        import pyarrow.parquet as pq

        _check(name, kind)
        table = _to_arrow(frame)
        if table.num_rows == 0:
            return None
        folder = self.path / f"{kind}s" / f"{name}.parts"
        folder.mkdir(parents=True, exist_ok=True)
        with self._lock:
            index = self._parts.get((kind, name))
            if index is None:  # continue after parts written by an earlier process
                index = len(list(folder.glob("part-*.parquet")))
            self._parts[(kind, name)] = index + 1
            target = folder / f"part-{index:05d}.parquet"
            atomic_write(target, lambda tmp: pq.write_table(table, tmp))
            previous = self.meta.get("tables", {}).get(f"{kind}s", {}).get(name, {}).get("rows", 0)
            self._record_table(kind, name, previous + table.num_rows, parts=index + 1)
        return target

    def _merge_parts(self) -> None:
        import shutil

        for kind in KINDS:
            folder = self.path / f"{kind}s"
            if not folder.is_dir():
                continue
            for parts in sorted(folder.glob("*.parts")):
                name = parts.name[: -len(".parts")]
                table = _read_parts(parts)
                if table is not None:
                    self.write_table(name, table, kind=kind)
                shutil.rmtree(parts, ignore_errors=True)

    def finish(self, status: str = "complete", **fields) -> None:
        """Merge flushed parts, set `status`, `complete` (true only for "complete") and `ended_at`."""
        with self._lock:
            try:
                self._merge_parts()  # parts stay readable as they are if this fails
            except Exception as exc:  # noqa: BLE001 - never hide the run's own outcome
                fields.setdefault("merge_error", f"{type(exc).__name__}: {exc}")
            self.meta.update(fields)
            self.meta["status"] = status
            self.meta["complete"] = status == "complete"
            self.meta["ended_at"] = utc_now()
            self._write_meta()

    def __enter__(self) -> "RunDirectory":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            if self.meta.get("status") == "running":
                self.finish("complete")
            return False
        if issubclass(exc_type, KeyboardInterrupt):
            status = "interrupted"
        elif issubclass(exc_type, SystemExit):
            status = "interrupted" if getattr(exc, "code", 0) not in (0, None) else "complete"
        else:
            status = "failed"
        error = None if status == "complete" else f"{exc_type.__name__}: {exc}"
        self.finish(status, error=error)
        return False

    # -- read side ----------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        return bool(self.meta.get("complete"))

    @property
    def status(self) -> str:
        return str(self.meta.get("status", "unknown"))

    def tables(self, kind: str = "probe") -> list[str]:
        """Names of the tables of one kind, whole files and flushed parts alike."""
        _check("x", kind)
        folder = self.path / f"{kind}s"
        if not folder.is_dir():
            return []
        names = {p.name[: -len(".parquet")] for p in folder.glob("*.parquet") if not p.name.startswith(".")}
        names |= {p.name[: -len(".parts")] for p in folder.glob("*.parts") if p.is_dir()}
        return sorted(names)

    def read_arrow(self, name: str, kind: str = "probe"):
        import pyarrow.parquet as pq

        _check(name, kind)
        folder = self.path / f"{kind}s"
        whole = folder / f"{name}.parquet"
        if whole.exists():
            return pq.read_table(whole)
        table = _read_parts(folder / f"{name}.parts")
        if table is None:
            raise RunDirectoryError(f"{self.path}: no {kind} table named {name!r} (have: {', '.join(self.tables(kind)) or 'none'})")
        return table

    def read_table(self, name: str, kind: str = "probe"):
        """The table as a pandas DataFrame (parts of an unfinished run are concatenated)."""
        return self.read_arrow(name, kind).to_pandas()

    def summary(self) -> dict:
        """Status, completeness and row counts, for `sitsprof inspect` and the reports."""
        out = {"path": str(self.path), "status": self.status, "complete": self.complete, "tables": {}}
        for kind in KINDS:
            for name in self.tables(kind):
                try:
                    rows = self.read_arrow(name, kind).num_rows
                except Exception as exc:  # noqa: BLE001 - a damaged file is reported, not fatal
                    rows = f"unreadable: {exc}"
                out["tables"][f"{kind}s/{name}"] = rows
        return out

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r}, status={self.status!r})"


def _read_parts(folder: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not folder.is_dir():
        return None
    files = sorted(p for p in folder.glob("part-*.parquet"))
    if not files:
        return None
    return pa.concat_tables([pq.read_table(p) for p in files], promote_options="default")


def open_run(path) -> RunDirectory:
    """Open a run directory for reading; raises RunDirectoryError naming what is wrong."""
    path = Path(path)
    meta_path = path / META
    if not meta_path.exists():
        raise RunDirectoryError(f"{path}: not a run directory (no {META})")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunDirectoryError(f"{meta_path}: unreadable: {exc}") from None
    if not isinstance(meta, dict) or "schema_version" not in meta:
        raise RunDirectoryError(f"{meta_path}: not a sitsprof meta.json (no schema_version)")
    if meta.get("schema_version", 0) > SCHEMA_VERSION:
        raise RunDirectoryError(
            f"{path}: schema version {meta['schema_version']} is newer than this sitsprof "
            f"understands ({SCHEMA_VERSION}); upgrade sitsprof"
        )
    return RunDirectory(path, meta)


def inspect_run(path) -> dict:
    """`sitsprof inspect`: the run's `summary()` with its start and end times and its error, if any."""
    run = open_run(path)
    summary = run.summary()
    summary["started_at"] = run.meta.get("started_at")
    summary["ended_at"] = run.meta.get("ended_at")
    summary["error"] = run.meta.get("error")
    return summary
