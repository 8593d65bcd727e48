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

A full disk must not leave a run saying `running` forever: `create()` sets aside a small
reserve file that `finish()` deletes just before the last meta.json, so the run can always
say how it ended, and refuses to start (leaving nothing behind) when even that does not fit.
`finish()` holds off SIGINT/SIGTERM until the run is marked, then lets them act.
"""
from __future__ import annotations

import datetime as _dt
import errno
import os
import re
import secrets
import shlex
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from sitsprof.collectors.errors import DamagedTableError, DiskFullError, RunDirectoryError, RunWriteError
from sitsprof.common import jsonout
from sitsprof.common.atomic import atomic_write
from sitsprof.common.errors import SitsprofError
from sitsprof.common.jsonin import JsonFileError, read_json_file
from sitsprof.common.signals import Terminated, signals_deferred

__all__ = [
    "KINDS",
    "META",
    "RESERVE",
    "SCHEMA_VERSION",
    "RunDirectory",
    "describe_exception",
    "inspect_run",
    "open_run",
    "tool_version",
    "utc_now",
    "write_error",
]

SCHEMA_VERSION = 1
KINDS = ("probe", "sampler")
META = "meta.json"
RESERVE = ".sitsprof-reserve"
_RESERVE_BYTES = 64 * 1024  # many times a meta.json
_FULL = (errno.ENOSPC, errno.EDQUOT)
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


def write_error(exc: OSError, path=None) -> RunWriteError:
    """The one-line error for a run directory write that failed, naming the file and the fix."""
    target = getattr(exc, "filename", None) or path
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno in _FULL:
        reason, hint = reason[0].lower() + reason[1:], "free space or choose another --out"
        error = DiskFullError(f"{target}: {reason} ({hint})")
    else:
        hint = "choose another --out"
        error = RunWriteError(f"cannot write {target}: {reason} ({hint})")
    error.target, error.reason, error.hint = target, reason, hint
    return error


def describe_exception(exc: BaseException) -> str:
    """What meta.json's `error` says: the message of a user-facing error or a signal, else `Type: message`."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by signal 2 (SIGINT)"
    if isinstance(exc, (Terminated, SitsprofError)):
        return str(exc)
    if isinstance(exc, SystemExit):
        return f"exited with status {exc.code}"
    return f"{type(exc).__name__}: {exc}"


def _missing_folders(folder: Path) -> list[Path]:
    """The folders `mkdir -p folder` would create, innermost first."""
    missing = []
    while not folder.exists() and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    return missing


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
    def create(cls, parent, name: str | None = None, meta: dict | None = None) -> RunDirectory:
        parent = Path(parent)
        if name is None:
            stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            name = f"run-{stamp}-{secrets.token_hex(3)}"
        if not _NAME_RE.match(name):
            raise RunDirectoryError(f"run name {name!r}: use letters, digits, '.', '_' and '-' only")
        path = parent / name
        made = _missing_folders(parent)
        try:
            parent.mkdir(parents=True, exist_ok=True)
            path.mkdir()
        except FileExistsError:
            if not parent.is_dir():
                raise RunDirectoryError(f"{parent}: is a file, not a folder (choose another --out)") from None
            raise RunDirectoryError(f"{path}: already exists (choose another --name or remove it)") from None
        except OSError as exc:
            _remove_empty(made)
            if exc.errno in _FULL:
                raise write_error(exc, path) from None
            raise RunDirectoryError(f"{path}: cannot create the run directory: {exc.strerror or exc} "
                                    "(choose another --out)") from None
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
        try:
            run._reserve()
            run._write_meta()
        except RunWriteError:  # a disk full before the run starts: leave nothing behind
            import shutil

            shutil.rmtree(path, ignore_errors=True)
            _remove_empty(made)
            raise
        return run

    def _reserve(self) -> None:
        target = self.path / RESERVE
        try:
            with open(target, "wb") as handle:
                handle.write(bytes(_RESERVE_BYTES))
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            exc.filename = None  # the user's run directory, not sitsprof's bookkeeping file
            raise write_error(exc, self.path) from exc

    def _release_reserve(self) -> None:
        try:
            (self.path / RESERVE).unlink(missing_ok=True)
        except OSError:
            pass

    def _atomic(self, target: Path, write) -> None:
        """`atomic_write`, its failure as a RunWriteError (DiskFullError on a full disk)."""
        try:
            atomic_write(target, write)
        except OSError as exc:
            raise write_error(exc, target) from exc

    def _folder(self, folder: Path) -> Path:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(exc, folder) from exc
        return folder

    def _write_meta(self) -> None:
        with self._lock:
            text = jsonout.dumps(self.meta, indent=2, sort_keys=False, default=str) + "\n"
            self._atomic(self.path / META, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))

    def update_meta(self, **fields) -> None:
        """Merge `fields` into meta.json (written atomically at once)."""
        with self._lock:
            self.meta.update(fields)
            self._write_meta()

    def _record_table(self, kind: str, name: str, rows: int, parts: int | None = None,
                      write_meta: bool = True) -> None:
        entry = {"rows": rows, "file": f"{kind}s/{name}.parquet"}
        if parts is not None:
            entry = {"rows": rows, "file": f"{kind}s/{name}.parts/", "parts": parts}
        self.meta.setdefault("tables", {}).setdefault(f"{kind}s", {})[name] = entry
        if write_meta:
            self._write_meta()

    def write_table(self, name: str, frame, kind: str = "probe", write_meta: bool = True) -> Path:
        """Write `<kind>s/<name>.parquet` atomically (replaces an earlier one of that name)."""
        import pyarrow.parquet as pq

        _check(name, kind)
        table = _to_arrow(frame)
        folder = self._folder(self.path / f"{kind}s")
        target = folder / f"{name}.parquet"
        self._atomic(target, lambda tmp: pq.write_table(table, tmp))
        with self._lock:
            self._record_table(kind, name, table.num_rows, write_meta=write_meta)
        return target

    def append_table(self, name: str, frame, kind: str = "sampler", write_meta: bool = True) -> Path | None:
        """Flush one chunk of a growing table as its own part file (merged by `finish`).

        The rows count in meta.json only once the part is on disk; with `write_meta=False` they
        are counted in memory and written with the next meta.json (the recorder's, once a flush)."""
        import pyarrow.parquet as pq

        _check(name, kind)
        table = _to_arrow(frame)
        if table.num_rows == 0:
            return None
        folder = self._folder(self.path / f"{kind}s" / f"{name}.parts")
        with self._lock:
            index = self._parts.get((kind, name))
            if index is None:  # continue after parts written by an earlier process
                index = len(list(folder.glob("part-*.parquet")))
            target = folder / f"part-{index:05d}.parquet"
            self._atomic(target, lambda tmp: pq.write_table(table, tmp))
            self._parts[(kind, name)] = index + 1  # only once written: part numbers have no gaps
            previous = self.meta.get("tables", {}).get(f"{kind}s", {}).get(name, {}).get("rows", 0)
            self._record_table(kind, name, previous + table.num_rows, parts=index + 1, write_meta=write_meta)
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
                    self.write_table(name, table, kind=kind, write_meta=False)
                shutil.rmtree(parts, ignore_errors=True)

    def finish(self, status: str = "complete", **fields) -> None:
        """Merge flushed parts, set `status`, `complete` (true only for "complete") and `ended_at`.

        SIGINT/SIGTERM wait until meta.json says how the run ended, then act."""
        with signals_deferred(), self._lock:
            try:
                self._merge_parts()  # parts stay readable as they are if this fails
            except Exception as exc:  # noqa: BLE001 - never hide the run's own outcome
                fields.setdefault("merge_error", describe_exception(exc))
            self.meta.update(fields)
            self.meta["status"] = status
            self.meta["complete"] = status == "complete"
            self.meta["ended_at"] = utc_now()
            self._release_reserve()  # room for this last meta.json on a full disk
            self._write_meta()

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        with signals_deferred():
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
            self.finish(status, error=None if status == "complete" else describe_exception(exc))
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
        # a parts folder is made just before its first part is written: a run killed between the
        # two (SIGKILL) leaves it empty, which is no table yet, not a damaged one
        names |= {p.name[: -len(".parts")] for p in folder.glob("*.parts")
                  if p.is_dir() and any(p.glob("part-*.parquet"))}
        return sorted(names)

    def read_arrow(self, name: str, kind: str = "probe"):
        import pyarrow.parquet as pq

        _check(name, kind)
        folder = self.path / f"{kind}s"
        whole = folder / f"{name}.parquet"
        try:
            if whole.exists():
                return pq.read_table(whole)
            table = _read_parts(folder / f"{name}.parts")
        except (OSError, ValueError, TypeError) as exc:  # pyarrow's ArrowInvalid/ArrowTypeError among them
            where = whole if whole.exists() else folder / f"{name}.parts"
            detail = str(exc).splitlines()[0].replace(f"Could not open Parquet input source '{where}': ", "")
            raise DamagedTableError(f"{where}: damaged {kind} table: {detail[:200]} "
                                    "(the file is truncated or not Parquet; `sitsprof inspect` lists what is "
                                    "readable)") from None
        if table is None:
            have = ", ".join(self.tables(kind)) or "none"
            raise RunDirectoryError(f"{self.path}: no {kind} table named {name!r} (have: {have})")
        return table

    def read_table(self, name: str, kind: str = "probe"):
        """The table as a pandas DataFrame (parts of an unfinished run are concatenated)."""
        table = self.read_arrow(name, kind)
        try:
            return table.to_pandas()
        except (ValueError, TypeError) as exc:  # e.g. a flipped bit in a string column: not UTF-8
            raise DamagedTableError(f"{self.path / f'{kind}s' / name}: damaged {kind} table: "
                                    f"{str(exc).splitlines()[0][:200]}") from None

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


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders that `create` made and left empty, innermost first."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


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
        meta = read_json_file(meta_path)
    except JsonFileError as exc:
        raise RunDirectoryError(f"{meta_path}: unreadable: {exc.problem}") from None
    if not isinstance(meta, dict) or "schema_version" not in meta:
        raise RunDirectoryError(f"{meta_path}: not a sitsprof meta.json (no schema_version)")
    version = meta["schema_version"]
    if type(version) is not int or version < 1:
        raise RunDirectoryError(f"{meta_path}: schema_version must be a whole number >= 1, got {str(version)[:40]!r} "
                                "(the file is damaged or not written by sitsprof)")
    if version > SCHEMA_VERSION:
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
    damaged = _damage(run, summary["tables"])
    if damaged:  # a run whose files are damaged is not complete, whatever meta.json says
        summary["complete"] = False
    summary["damaged"] = damaged
    return summary


def _damage(run: RunDirectory, tables: dict) -> dict:
    """{what: why} for each unreadable table, each table meta.json lists that is absent, and a
    meta.json whose fields have the wrong types."""
    damaged = {name: rows for name, rows in tables.items() if isinstance(rows, str)}
    listed = run.meta.get("tables")
    if not isinstance(listed, dict):
        damaged["meta.json"] = f"tables must be an object, got {type(listed).__name__}"
        listed = {}
    for group, entries in listed.items():
        if not isinstance(entries, dict):
            damaged["meta.json"] = f"tables.{group} must be an object, got {type(entries).__name__}"
            continue
        for name in entries:
            if f"{group}/{name}" not in tables:
                damaged[f"{group}/{name}"] = "listed in meta.json but absent"
    if not isinstance(run.meta.get("complete", False), bool) or not isinstance(run.meta.get("status", ""), str):
        damaged["meta.json"] = "status must be a string and complete true or false"
    return damaged
