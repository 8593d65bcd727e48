"""Clock locking that always restores what it changed.

`locked_clocks(...)` locks the SM (graphics) and/or memory clocks with
`nvmlDeviceSetGpuLockedClocks` / `nvmlDeviceSetMemoryLockedClocks`, validated against
`nvmlDeviceGetSupportedGraphicsClocks` / `nvmlDeviceGetSupportedMemoryClocks`, and resets them
(`nvmlDeviceReset*LockedClocks`) on normal exit, on an exception, on SIGINT and on SIGTERM.

Before it changes anything it takes the GPU's lock record (`pmu.lockstate`: checked and
written as one step, so two runs cannot both lock a GPU); the record goes away once the clocks
are restored. A process killed with SIGKILL leaves it behind: the next `sitsprof` command
warns, and `sitsprof clocks reset` restores the clocks and removes it. Note that a reset
returns the clocks to the driver default, not to a lock somebody else had set before.

What a lock does depends on the card (`lock_behaviour`): with persistence mode off the driver
drops it when the last process using the GPU exits, so only a run's own lock (held while the
run has NVML open) means anything; with MIG enabled the clocks belong to every GPU instance
on the card, so sitsprof does not lock them.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sitsprof.common.signals import signals_ignored, terminate_raises
from sitsprof.pmu.device import clock_facts, event_reason_list
from sitsprof.pmu.errors import ClockPermissionError, ClockValueError, PmuError, UnsupportedError
from sitsprof.pmu.lockstate import (
    DAMAGED,
    DROPPED,
    HELD,
    describe_holder,
    exclusive,
    lock_records,
    mark_reset,
    new_record,
    read_entry,
    release,
    remove,
    state_path,
    take,
)
from sitsprof.pmu.nvml import handle, nvml, optional, text

__all__ = [
    "TDP",
    "ClockSession",
    "apply_clocks",
    "clock_status",
    "lock_behaviour",
    "lock_persistent",
    "locked_clocks",
    "read_clocks",
    "reset_clocks",
    "reset_device",
    "resolve",
]

TDP = "tdp"
_MODES = ("lock", "none")


# -- reading and resolving ---------------------------------------------------------------
def read_clocks(index: int = 0) -> dict:
    """Current SM and memory clocks (MHz) and the clock event reasons."""
    pynvml = nvml()
    h = handle(index)
    return {
        "sm_mhz": optional(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM),
        "memory_mhz": optional(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM),
        "event_reasons": event_reason_list(h),
    }


def _query(fn, *args):
    """An NVML query whose failure only means "unknown" (None)."""
    pynvml = nvml()
    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None


def lock_behaviour(index: int = 0) -> dict:
    """What locking clocks would do on GPU `index`, asked of NVML without changing anything.

    `supported`: whether sitsprof can lock them here (None: unknown until tried; the driver
    answers NVML_ERROR_NOT_SUPPORTED then); `persistence_mode` (nvmlDeviceGetPersistenceMode):
    with it off the driver is torn down, and a lock lost, when the last process using the GPU
    exits, so `lock_survives_process` is False; `mig_enabled` (nvmlDeviceGetMigMode): the clocks
    are shared by every GPU instance, so locking is refused. `summary` says it in one line."""
    pynvml = nvml()
    h = handle(index)
    persistence = _query(pynvml.nvmlDeviceGetPersistenceMode, h)
    persistence = None if persistence is None else persistence == pynvml.NVML_FEATURE_ENABLED
    mig = _query(pynvml.nvmlDeviceGetMigMode, h)
    mig_enabled = None if mig is None else mig[0] == pynvml.NVML_DEVICE_MIG_ENABLE
    cc = _query(pynvml.nvmlDeviceGetCudaComputeCapability, h)
    supported_mem = _query(pynvml.nvmlDeviceGetSupportedMemoryClocks, h) or []
    supported, why = None, "the driver says whether it supports locked clocks only when asked to lock"
    if mig_enabled:
        supported, why = False, ("MIG mode is enabled: the clocks are shared by every GPU instance on the card "
                                 "(other users' work), so sitsprof does not lock them; use --clocks none")
    elif cc is not None and tuple(cc) < (7, 0):
        supported, why = False, "locked clocks need a Volta or newer GPU (nvmlDeviceSetGpuLockedClocks)"
    elif not supported_mem:
        supported, why = False, "the GPU reports no supported clocks"
    elif cc is not None:
        supported, why = True, "Volta or newer, NVML lists its clocks"
    if persistence is True:
        lifetime = "persistence mode is on: a lock outlives the process that set it, until it is reset"
    elif persistence is False:
        lifetime = ("persistence mode is off: the driver drops a lock when the last process using the GPU exits, "
                    "so a lock lasts only while a run (or another process) has the GPU open (`nvidia-smi -pm 1`)")
    else:
        lifetime = "persistence mode unknown: a lock may be dropped when the last process using the GPU exits"
    verdict = {True: "supported", False: "not supported", None: "support unknown"}[supported]
    return {"supported": supported, "reason": why, "persistence_mode": persistence,
            "lock_survives_process": persistence, "mig_enabled": mig_enabled,
            "summary": f"{verdict} ({why}); {lifetime}"}


def _refuse_unlockable(index: int, behaviour: dict) -> None:
    if behaviour["mig_enabled"]:
        raise UnsupportedError(f"GPU {index}: {behaviour['reason']}")


def _in_effect(entry: dict, facts: dict) -> bool | None:
    """Are the clocks `entry` records still in effect, by the current clocks (None: cannot tell)?"""
    resolved = entry.get("resolved") or {}
    pairs = [(resolved.get("sm"), facts.get("sm_mhz")), (resolved.get("memory"), facts.get("memory_mhz"))]
    comparable = [(want, now) for want, now in pairs
                  if isinstance(want, int) and not isinstance(want, bool) and now is not None]
    if not comparable:
        return None
    if all(want == now for want, now in comparable):
        return True
    if "applications_clocks_setting" in (facts.get("event_reasons") or []):
        return None  # a clock setting is active, yet the clocks differ (throttled?): cannot tell
    return False


def clock_status(index: int = 0) -> dict:
    """`sitsprof clocks show`: current, max and base clocks, supported values, event reasons,
    what locking would do here, and sitsprof's lock records for GPU `index` (each with
    `in_effect`: the recorded lock compared with the clocks NVML reports now), plus
    `absent_gpu_locks`: records of GPUs that are not on this node."""
    pynvml = nvml()
    h = handle(index)
    facts = clock_facts(h)
    facts["event_reasons"] = event_reason_list(h)
    facts["clock_locking"] = lock_behaviour(index)
    mine = state_path(text(pynvml.nvmlDeviceGetUUID(h)))
    present = {state_path(u) for u in _uuids()}
    entries = lock_records()
    facts["locks"] = [e for e in entries if Path(e["path"]) == mine]
    for entry in facts["locks"]:
        entry["in_effect"] = None if entry["state"] == DAMAGED else _in_effect(entry, facts)
    facts["absent_gpu_locks"] = [e for e in entries if Path(e["path"]) not in present]
    return facts


def _parse_spec(spec, what: str):
    if spec is None:
        return None
    if isinstance(spec, int):
        return spec
    value = str(spec).strip().lower()
    if value in ("max", "base", TDP):
        return value
    if value.endswith("mhz"):
        value = value[:-3].strip()
    if value.isdigit():
        return int(value)
    raise ClockValueError(f"{what} clock {spec!r}: use max, base, tdp or a frequency in MHz")


def _nearest(values, wanted: int) -> str:
    near = sorted(values, key=lambda v: abs(v - wanted))[:3]
    return ", ".join(str(v) for v in sorted(near, reverse=True))


def resolve(index: int = 0, sm="max", memory=None) -> dict:
    """Turn `max` / `base` / `tdp` / MHz into values NVML accepts, checking the supported lists.

    Returns {"sm": MHz | "tdp" | None, "memory": MHz | None} (None: leave unchanged)."""
    pynvml = nvml()
    h = handle(index)
    sm_spec, mem_spec = _parse_spec(sm, "SM"), _parse_spec(memory, "memory")
    mem_supported = sorted(optional(pynvml.nvmlDeviceGetSupportedMemoryClocks, h, default=[]) or [], reverse=True)
    if not mem_supported and (sm_spec is not None or mem_spec is not None):
        raise UnsupportedError(f"GPU {index} reports no supported clocks: clock locking is not available on it")
    out = {"sm": None, "memory": None}
    if mem_spec == TDP:
        raise ClockValueError("memory clock: tdp applies to the SM clock only; use max, base or MHz")
    if mem_spec in ("max", "base"):
        out["memory"] = mem_supported[0] if mem_spec == "max" else optional(
            pynvml.nvmlDeviceGetDefaultApplicationsClock, h, pynvml.NVML_CLOCK_MEM, default=mem_supported[0])
    elif isinstance(mem_spec, int):
        if mem_spec not in mem_supported:
            raise ClockValueError(f"memory clock {mem_spec} MHz is not supported by GPU {index}; "
                                  f"supported: {', '.join(map(str, mem_supported))}")
        out["memory"] = mem_spec
    if sm_spec is None:
        return out
    if sm_spec == TDP:
        out["sm"] = TDP
        return out
    graphics = sorted(pynvml.nvmlDeviceGetSupportedGraphicsClocks(h, out["memory"] or mem_supported[0]), reverse=True)
    if sm_spec == "max":
        out["sm"] = graphics[0]
    elif sm_spec == "base":
        base = optional(pynvml.nvmlDeviceGetDefaultApplicationsClock, h, pynvml.NVML_CLOCK_GRAPHICS)
        if base is None:
            raise UnsupportedError(f"GPU {index} reports no default (base) clock; give the SM clock in MHz")
        out["sm"] = int(base)
    else:
        if sm_spec not in graphics:
            raise ClockValueError(
                f"SM clock {sm_spec} MHz is not supported by GPU {index} (range {graphics[-1]}-{graphics[0]} MHz; "
                f"nearest supported: {_nearest(graphics, sm_spec)})")
        out["sm"] = sm_spec
    return out


# -- changing and restoring -------------------------------------------------------------
def _nvml_errors(what: str):
    """Context that maps NVML errors of a clock call to sitsprof's user-facing errors."""
    pynvml = nvml()

    @contextmanager
    def mapped():
        try:
            yield
        except pynvml.NVMLError_NoPermission:
            raise ClockPermissionError(what) from None
        except pynvml.NVMLError_NotSupported:
            raise UnsupportedError(f"{what}: not supported on this GPU/driver (NVML_ERROR_NOT_SUPPORTED)") from None
        except pynvml.NVMLError_InvalidArgument:
            raise ClockValueError(f"{what}: NVML rejected the values (NVML_ERROR_INVALID_ARGUMENT)") from None

    return mapped()


def apply_clocks(index: int, resolved: dict) -> None:
    """Lock the clocks in `resolved` (from `resolve`), all or nothing: when the SM lock fails
    after the memory lock took, the memory lock is reset before the error goes up, so a
    caller that sees an exception knows nothing is left changed. Callers record state first."""
    pynvml = nvml()
    h = handle(index)
    memory = resolved.get("memory")
    if memory is not None:
        with _nvml_errors("locking the memory clock"):
            pynvml.nvmlDeviceSetMemoryLockedClocks(h, memory, memory)
    if resolved.get("sm") is not None:
        sm = resolved["sm"]
        low = high = pynvml.NVML_CLOCK_LIMIT_ID_TDP if sm == TDP else sm
        try:
            with _nvml_errors("locking the SM clock"):
                pynvml.nvmlDeviceSetGpuLockedClocks(h, low, high)
        except BaseException:
            if memory is not None:
                reset_device(index, sm=False, memory=True)
            raise


def reset_device(index: int, sm: bool = True, memory: bool = True) -> None:
    """Reset the locked SM and/or memory clocks of GPU `index` to the driver default."""
    pynvml = nvml()
    h = handle(index)
    errors = []
    if sm:
        try:
            with _nvml_errors("resetting the SM clock"):
                pynvml.nvmlDeviceResetGpuLockedClocks(h)
        except UnsupportedError as exc:
            errors.append(exc)
    if memory:
        try:
            with _nvml_errors("resetting the memory clock"):
                pynvml.nvmlDeviceResetMemoryLockedClocks(h)
        except UnsupportedError:
            pass  # memory locking absent on this GPU: nothing of ours to reset
    if errors:
        raise errors[0]


def _uuids() -> list[str]:
    """The UUIDs of this node's GPUs, by index."""
    pynvml = nvml()
    return [text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(pynvml.nvmlDeviceGetCount())]


def _refuse_live(where: str, entry: dict | None, force: bool) -> None:
    if entry is not None and entry["state"] == HELD and not force:
        raise PmuError(f"{where}'s clocks are held by a running sitsprof run ({describe_holder(entry)}); "
                       "wait for it to finish, or use `sitsprof clocks reset --force` "
                       "(that run then records that its lock was reset)")


def _clear(path: Path, entry: dict | None) -> dict:
    """Drop the record `entry` after its GPU was reset (a live run's is marked, not removed)."""
    if entry is None:
        return {"taken_over": False, "remove_error": None}
    if entry["state"] == HELD:
        mark_reset(path, entry)
        return {"taken_over": True, "remove_error": None}
    return {"taken_over": False, "remove_error": remove(path)}


def reset_clocks(index: int | None = None, force: bool = False) -> list[dict]:
    """`sitsprof clocks reset`: restore GPUs with lock records (or `index`, or all) and drop the records.

    Every state file is dealt with, however damaged: a damaged one is removed (its GPU, found
    by the file's name, is reset); one for a GPU not on this node is removed, its clocks left
    unrestored. A live run's lock is refused unless `force`; forced, the GPU is reset and the
    run's record marked, so that the run says in its meta.json that its lock was reset.

    Returns what was done: [{"index" (None: the GPU is not on this node), "uuid", "record"
    (the state file's entry, or None), "path", "taken_over", "remove_error", "note"}]."""
    present = {u: i for i, u in enumerate(_uuids())}
    path_uuid = {state_path(u): u for u in present}
    entries = {Path(e["path"]): e for e in lock_records()}
    if index is not None:
        handle(index)  # one clear error for a GPU that is not there
        targets = [(index, _uuids()[index])]
        absent = []
    else:
        matched = sorted((present[path_uuid[p]], path_uuid[p]) for p in entries if p in path_uuid)
        targets = matched if entries else sorted((i, u) for u, i in present.items())
        absent = [p for p in entries if p not in path_uuid]
    for i, uuid in targets:  # refuse before changing anything
        _refuse_live(f"GPU {i}", entries.get(state_path(uuid)), force)
    for path in absent:
        _refuse_live(f"GPU {entries[path].get('uuid')}", entries[path], force)
    done = []
    for i, uuid in targets:
        path = state_path(uuid)
        with exclusive(path):
            entry = read_entry(path)
            _refuse_live(f"GPU {i}", entry, force)
            note = None
            try:
                reset_device(i)
            except UnsupportedError as exc:
                if entry is None:
                    raise
                note = f"nothing to restore: {exc}"
            except ClockPermissionError as exc:
                if entry is None or entry["state"] not in (DAMAGED, DROPPED):
                    raise  # a lock that may still hold: keep its record until root resets it
                note = f"its clocks were not reset: {exc}"
            done.append({"index": i, "uuid": uuid, "record": entry, "path": str(path), "note": note,
                         **_clear(path, entry)})
    for path in absent:
        with exclusive(path):
            entry = read_entry(path)
            if entry is None:
                continue
            done.append({"index": None, "uuid": entry.get("uuid"), "record": entry, "path": str(path),
                         "note": "the GPU is not on this node: its clocks could not be restored",
                         **_clear(path, entry)})
    return done


@dataclass
class ClockSession:
    """What `locked_clocks` yields: clocks before, what was asked, what NVML applied, and after."""

    device_index: int
    mode: str
    requested: dict
    before: dict = field(default_factory=dict)
    resolved: dict = field(default_factory=dict)
    applied: dict | None = None
    after: dict | None = None
    restored: bool = False
    persistence_mode: bool | None = None
    reset_by_other: bool = False
    reset_by: dict | None = None

    def to_dict(self) -> dict:
        """As meta.json's `clocks`. `reset_by_other`: another process (`sitsprof clocks reset
        --force`) reset the lock or removed its record during the run, so the clocks were not
        held as `applied` says throughout; `reset_by` says who, when."""
        return {"device_index": self.device_index, "mode": self.mode, "requested": self.requested,
                "resolved": self.resolved, "before": self.before, "applied": self.applied,
                "after": self.after, "restored": self.restored, "persistence_mode": self.persistence_mode,
                "reset_by_other": self.reset_by_other, "reset_by": self.reset_by}


def lock_persistent(index: int = 0, sm="max", memory=None, replace: bool = False) -> dict:
    """`sitsprof clocks lock`: lock until `sitsprof clocks reset` (recorded as persistent). It
    takes the same exclusive check-and-write as a locked run: a second `clocks lock` is refused
    (unless `replace`), like a second `record --clocks lock`.

    The result's `clock_locking` (`lock_behaviour`) says whether the lock outlives this process."""
    pynvml = nvml()
    uuid = text(pynvml.nvmlDeviceGetUUID(handle(index)))
    behaviour = lock_behaviour(index)
    _refuse_unlockable(index, behaviour)
    resolved = resolve(index, sm, memory)
    path = state_path(uuid)
    before = read_clocks(index)
    record = new_record(index, uuid, resolved, before, persistent=True,
                        persistence_mode=behaviour["persistence_mode"])
    take(path, record, index, persistent_ok=replace, relock=True)
    try:
        apply_clocks(index, resolved)
    except BaseException:
        release(path, record["lock_id"])
        raise
    return {"index": index, "uuid": uuid, "resolved": resolved, "before": before, "applied": read_clocks(index),
            "clock_locking": behaviour}


@contextmanager
def locked_clocks(device_index: int = 0, sm="max", memory=None, mode: str = "lock"):
    """Lock clocks for the duration of the block and always restore what was changed.

    mode="lock": lock `sm` (max | base | tdp | MHz | None) and `memory` (max | base | MHz | None).
    max = the highest supported clock; base = the default applications clock
    (`nvmlDeviceGetDefaultApplicationsClock`, nvidia-smi's "Default Applications Clocks");
    tdp = NVML_CLOCK_LIMIT_ID_TDP for both bounds (the clock sustainable within TDP).
    mode="none": change nothing, only record the clocks before and after (their drift).
    Yields a `ClockSession` (`before`, `requested`, `applied`, later `after`)."""
    if mode not in _MODES:
        raise ClockValueError(f"clock mode {mode!r}: use one of {', '.join(_MODES)}")
    session = ClockSession(device_index, mode, {"sm": sm, "memory": memory})
    session.before = read_clocks(device_index)
    if mode == "lock":
        session.resolved = resolve(device_index, sm, memory)
    if session.resolved.get("sm") is None and session.resolved.get("memory") is None:
        try:  # nothing to change: only the drift is recorded
            yield session
        finally:
            session.after = read_clocks(device_index)
        return
    uuid = text(nvml().nvmlDeviceGetUUID(handle(device_index)))
    behaviour = lock_behaviour(device_index)
    _refuse_unlockable(device_index, behaviour)
    session.persistence_mode = behaviour["persistence_mode"]
    path = state_path(uuid)
    record = new_record(device_index, uuid, session.resolved, session.before, persistent=False,
                        persistence_mode=behaviour["persistence_mode"])
    with terminate_raises():
        take(path, record, device_index)  # check and write as one step: one run per GPU
        changed = False
        try:
            apply_clocks(device_index, session.resolved)  # all or nothing
            changed = True
            session.applied = read_clocks(device_index)
            yield session
        finally:
            with signals_ignored():
                try:
                    if changed:
                        reset_device(device_index, sm=session.resolved["sm"] is not None,
                                     memory=session.resolved["memory"] is not None)
                        session.restored = True
                    taken_over = release(path, record["lock_id"])
                    if taken_over is not None:
                        session.reset_by_other, session.reset_by = True, taken_over
                finally:
                    try:
                        session.after = read_clocks(device_index)
                    except Exception:  # noqa: BLE001 - never mask the outcome of the restore
                        session.after = None

