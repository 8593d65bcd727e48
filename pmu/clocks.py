"""Clock locking that always restores what it changed.

`locked_clocks(...)` locks the SM (graphics) and/or memory clocks with
`nvmlDeviceSetGpuLockedClocks` / `nvmlDeviceSetMemoryLockedClocks`, validated against
`nvmlDeviceGetSupportedGraphicsClocks` / `nvmlDeviceGetSupportedMemoryClocks`, and resets them
(`nvmlDeviceReset*LockedClocks`) on normal exit, on an exception, on SIGINT and on SIGTERM.

Before it changes anything it writes a lock record (`pmu.lockstate`); the record goes away
once the clocks are restored. A process killed with SIGKILL leaves it behind: the next
`sitsprof` command warns, and `sitsprof clocks reset` restores the clocks and removes it. Note that a reset returns the clocks to the driver default, not to a
lock somebody else had set before.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sitsprof.common.signals import signals_ignored, terminate_raises
from sitsprof.pmu.device import clock_facts, event_reason_list
from sitsprof.pmu.errors import ClockPermissionError, ClockValueError, UnsupportedError
from sitsprof.pmu.lockstate import check_not_held, lock_records, new_record, state_path, write_state
from sitsprof.pmu.nvml import handle, nvml, optional, text

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


def clock_status(index: int = 0) -> dict:
    """`sitsprof clocks show`: current, max and base clocks, supported values, event reasons and
    sitsprof's lock records for GPU `index`."""
    h = handle(index)
    facts = clock_facts(h)
    facts["event_reasons"] = event_reason_list(h)
    facts["locks"] = [r for r in lock_records() if r.get("index") == index]
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


def _index_of(uuid: str) -> int | None:
    pynvml = nvml()
    for i in range(pynvml.nvmlDeviceGetCount()):
        if text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) == uuid:
            return i
    return None


def reset_clocks(index: int | None = None) -> list[dict]:
    """`sitsprof clocks reset`: restore GPUs with lock records (or `index`, or all) and drop the records.

    Returns what was reset: [{"index", "uuid", "record"}]."""
    pynvml = nvml()
    records = {r.get("uuid"): r for r in lock_records()}
    if index is not None:
        indices = [index]
    elif records:
        indices = [i for i in (_index_of(u) for u in records) if i is not None]
    else:
        indices = list(range(pynvml.nvmlDeviceGetCount()))
    done = []
    for i in indices:
        uuid = text(pynvml.nvmlDeviceGetUUID(handle(i)))
        reset_device(i)
        record = records.pop(uuid, None)
        if record:
            Path(record["path"]).unlink(missing_ok=True)
        done.append({"index": i, "uuid": uuid, "record": record})
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

    def to_dict(self) -> dict:
        return {"device_index": self.device_index, "mode": self.mode, "requested": self.requested,
                "resolved": self.resolved, "before": self.before, "applied": self.applied,
                "after": self.after, "restored": self.restored}


def lock_persistent(index: int = 0, sm="max", memory=None) -> dict:
    """`sitsprof clocks lock`: lock until `sitsprof clocks reset` (recorded as persistent)."""
    pynvml = nvml()
    uuid = text(pynvml.nvmlDeviceGetUUID(handle(index)))
    resolved = resolve(index, sm, memory)
    path = state_path(uuid)
    check_not_held(path, index, persistent_ok=True)
    before = read_clocks(index)
    write_state(path, new_record(index, uuid, resolved, before, persistent=True))
    try:
        apply_clocks(index, resolved)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return {"index": index, "uuid": uuid, "resolved": resolved, "before": before, "applied": read_clocks(index)}


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
    path = state_path(uuid)
    check_not_held(path, device_index)
    with terminate_raises():
        write_state(path, new_record(device_index, uuid, session.resolved, session.before, persistent=False))
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
                    path.unlink(missing_ok=True)
                finally:
                    try:
                        session.after = read_clocks(device_index)
                    except Exception:  # noqa: BLE001 - never mask the outcome of the restore
                        session.after = None

