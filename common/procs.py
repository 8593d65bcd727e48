"""Child processes that do not outlive sitsprof, and their temporary folders that do not either.

`die_with_parent()` asks Linux (PR_SET_PDEATHSIG) to signal the calling process when its parent
dies, however it dies: the one cleanup that survives a SIGKILL of the parent, since it is the
kernel's. It reaches only the process that asked (not that process's own children), which is
why `record` adds a watchdog for a workload's process group (collectors/watchdog.py).

`private_tempdir(prefix)` makes a temporary folder whose name carries this process's pid, and
removes the ones a dead process of the same prefix left (a SIGKILL runs no `finally`), so
folders killed runs leave behind are reclaimed by the next run.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile

__all__ = ["PR_SET_PDEATHSIG", "die_with_parent", "private_tempdir", "remove_orphaned_tempdirs"]

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Have `sig` sent to this process when its parent dies (Linux; elsewhere False). Also
    True/False whether the parent was still there when asked: a parent already gone (the
    process was reparented before the request) is reported as False, for the caller to exit."""
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except Exception:  # noqa: BLE001 - no libc prctl: nothing the caller can do about it
        return False
    return os.getppid() == parent and parent != 1


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_orphaned_tempdirs(prefix: str, folder: str | None = None) -> list[str]:
    """Remove `<prefix><pid>-*` folders in the temporary folder whose process is gone; returns them."""
    folder = folder or tempfile.gettempdir()
    pattern = re.compile(re.escape(prefix) + r"(\d+)-")
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        match = pattern.match(name)
        if match is None or int(match.group(1)) == os.getpid() or _pid_alive(int(match.group(1))):
            continue
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def private_tempdir(prefix: str) -> str:
    """`mkdtemp` named `<prefix><pid>-XXXX`, after reclaiming those of dead processes."""
    remove_orphaned_tempdirs(prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")
