"""Write a file so that a reader sees the old content or the new, never half of either.

A temporary file beside the target, fsync, rename over the target, fsync the folder: a crash
or a full disk at any point leaves the previous file (or none) in place. Every file sitsprof
writes goes through here, so this is also where a full disk, a read-only folder or a path
under a file becomes one user-facing OutputError instead of an internal error.
"""
from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path

from sitsprof.common.errors import OutputError

__all__ = ["atomic_write", "atomic_write_text", "fsync_dir", "make_folder"]


def fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable; a folder that cannot be opened (some filesystems) is skipped."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object]) -> None:
    """Call `write(tmp_path)` then fsync and rename the result over `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # e.g. the folder is missing or read-only: nothing to remove
            pass
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise OutputError.from_os_error(path, exc) from exc
        raise
    fsync_dir(path.parent)


def make_folder(path: str | os.PathLike) -> Path:
    """`mkdir -p path`; a folder that cannot be made is an OutputError naming it and the fix."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if isinstance(exc, FileExistsError):  # mkdir's word for "a file is in the way"
            exc = NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), exc.filename)
        raise OutputError.from_os_error(path, exc, action="create the folder") from exc
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """`atomic_write` of a UTF-8 text."""
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
