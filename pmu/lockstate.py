"""The record of clocks sitsprof has locked, kept on disk so that it outlives the process.

A process killed with SIGKILL cannot restore the clocks it locked; the state file it wrote
before locking is what lets the next `sitsprof` command notice (a cheap read of files, never
NVML) and `sitsprof clocks reset` undo it. One file per GPU, keyed by UUID because indices
change between boots; a record names its host so that a shared home folder does not mix
machines.

Taking a lock is a check and a write, and two runs that check at the same moment would both
find the GPU free; both steps happen under an exclusive `fcntl.flock` of the GPU's lock file
(`clocks-<uuid>.lock`, held for milliseconds and never deleted, since deleting a lock file
races with its next user), so exactly one run writes its record and the other finds it.

A pid alone does not say who holds a record: pids are reused, at once after a reboot. A
record names its process by pid, the kernel's boot id and the process's start time
(/proc/<pid>/stat field 22); the holder is alive only when all three still match. Locked
clocks do not survive a reboot, nor (with persistence mode off) the exit of the last process
using the GPU, so such a record says its lock was *dropped* rather than claiming it. A file
that cannot be read as a record (not UTF-8, not JSON, not an object, no usable pid...) is
*damaged*: reported, never trusted, and removed by `sitsprof clocks reset`.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
import time
import uuid as uuidlib
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from sitsprof.common import jsonout
from sitsprof.common.atomic import atomic_write_text
from sitsprof.pmu.errors import PmuError

__all__ = [
    "DAMAGED",
    "DROPPED",
    "HELD",
    "LOCKED",
    "STALE",
    "STATE_ENV",
    "boot_id",
    "classify",
    "describe_holder",
    "exclusive",
    "holder_alive",
    "lock_records",
    "mark_reset",
    "new_record",
    "other_host_records",
    "process_start",
    "read_entry",
    "read_state",
    "refuse_if_held",
    "release",
    "remove",
    "reset_by_me",
    "stale_lock_warning",
    "stale_locks",
    "state_dir",
    "state_path",
    "take",
    "warn_stale_locks",
    "write_state",
]


def _hostname() -> str:
    """This machine's name, as the lock entries record it (socket is imported only here: every
    command checks for stale locks at start, and most never need a socket)."""
    import socket

    return socket.gethostname()


try:
    import fcntl
except ImportError:  # not POSIX: no cross-process exclusion (sitsprof needs Linux for NVML anyway)
    fcntl = None

STATE_ENV = "SITSPROF_STATE_DIR"

# what a state file is found to be
HELD = "held"          # a live run's lock
LOCKED = "locked"      # `sitsprof clocks lock`: until `sitsprof clocks reset`
STALE = "stale"        # its run ended without restoring: the clocks may still be locked
DROPPED = "dropped"    # the driver no longer holds it (reboot, or persistence mode off)
DAMAGED = "damaged"    # not a lock record this code can trust

_PID_MAX = 2**22  # PID_MAX_LIMIT on 64-bit Linux (include/linux/threads.h): no pid is larger
_MAX_BYTES = 1 << 20  # a record is a few hundred bytes
_EXCLUSIVE_WAIT_S = 10.0
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def state_dir() -> Path:
    """Where clock-lock state files live: $SITSPROF_STATE_DIR, else $XDG_STATE_HOME/sitsprof,
    else ~/.local/state/sitsprof."""
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
    atomic_write_text(path, jsonout.dumps(record, indent=2))


# -- who is this process ----------------------------------------------------------------
def boot_id() -> str | None:
    """The kernel's id of this boot (changes at every reboot); None where /proc does not say."""
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def process_start(pid: int) -> int | None:
    """When process `pid` started, in clock ticks after boot (/proc/<pid>/stat field 22, starttime)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # field 2 (comm) is in parentheses and may hold spaces or ')': split after the last ')'
    fields = stat.rpartition(")")[2].split()
    try:
        return int(fields[22 - 3])
    except (IndexError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False
    return True


def _started_after(pid: int, when: str) -> bool:
    """True when process `pid` started after the ISO time `when` (plus a second of slack): it
    cannot be the process that wrote a record then. False when either time is unknown."""
    try:
        locked = datetime.fromisoformat(when).timestamp()
        btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime "))
        ticks = process_start(pid)
        if ticks is None:
            return False
        started = btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, TypeError, StopIteration, OverflowError):
        return False
    return started > locked + 1.0


def _runs_other_command(pid: int, command_line) -> bool:
    """True when process `pid` demonstrably runs another command than the record's
    `command_line` (`shlex.join(sys.argv)` of its writer): its /proc cmdline does not end with
    the record's arguments. Only the arguments: sys.argv[0] is the script's path where /proc
    may say `python -m sitsprof.cli.main`. False when either is unknown or there are none."""
    if not isinstance(command_line, str):
        return False
    try:
        args = shlex.split(command_line)[1:]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace").split("\0")[:-1]
    except (ValueError, OSError):
        return False
    return bool(args and cmdline) and cmdline[-len(args):] != args


def holder_alive(record: dict) -> bool:
    """Is the process that wrote `record` (pid, boot id, start time) still running? A record
    without `pid_start` (older, or hand-made) is held only by a live pid that started before the
    record's `locked_at` and runs the record's `command_line`: a reused pid, an unrelated
    process started later or running something else, does not hold it."""
    if record.get("boot_id") and boot_id() and record["boot_id"] != boot_id():
        return False
    if not _pid_alive(record["pid"]):
        return False
    start = record.get("pid_start")
    if start is None:
        if _runs_other_command(record["pid"], record.get("command_line")):
            return False
        return not (isinstance(record.get("locked_at"), str) and _started_after(record["pid"], record["locked_at"]))
    now = process_start(record["pid"])
    return now is None or now == start


def new_record(index: int, uuid: str, resolved: dict, before: dict, persistent: bool,
               persistence_mode: bool | None = None) -> dict:
    """The record this process writes before it locks the clocks in `resolved`.

    `persistence_mode`: the GPU's, at locking time (None: unknown); with it off the driver
    drops the lock when the last process using the GPU exits."""
    pid = os.getpid()
    return {
        "uuid": uuid, "index": index, "pid": pid, "host": _hostname(),
        "boot_id": boot_id(), "pid_start": process_start(pid), "lock_id": uuidlib.uuid4().hex,
        "persistent": persistent, "persistence_mode": persistence_mode,
        "changed": [k for k in ("sm", "memory") if resolved.get(k) is not None],
        "resolved": resolved, "before": before, "command_line": shlex.join(sys.argv),
        "locked_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


# -- reading a state file ---------------------------------------------------------------
def _damaged(path: Path, problem: str) -> dict:
    return {"path": str(path), "state": DAMAGED, "stale": False, "problem": problem, "uuid": None, "index": None}


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _problem(raw) -> str | None:
    """Why `raw` (parsed JSON) is not a lock record this code can act on; None when it is."""
    if not isinstance(raw, dict):
        kind = {list: "a list", str: "a string", bool: "a boolean", type(None): "null",
                int: "a number", float: "a number"}.get(type(raw), type(raw).__name__)
        return f"holds {kind} ({_short(raw)}), not a lock record"
    if "pid" not in raw:
        return "names no process (no pid)"
    pid = raw["pid"]
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= _PID_MAX:
        return f"its pid {_short(pid)} is not a process id"
    if not isinstance(raw.get("uuid"), str) or not raw["uuid"]:
        return "names no GPU (no uuid)"
    checks = {"host": str, "boot_id": str, "command_line": str, "locked_at": str, "lock_id": str,
              "resolved": dict, "before": dict, "reset_by": dict}
    for key, kind in checks.items():
        if raw.get(key) is not None and not isinstance(raw[key], kind):
            return f"its {key} {_short(raw[key])} is not a {kind.__name__}"
    for key in ("persistent", "persistence_mode"):
        if raw.get(key) is not None and not isinstance(raw[key], bool):
            return f"its {key} {_short(raw[key])} is not true or false"
    for key in ("pid_start", "index"):
        if raw.get(key) is not None and (isinstance(raw[key], bool) or not isinstance(raw[key], int)):
            return f"its {key} {_short(raw[key])} is not a whole number"
    return None


def classify(record: dict) -> tuple[str, str | None]:
    """(state, why) of a well-formed record: HELD, LOCKED, STALE or DROPPED (with the reason)."""
    if record.get("boot_id") and boot_id() and record["boot_id"] != boot_id():
        return DROPPED, "the node has rebooted since, which resets locked clocks"
    alive = holder_alive(record)
    if record.get("persistence_mode") is False and not alive:
        return DROPPED, ("persistence mode was off, so the driver dropped the lock when the last process "
                         "using the GPU exited (unless another process kept the GPU open)")
    if record.get("persistent"):
        return LOCKED, None
    return (HELD, None) if alive else (STALE, None)


def read_entry(path: Path) -> dict | None:
    """What the state file `path` is: its record with `path`, `state` (HELD, LOCKED, STALE,
    DROPPED or DAMAGED), `stale` and `problem` added; None when absent or another host's."""
    try:
        if path.stat().st_size > _MAX_BYTES:
            return _damaged(path, f"is {path.stat().st_size} bytes, far larger than a lock record")
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return _damaged(path, f"cannot be read ({exc.strerror or exc})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _damaged(path, "is not UTF-8 text")
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return _damaged(path, "is not valid JSON" if text.strip() else "is empty")
    problem = _problem(raw)
    if problem:
        entry = _damaged(path, problem)
        if isinstance(raw, dict) and isinstance(raw.get("uuid"), str):
            entry["uuid"] = raw["uuid"]
        return entry
    if raw.get("host") not in (None, _hostname()):
        return None  # a shared home folder: another machine's GPU
    state, why = classify(raw)
    return {**raw, "path": str(path), "state": state, "stale": state == STALE, "problem": why}


def read_state(path: Path) -> dict | None:
    """The well-formed lock record in `path`; None when absent, damaged, or another host's."""
    entry = read_entry(path)
    return None if entry is None or entry["state"] == DAMAGED else entry


def lock_records() -> list[dict]:
    """Every clock-lock state file on this host (damaged ones included), each as `read_entry` gives it."""
    folder = state_dir()
    if not folder.is_dir():
        return []
    entries = (read_entry(path) for path in sorted(folder.glob("clocks-*.json")))
    return [e for e in entries if e is not None]


def other_host_records() -> list[dict]:
    """Well-formed records another host wrote into this state folder (a shared home folder, or
    this machine under another name: a container). Not this host's locks, so never acted on;
    `clocks show` reports them rather than skipping them in silence."""
    folder = state_dir()
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("clocks-*.json")):
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if _problem(raw) is None and raw.get("host") not in (None, _hostname()):
            found.append({**raw, "path": str(path)})
    return found


def describe_holder(entry: dict) -> str:
    """"pid 123 on host, `sitsprof run ...`, since 2026-...": who took the lock in `entry`."""
    return (f"pid {entry.get('pid')} on {entry.get('host') or _hostname()}, "
            f"`{entry.get('command_line') or '?'}`, since {entry.get('locked_at') or '?'}")


def stale_locks() -> list[dict]:
    """Locks left behind by a sitsprof process that died without restoring (e.g. SIGKILL)."""
    return [r for r in lock_records() if r["stale"]]


def _gpu(entry: dict) -> str:
    return f"GPU {entry.get('index')} ({entry.get('uuid')})"


def stale_lock_warning() -> str | None:
    """One warning line for the root command, or None: stale locks, dropped locks, damaged files."""
    entries = lock_records()
    parts = []
    stale = [r for r in entries if r["state"] == STALE]
    if stale:
        gpus = ", ".join(_gpu(r) for r in stale)
        pids = ", ".join(sorted({str(r.get("pid")) for r in stale}))
        parts.append(f"clocks of {gpus} may still be locked by sitsprof process {pids}, which ended without "
                     "restoring them; run `sitsprof clocks reset` to restore the defaults")
    for r in entries:
        if r["state"] == DROPPED:
            parts.append(f"the clock lock of {_gpu(r)} recorded in {r['path']} no longer holds: {r['problem']}; "
                         "`sitsprof clocks reset` removes the record")
        elif r["state"] == DAMAGED:
            parts.append(f"clock-lock state file {r['path']} is damaged ({r['problem']}); "
                         "`sitsprof clocks reset` removes it")
    return "; ".join(parts) or None


def warn_stale_locks(stream=None) -> None:
    """Print the stale-lock warning (if any) to stderr; never fails. Hooked into the CLI root."""
    try:
        message = stale_lock_warning()
    except Exception:  # noqa: BLE001 - a warning must never break a command
        return
    if message:
        (stream or sys.stderr).write(f"sitsprof: warning: {message}\n")


# -- changing a state file --------------------------------------------------------------
@contextmanager
def exclusive(path: Path, wait_s: float = _EXCLUSIVE_WAIT_S):
    """Hold the lock file of the state file `path` exclusively for a check-and-change of it."""
    lock_path = path.with_suffix(".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if lock_path.is_dir() and not lock_path.is_symlink():
            # nobody can hold a folder with flock: it is damage, not a holder; make way for the file
            remove(lock_path)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise PmuError(f"cannot use the clock-lock state folder {path.parent} ({exc.strerror or exc}); "
                       f"set {STATE_ENV} to a writable folder") from None
    try:
        if fcntl is not None:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise PmuError(f"another sitsprof process has held {lock_path} for over {wait_s:g} s; "
                                       "try again once it has finished") from None
                    time.sleep(0.002)
        yield
    finally:
        os.close(fd)  # releases the flock


def refuse_if_held(entry: dict | None, index: int, persistent_ok: bool = False, relock: bool = False) -> None:
    """Raise the one-line refusal when the state in `entry` forbids this process to lock GPU `index`.

    `relock`: this is `sitsprof clocks lock`, which a `clocks lock` record refuses too (two of
    them both succeeded, the last writer winning unwarned) unless `persistent_ok` (--replace)."""
    if entry is None or entry["state"] in (STALE, DROPPED):
        return
    if entry["state"] == DAMAGED:
        raise PmuError(f"GPU {index}'s clock-lock state file {entry['path']} is damaged ({entry['problem']}); "
                       "run `sitsprof clocks reset` to remove it (and restore the default clocks)")
    if entry["state"] == LOCKED:
        if relock and not persistent_ok:
            raise PmuError(
                f"GPU {index}'s clocks are already locked by `sitsprof clocks lock` ({entry.get('resolved')}, "
                f"{describe_holder(entry)}); `sitsprof clocks lock --replace` locks over it, "
                "or `sitsprof clocks reset` first")
        if not persistent_ok:
            raise PmuError(
                f"GPU {index}'s clocks are locked by `sitsprof clocks lock` ({entry.get('resolved')}); "
                "use --clocks none to run at those clocks, or `sitsprof clocks reset` first")
        return
    if entry["pid"] == os.getpid() and entry.get("pid_start") in (None, process_start(os.getpid())):
        return  # this very process
    raise PmuError(f"GPU {index}'s clocks are held by another sitsprof run ({describe_holder(entry)}); "
                   + ("wait for it to finish" if relock else  # `clocks lock` has no --clocks
                      "wait for it to finish, or use --clocks none to record without locking"))


def take(path: Path, record: dict, index: int, persistent_ok: bool = False, relock: bool = False) -> None:
    """Write `record` to `path` unless a live holder (or a damaged file) is there: check and
    write as one step, exclusive across processes. Raises `PmuError` naming the holder."""
    with exclusive(path):
        refuse_if_held(read_entry(path), index, persistent_ok, relock)
        write_state(path, record)


def release(path: Path, lock_id: str) -> dict | None:
    """Remove this process's record (`lock_id`) once its clocks are restored.

    Returns None when the record was ours throughout; otherwise what another process did:
    the `reset_by` it left (`sitsprof clocks reset --force`), or a note that the record was
    removed or replaced (then a record that is not ours is left alone)."""
    try:
        with exclusive(path, wait_s=2.0):
            return _release(path, lock_id)
    except PmuError:  # the lock file is unusable or stuck: still never leave our record behind
        return _release(path, lock_id)


def _release(path: Path, lock_id: str) -> dict | None:
    entry = read_entry(path)
    if entry is None or entry["state"] == DAMAGED or entry.get("lock_id") != lock_id:
        return {"note": "its lock record was removed or replaced by another process while it ran"}
    path.unlink(missing_ok=True)
    return entry.get("reset_by")


def reset_by_me() -> dict:
    """What `sitsprof clocks reset --force` writes into a live run's record."""
    return {"pid": os.getpid(), "host": _hostname(), "command_line": shlex.join(sys.argv),
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def mark_reset(path: Path, entry: dict) -> None:
    """Tell the live run holding `entry` that its lock was reset by this process."""
    record = {k: v for k, v in entry.items() if k not in ("path", "state", "stale", "problem")}
    record["reset_by"] = reset_by_me()
    write_state(path, record)


def remove(path: Path) -> str | None:
    """Remove a state file (a folder in its place too); the reason it could not be removed, or None."""
    path = Path(path)
    try:
        if path.is_dir() and not path.is_symlink():
            import shutil

            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None
