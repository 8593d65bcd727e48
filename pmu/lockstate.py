"""The record of clocks sitsprof has locked, kept on disk so that it outlives the process.

A process killed with SIGKILL cannot restore the clocks it locked; the state file it wrote
before locking is what lets the next `sitsprof` command notice (a cheap read of files, never
NVML) and `sitsprof clocks reset` undo it. One file per GPU, keyed by UUID because indices
change between boots; a record names its host so that a shared home folder does not mix
machines.
"""
from __future__ import annotations

import json
import os
import shlex
import socket
import sys
from datetime import datetime, timezone
from pathlib import Path

from sitsprof.common.atomic import atomic_write_text
from sitsprof.pmu.errors import PmuError

STATE_ENV = "SITSPROF_STATE_DIR"


def state_dir() -> Path:
    """Where clock-lock state files live: $SITSPROF_STATE_DIR, else $XDG_STATE_HOME/sitsprof, else ~/.local/state/sitsprof."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "sitsprof"


def state_path(uuid: str) -> Path:
    """The state file of the GPU with this UUID."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in uuid)
    return state_dir() / f"clocks-{safe}.json"


def write_state(path: Path, record: dict) -> None:
    """Write a lock record (atomically: a reader sees the old record or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=2))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(path: Path) -> dict | None:
    """The lock record in `path`; None when absent, unreadable, or another host's (a shared home folder)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if record.get("host") not in (None, socket.gethostname()):
        return None
    return record


def new_record(index: int, uuid: str, resolved: dict, before: dict, persistent: bool) -> dict:
    """The record this process writes before it locks the clocks in `resolved`."""
    return {
        "uuid": uuid, "index": index, "pid": os.getpid(), "host": socket.gethostname(),
        "persistent": persistent, "changed": [k for k in ("sm", "memory") if resolved.get(k) is not None],
        "resolved": resolved, "before": before, "command_line": shlex.join(sys.argv),
        "locked_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def check_not_held(path: Path, index: int, persistent_ok: bool = False) -> None:
    """Refuse to lock over a live run's lock, or (for runs) over `sitsprof clocks lock`."""
    record = read_state(path)
    if record is None:
        return
    if record.get("persistent"):
        if not persistent_ok:
            raise PmuError(
                f"GPU {index}'s clocks are locked by `sitsprof clocks lock` ({record.get('resolved')}); "
                "use --clocks none to run at those clocks, or `sitsprof clocks reset` first")
        return
    pid = int(record.get("pid", 0) or 0)
    if pid != os.getpid() and _pid_alive(pid):
        raise PmuError(f"GPU {index}'s clocks are held by another sitsprof run (pid {pid}); wait for it to finish")


def lock_records() -> list[dict]:
    """Every clock-lock state file on this host, each with `path` and `stale` added."""
    folder = state_dir()
    if not folder.is_dir():
        return []
    records = []
    for path in sorted(folder.glob("clocks-*.json")):
        record = read_state(path)
        if record is None:
            continue
        record["path"] = str(path)
        record["stale"] = not record.get("persistent") and not _pid_alive(int(record.get("pid", 0) or 0))
        records.append(record)
    return records


def stale_locks() -> list[dict]:
    """Locks left behind by a sitsprof process that died without restoring (e.g. SIGKILL)."""
    return [r for r in lock_records() if r["stale"]]


def stale_lock_warning() -> str | None:
    """One warning line for the root command, or None."""
    stale = stale_locks()
    if not stale:
        return None
    gpus = ", ".join(f"GPU {r.get('index')} ({r.get('uuid')})" for r in stale)
    pids = ", ".join(sorted({str(r.get("pid")) for r in stale}))
    return (f"clocks of {gpus} may still be locked by sitsprof process {pids}, which ended without "
            "restoring them; run `sitsprof clocks reset` to restore the defaults")


def warn_stale_locks(stream=None) -> None:
    """Print the stale-lock warning (if any) to stderr; never fails. Hooked into the CLI root."""
    try:
        message = stale_lock_warning()
    except Exception:  # noqa: BLE001 - a warning must never break a command
        return
    if message:
        (stream or sys.stderr).write(f"sitsprof: warning: {message}\n")
