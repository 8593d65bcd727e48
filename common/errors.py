"""The one base class of every error sitsprof reports to a user.

Each package subclasses it in its own `errors.py`; `cli/main.py` prints any of them as one
line and exits with `exit_code` (2: the input or the machine, not sitsprof, needs fixing).
"""
from __future__ import annotations

import errno
import os

__all__ = ["OutputError", "SitsprofError"]


class SitsprofError(Exception):
    """A user-facing error: its message names the problem and the fix; the CLI exits with `exit_code`."""

    exit_code = 2


_OUTPUT_HINTS = {
    errno.ENOSPC: "free space or write elsewhere",
    errno.EDQUOT: "free space (disk quota) or write elsewhere",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.EACCES: "no permission: write elsewhere or fix the permissions",
    errno.EPERM: "no permission: write elsewhere or fix the permissions",
    errno.ENOENT: "that folder does not exist: create it or write elsewhere",
    errno.ENOTDIR: "a part of that path is a file, not a folder: write elsewhere",
    errno.EEXIST: "a part of that path is a file, not a folder: write elsewhere",
}


def _full_disk_errno(path) -> int | None:
    """ENOSPC when the file system holding `path` has no free block left, else None."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        return errno.ENOSPC if os.statvfs(folder).f_bavail == 0 else None
    except (OSError, AttributeError):  # no such folder; no statvfs (Windows)
        return None


class OutputError(SitsprofError, OSError):
    """A file or folder sitsprof could not write (full disk, read-only or foreign folder, a path
    under a file). Still an OSError with its errno, so `except OSError` callers keep working."""

    action = "write"

    @classmethod
    def from_os_error(cls, path, exc: OSError, action: str = "write") -> OutputError:
        code = exc.errno or _full_disk_errno(path)  # numpy's tofile says only "178 requested and 0 written"
        # os.strerror: pyarrow's own wording ("Error writing bytes to file. Detail: ...") is not for users
        reason = os.strerror(code) if code else (exc.strerror or str(exc))
        error = cls(code, reason, str(path))
        error.action = action
        return error

    @property
    def hint(self) -> str:
        return _OUTPUT_HINTS.get(self.errno, "write elsewhere")

    def __str__(self) -> str:
        return f"cannot {self.action} {self.filename}: {self.strerror} ({self.hint})"
