"""A fake NVML library, swapped in at pynvml's ctypes level.

pynvml keeps the loaded library in `pynvml.nvmlLib` and looks each entry point up with
`getattr(nvmlLib, name)` (`_nvmlGetFunctionPointer`). `FakeNvmlLib` is an object whose
attributes are ctypes `CFUNCTYPE` callbacks with the C signatures of nvml.h, so the real
pynvml wrappers run unchanged: they build their ctypes structures, call through a real C
function pointer, read the structures back and raise the `NVMLError_*` subclass of the
return code. The structure layouts below are written from nvml.h, not borrowed from pynvml,
so a layout mismatch would show up as wrong values in the tests.

Behaviour follows NVML's documentation: `NVML_ERROR_UNINITIALIZED` before `nvmlInit`,
`NVML_ERROR_INSUFFICIENT_SIZE` plus the count for the supported-clock queries, root needed
for locked clocks (`NVML_ERROR_NO_PERMISSION`), symbolic `NVML_CLOCK_LIMIT_ID_*` values only
in pairs, GPM support reported through `nvmlGpmSupport_t.isSupportedDevice`. Persistence mode
(`nvmlDeviceGetPersistenceMode`) decides whether locked clocks outlive the last client:
nvml.h (nvmlDeviceSetPersistenceMode) says it "determines whether the GPU driver software is
torn down after the last client exits", and a teardown loses locked clocks, so with it off the
fake drops the locks when its last `nvmlShutdown` leaves no client (`other_clients` counts
processes outside the fake that keep the GPU open). `nvmlDeviceGetMigMode` answers from
`mig_mode` ([current, pending]) or NVML_ERROR_NOT_SUPPORTED where `mig_supported` is false.

State is a dict (`DEFAULT_STATE` shape). With a state file (`SITSPROF_FAKE_NVML` names it),
clock changes are written back, so a second process sees what the first locked: that is how
the SIGKILL tests check recovery. Use `install(state_or_path)` in-process, or run a child
through `tests/fakenvml/run_sitsprof.py`, which installs it from the environment first. The
`fake_gpu` fixture (tests/conftest.py) installs it with a state file for one test.
"""
from __future__ import annotations

import copy
import ctypes
import json
import os
import threading
import time
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    Union,
    c_char,
    c_char_p,
    c_double,
    c_int,
    c_int64,
    c_longlong,
    c_uint,
    c_uint32,
    c_ulong,
    c_ulonglong,
    c_ushort,
    c_void_p,
)
from pathlib import Path

ENV = "SITSPROF_FAKE_NVML"

# nvml.h return codes used here
SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION = 0, 1, 2, 3, 4
NOT_FOUND, INSUFFICIENT_SIZE, DRIVER_NOT_LOADED = 6, 7, 9
CLOCK_GRAPHICS, CLOCK_SM, CLOCK_MEM = 0, 1, 2
LIMIT_ID_RANGE_START, LIMIT_ID_TDP, LIMIT_ID_UNLIMITED = 0xFFFFFF00, 0xFFFFFF01, 0xFFFFFF02


def _h200(index: int) -> dict:
    """An H200-like device (values illustrative: H200 SXM, 132 SMs, HBM3e at 3201 MHz)."""
    return {
        "name": "NVIDIA H200",
        "uuid": f"GPU-00000000-fake-4200-0000-00000000000{index}",
        "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "compute_capability": [9, 0],
        "cuda_cores": 132 * 128,
        "memory_total": 150_754_820_096,
        "memory_used": 1_073_741_824,
        "bus_width": 6144,
        "max_sm": 1980,
        "default_app_sm": 1755,
        "tdp_sm": 1830,
        "idle_sm": 345,
        "supported_mem": [3201],
        "supported_graphics": list(range(1980, 344, -15)),
        "locked_gpu": None,
        "locked_mem": None,
        "persistence_mode": 1,  # nvmlEnableState_t: NVML_FEATURE_ENABLED
        "mig_supported": True,  # H100/H200 support MIG (nvmlDeviceGetMigMode: "For Ampere or newer")
        "mig_mode": [0, 0],  # [current, pending]: NVML_DEVICE_MIG_DISABLE
        "power_mw": 120_000,
        "temperature": 33,
        "util_gpu": 0,
        "util_mem": 0,
        "event_reasons": 0x1,  # GpuIdle
        "dram_bw_util": 1.5,
        "sm_util": 0.0,
        "sm_occupancy": 0.0,
    }


DEFAULT_STATE = {
    "driver": "loaded",  # "loaded" | "not_loaded" (nvmlInit fails) | "no_library" (dlopen fails)
    "root": True,  # False: locked-clock setters return NVML_ERROR_NO_PERMISSION
    "gpm": "supported",  # "supported" | "unsupported" (isSupportedDevice = 0) | "absent" (old driver)
    "driver_version": "580.82.07",
    "cuda_driver_version": 13000,
    "other_clients": 0,  # processes outside the fake with the GPU open (they keep the driver up)
    "devices": [_h200(0)],
}


def default_state(**overrides) -> dict:
    state = copy.deepcopy(DEFAULT_STATE)
    state.update(overrides)
    return state


# -- structures, from nvml.h ---------------------------------------------------------------
class PciInfo(Structure):  # nvmlPciInfo_t (v3)
    _fields_ = [("busIdLegacy", c_char * 16), ("domain", c_uint), ("bus", c_uint), ("device", c_uint),
                ("pciDeviceId", c_uint), ("pciSubSystemId", c_uint), ("busId", c_char * 32)]


class Memory(Structure):  # nvmlMemory_t
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class Utilization(Structure):  # nvmlUtilization_t
    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class Value(Union):  # nvmlValue_t
    _fields_ = [("dVal", c_double), ("uiVal", c_uint), ("ulVal", c_ulong), ("ullVal", c_ulonglong),
                ("sllVal", c_longlong), ("siVal", c_int), ("usVal", c_ushort)]


class FieldValue(Structure):  # nvmlFieldValue_t
    _fields_ = [("fieldId", c_uint32), ("scopeId", c_uint32), ("timestamp", c_int64), ("latencyUsec", c_int64),
                ("valueType", c_uint), ("nvmlReturn", c_uint), ("value", Value)]


class Sample(Structure):  # nvmlSample_t
    _fields_ = [("timeStamp", c_ulonglong), ("sampleValue", Value)]


class GpmSupport(Structure):  # nvmlGpmSupport_t
    _fields_ = [("version", c_uint), ("isSupportedDevice", c_uint)]


class GpmMetricInfo(Structure):
    _fields_ = [("shortName", c_char_p), ("longName", c_char_p), ("unit", c_char_p)]


class GpmMetric(Structure):  # nvmlGpmMetric_t
    _fields_ = [("metricId", c_uint), ("nvmlReturn", c_uint), ("value", c_double), ("metricInfo", GpmMetricInfo)]


class GpmMetricsGetHead(Structure):  # nvmlGpmMetricsGet_t up to the metrics array
    _fields_ = [("version", c_uint), ("numMetrics", c_uint), ("sample1", c_void_p), ("sample2", c_void_p)]


# GPM metric ids (nvml.h nvmlGpmMetricId_t) -> state key
_GPM_KEYS = {1: "sm_util", 2: "sm_util", 3: "sm_occupancy", 10: "dram_bw_util",
             20: "pcie_tx", 21: "pcie_rx", 60: "nvlink_rx", 61: "nvlink_tx"}
# nvmlSamplingType_t (nvml.h): NVML_TOTAL_POWER_SAMPLES 0 (mW), NVML_GPU_UTILIZATION_SAMPLES 1,
# NVML_MEMORY_UTILIZATION_SAMPLES 2 (%) -> state key; the driver's sample period per type (us)
_SAMPLE_KEYS = {0: "power_mw", 1: "util_gpu", 2: "util_mem"}
_SAMPLE_PERIOD_US = {"0": 20_000, "1": 166_667, "2": 166_667}
# field ids (nvml.h NVML_FI_*) the fake answers
_FI_TOTAL_ENERGY, _FI_POWER_INSTANT = 83, 186

_U = POINTER(c_uint)
_P = c_void_p


def _sig(*args):
    return CFUNCTYPE(c_int, *args)


class FakeNvmlLib:
    """Stands in for `CDLL("libnvidia-ml.so.1")`: one attribute per nvml.h entry point."""

    def __init__(self, state: dict | None = None, path: str | os.PathLike | None = None):
        self.path = Path(path) if path else None
        if state is None:
            state = json.loads(self.path.read_text()) if self.path and self.path.exists() else default_state()
        self.state = state
        self.lock = threading.Lock()
        self.initialized = 0
        self.calls: dict[str, int] = {}
        self._handles = [ctypes.create_string_buffer(8) for _ in state["devices"]]
        self._addr = {ctypes.addressof(b): i for i, b in enumerate(self._handles)}
        self._samples: dict[int, tuple] = {}
        self._sample_buffers: dict[int, ctypes.Array] = {}
        self._errbuf = ctypes.create_string_buffer(b"Unknown Error (fake NVML)")
        self._t0 = time.monotonic()
        self.gpm_sample_times: list[float] = []  # time.monotonic() of each nvmlGpmSampleGet
        self.sample_queries: list[tuple[int, int]] = []  # (type, lastSeenTimeStamp) of each nvmlDeviceGetSamples
        self._build()

    # -- helpers ------------------------------------------------------------------------
    def save(self) -> None:
        if self.path is not None:
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")  # one per process: several share a state
            tmp.write_text(json.dumps(self.state))
            os.replace(tmp, self.path)

    def _dev(self, handle):
        if not self.initialized:
            return None, UNINITIALIZED
        index = self._addr.get(handle)
        if index is None:
            return None, INVALID_ARGUMENT
        return self.state["devices"][index], SUCCESS

    def _current_sm(self, dev) -> int:
        if dev["locked_gpu"]:
            return dev["locked_gpu"][1]
        return dev["idle_sm"] if dev["event_reasons"] & 0x1 else dev["max_sm"]

    def _current_mem(self, dev) -> int:
        return dev["locked_mem"][1] if dev["locked_mem"] else max(dev["supported_mem"])

    def _last_client_exit(self) -> None:
        """The driver is torn down on GPUs without persistence mode: their locked clocks are gone."""
        dropped = False
        for dev in self.state["devices"]:
            if not dev.get("persistence_mode", 1) and (dev["locked_gpu"] or dev["locked_mem"]):
                dev["locked_gpu"] = dev["locked_mem"] = None
                dropped = True
        if dropped:
            try:
                self.save()
            except OSError:
                pass  # a test's folder already gone at interpreter exit

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    # -- entry points ---------------------------------------------------------------------
    def _build(self) -> None:
        fns = {}

        def entry(name, *argtypes):
            # Pointers travel as void* (C does not check pointee types; ctypes would) and are
            # cast back to the documented pointee type before the body sees them.
            casts = [t if isinstance(t, type) and issubclass(t, ctypes._Pointer) else None for t in argtypes]
            c_args = [_P if cast else t for t, cast in zip(argtypes, casts)]

            def wrap(fn):
                def counted(*args):
                    self._count(name)
                    args = [ctypes.cast(a, cast) if cast and a else a for a, cast in zip(args, casts)]
                    return fn(*args)
                fns[name] = _sig(*c_args)(counted)
                return fn
            return wrap

        def device_entry(name, *argtypes):
            """An entry point whose first argument is a device handle."""
            def wrap(fn):
                def checked(handle, *args):
                    dev, ret = self._dev(handle)
                    return ret if dev is None else fn(dev, *args)
                entry(name, _P, *argtypes)(checked)
                return fn
            return wrap

        @entry("nvmlInitWithFlags", c_uint)
        def init(flags):
            if self.state.get("driver") == "not_loaded":
                return DRIVER_NOT_LOADED
            self.initialized += 1
            return SUCCESS

        @entry("nvmlInit_v2")
        def init_v2():
            return init(0)

        @entry("nvmlShutdown")
        def shutdown():
            if not self.initialized:
                return UNINITIALIZED
            self.initialized -= 1
            if not self.initialized and not self.state.get("other_clients"):
                self._last_client_exit()
            return SUCCESS

        fns["nvmlErrorString"] = CFUNCTYPE(c_void_p, c_int)(lambda ret: ctypes.addressof(self._errbuf))

        @entry("nvmlSystemGetDriverVersion", _P, c_uint)
        def driver_version(buf, size):
            if not self.initialized:
                return UNINITIALIZED
            return _put_string(buf, size, self.state["driver_version"])

        @entry("nvmlSystemGetCudaDriverVersion", POINTER(c_int))
        def cuda_version(out):
            out[0] = self.state["cuda_driver_version"]
            return SUCCESS

        fns["nvmlSystemGetCudaDriverVersion_v2"] = fns["nvmlSystemGetCudaDriverVersion"]

        @entry("nvmlDeviceGetCount_v2", _U)
        def count(out):
            if not self.initialized:
                return UNINITIALIZED
            out[0] = len(self.state["devices"])
            return SUCCESS

        @entry("nvmlDeviceGetHandleByIndex_v2", c_uint, POINTER(c_void_p))
        def handle_by_index(index, out):
            if not self.initialized:
                return UNINITIALIZED
            if index >= len(self._handles):
                return INVALID_ARGUMENT
            out[0] = ctypes.addressof(self._handles[index])
            return SUCCESS

        # nvml.h: nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) and
        # nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device), the bus id
        # "in the following formats: domain:bus:device.function, bus:device.function" (hex,
        # "%x:%x:%x.%x", so CUDA's 4-digit domain matches NVML's 8-digit one); NVML_ERROR_NOT_FOUND
        # when no device has it. nvmlDeviceGetIndex(device, unsigned int *index): NVML's enumeration
        # index, which "may not correlate with other APIs, such as the CUDA device index" (nvml.h).
        @entry("nvmlDeviceGetHandleByUUID", c_char_p, POINTER(c_void_p))
        def handle_by_uuid(uuid, out):
            if not self.initialized:
                return UNINITIALIZED
            if not uuid:
                return INVALID_ARGUMENT
            for i, dev in enumerate(self.state["devices"]):
                if dev["uuid"] == uuid.decode():
                    out[0] = ctypes.addressof(self._handles[i])
                    return SUCCESS
            return NOT_FOUND

        @entry("nvmlDeviceGetHandleByPciBusId_v2", c_char_p, POINTER(c_void_p))
        def handle_by_pci(bus_id, out):
            if not self.initialized:
                return UNINITIALIZED
            wanted = _pci_tuple(bus_id.decode()) if bus_id else None
            if wanted is None:
                return INVALID_ARGUMENT
            for i, dev in enumerate(self.state["devices"]):
                if _pci_tuple(dev["pci_bus_id"]) == wanted:
                    out[0] = ctypes.addressof(self._handles[i])
                    return SUCCESS
            return NOT_FOUND

        @entry("nvmlDeviceGetIndex", _P, _U)
        def device_index(handle, out):
            if not self.initialized:
                return UNINITIALIZED
            index = self._addr.get(handle)
            if index is None:
                return INVALID_ARGUMENT
            out[0] = index
            return SUCCESS

        @device_entry("nvmlDeviceGetName", _P, c_uint)
        def name(dev, buf, size):
            return _put_string(buf, size, dev["name"])

        @device_entry("nvmlDeviceGetUUID", _P, c_uint)
        def uuid(dev, buf, size):
            return _put_string(buf, size, dev["uuid"])

        @device_entry("nvmlDeviceGetPciInfo_v3", POINTER(PciInfo))
        def pci(dev, out):
            info = out.contents
            bus_id = dev["pci_bus_id"].encode()
            info.busId = bus_id
            info.busIdLegacy = bus_id[-12:]
            domain, bus, rest = dev["pci_bus_id"].split(":")
            info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
            info.pciDeviceId = 0x233510DE
            return SUCCESS

        @device_entry("nvmlDeviceGetCudaComputeCapability", POINTER(c_int), POINTER(c_int))
        def cc(dev, major, minor):
            major[0], minor[0] = dev["compute_capability"]
            return SUCCESS

        @device_entry("nvmlDeviceGetMemoryInfo", POINTER(Memory))
        def memory(dev, out):
            out.contents.total = dev["memory_total"]
            out.contents.used = dev["memory_used"]
            out.contents.free = dev["memory_total"] - dev["memory_used"]
            return SUCCESS

        @device_entry("nvmlDeviceGetMemoryBusWidth", _U)
        def bus_width(dev, out):
            out[0] = dev["bus_width"]
            return SUCCESS

        @device_entry("nvmlDeviceGetNumGpuCores", _U)
        def cores(dev, out):
            out[0] = dev["cuda_cores"]
            return SUCCESS

        def clock_query(name, sm_value, mem_value):
            """nvmlDeviceGet*Clock*(device, nvmlClockType_t, unsigned int *clockMHz)."""
            @device_entry(name, c_uint, _U)
            def query(dev, kind, out):
                if kind in (CLOCK_GRAPHICS, CLOCK_SM):
                    out[0] = sm_value(dev)
                elif kind == CLOCK_MEM:
                    out[0] = mem_value(dev)
                else:
                    return INVALID_ARGUMENT
                return SUCCESS

        clock_query("nvmlDeviceGetClockInfo", self._current_sm, self._current_mem)
        clock_query("nvmlDeviceGetMaxClockInfo", lambda d: d["max_sm"], lambda d: max(d["supported_mem"]))
        clock_query("nvmlDeviceGetDefaultApplicationsClock", lambda d: d["default_app_sm"],
                    lambda d: max(d["supported_mem"]))

        def fill_list(values, count, out):
            if not out or count[0] < len(values):
                count[0] = len(values)
                return INSUFFICIENT_SIZE
            for i, v in enumerate(values):
                out[i] = v
            count[0] = len(values)
            return SUCCESS

        @device_entry("nvmlDeviceGetSupportedMemoryClocks", _U, _U)
        def supported_mem(dev, count, out):
            return fill_list(dev["supported_mem"], count, out)

        @device_entry("nvmlDeviceGetSupportedGraphicsClocks", c_uint, _U, _U)
        def supported_graphics(dev, mem, count, out):
            if mem not in dev["supported_mem"]:
                return NOT_FOUND
            return fill_list(dev["supported_graphics"], count, out)

        def set_locked(dev, key, low, high, valid):
            if not self.state.get("root", False):
                return NO_PERMISSION
            symbolic = [v >= LIMIT_ID_RANGE_START for v in (low, high)]
            if any(symbolic) and not all(symbolic):
                return INVALID_ARGUMENT
            if all(symbolic):
                if key == "locked_mem" or LIMIT_ID_RANGE_START in (low, high):
                    return INVALID_ARGUMENT
                if low == high == LIMIT_ID_UNLIMITED:
                    dev[key] = None
                else:
                    tdp = dev["tdp_sm"]
                    dev[key] = [tdp if low == LIMIT_ID_TDP else min(valid), tdp if high == LIMIT_ID_TDP else max(valid)]
            else:
                if low > high or low < min(valid) or high > max(valid):
                    return INVALID_ARGUMENT
                dev[key] = [low, high]
            self.save()
            return SUCCESS

        def reset_locked(dev, key):
            if not self.state.get("root", False):
                return NO_PERMISSION
            dev[key] = None
            self.save()
            return SUCCESS

        @device_entry("nvmlDeviceSetGpuLockedClocks", c_uint, c_uint)
        def set_gpu(dev, low, high):
            if not dev.get("gpu_lock_supported", True):
                return NOT_SUPPORTED  # nvml.h: "if the device does not support this feature"
            return set_locked(dev, "locked_gpu", low, high, dev["supported_graphics"])

        @device_entry("nvmlDeviceResetGpuLockedClocks")
        def reset_gpu(dev):
            if not dev.get("gpu_lock_supported", True):
                return NOT_SUPPORTED  # nvml.h: "if the device does not support this feature"
            return reset_locked(dev, "locked_gpu")

        @device_entry("nvmlDeviceSetMemoryLockedClocks", c_uint, c_uint)
        def set_mem(dev, low, high):
            if not dev.get("mem_lock_supported", True):
                return NOT_SUPPORTED  # nvml.h: "if the device does not support this feature"
            return set_locked(dev, "locked_mem", low, high, dev["supported_mem"])

        @device_entry("nvmlDeviceResetMemoryLockedClocks")
        def reset_mem(dev):
            return reset_locked(dev, "locked_mem")

        @device_entry("nvmlDeviceGetPersistenceMode", _U)
        def persistence_mode(dev, out):  # nvmlEnableState_t *mode; "For all products. For Linux only."
            out[0] = dev.get("persistence_mode", 1)
            return SUCCESS

        @device_entry("nvmlDeviceGetMigMode", _U, _U)
        def mig_mode(dev, current, pending):
            # nvml.h: NVML_ERROR_NOT_SUPPORTED "if device doesn't support MIG mode"
            if not dev.get("mig_supported", True):
                return NOT_SUPPORTED
            current[0], pending[0] = dev.get("mig_mode", [0, 0])
            return SUCCESS

        @device_entry("nvmlDeviceGetPowerUsage", _U)
        def power(dev, out):
            out[0] = dev["power_mw"]
            return SUCCESS

        @device_entry("nvmlDeviceGetTemperature", c_uint, _U)
        def temperature(dev, sensor, out):
            if sensor != 0:
                return INVALID_ARGUMENT
            out[0] = dev["temperature"]
            return SUCCESS

        @device_entry("nvmlDeviceGetUtilizationRates", POINTER(Utilization))
        def utilization(dev, out):
            out.contents.gpu, out.contents.memory = dev["util_gpu"], dev["util_mem"]
            return SUCCESS

        @device_entry("nvmlDeviceGetCurrentClocksEventReasons", POINTER(c_ulonglong))
        def reasons(dev, out):
            out[0] = dev["event_reasons"] | (0x2 if dev["locked_gpu"] else 0)
            return SUCCESS

        fns["nvmlDeviceGetCurrentClocksThrottleReasons"] = fns["nvmlDeviceGetCurrentClocksEventReasons"]

        @device_entry("nvmlDeviceGetFieldValues", c_int, POINTER(FieldValue))
        def field_values(dev, count, values):
            now_us = int(time.time() * 1e6)
            for i in range(count):
                value = values[i]
                value.timestamp, value.latencyUsec = now_us, 0
                if value.fieldId == _FI_POWER_INSTANT:
                    value.valueType, value.nvmlReturn, value.value.uiVal = 1, SUCCESS, dev["power_mw"]
                elif value.fieldId == _FI_TOTAL_ENERGY:
                    elapsed = time.monotonic() - self._t0
                    value.valueType, value.nvmlReturn = 3, SUCCESS
                    value.value.ullVal = int(dev["power_mw"] * elapsed)
                else:
                    value.nvmlReturn = NOT_SUPPORTED
            return SUCCESS

        # nvml.h nvmlDeviceGetSamples(device, nvmlSamplingType_t type, unsigned long long
        # lastSeenTimeStamp, nvmlValueType_t *sampleValType, unsigned int *sampleCount,
        # nvmlSample_t *samples): the driver's buffer of timestamped samples ("CPU timestamp in
        # microseconds"); with samples NULL it returns in sampleCount how many can be queried;
        # "Set lastSeenTimeStamp to one of the timeStamps retrieved from the date of the previous
        # query to get more recent samples"; the count is updated to how many were retrieved;
        # NVML_ERROR_NOT_FOUND "if sample entries are not found". Power, utilisation and clock
        # samples are "unsigned int" (NVML_VALUE_TYPE_UNSIGNED_INT = 1). The fake's driver takes
        # a sample every `sample_period_us[type]` (state) and keeps the last `sample_buffer`.
        @device_entry("nvmlDeviceGetSamples", c_uint, c_ulonglong, _U, _U, POINTER(Sample))
        def samples(dev, kind, last_seen, value_type, count, out):
            if not count:
                return INVALID_ARGUMENT
            periods = self.state.get("sample_period_us", _SAMPLE_PERIOD_US)
            period = periods.get(str(kind))
            if period is None or not self.state.get("samples_supported", True):
                return NOT_SUPPORTED
            now_us = int(time.time() * 1e6)
            newest = now_us - now_us % period
            stamps = [t for t in range(newest - (self.state.get("sample_buffer", 120) - 1) * period,
                                       newest + 1, period) if t > last_seen]
            self.sample_queries.append((kind, last_seen))
            if not stamps:
                return NOT_FOUND
            value_type[0] = 1
            if not out:
                count[0] = len(stamps)
                return SUCCESS
            if count[0] == 0:
                return INVALID_ARGUMENT
            stamps = stamps[:count[0]]
            key = _SAMPLE_KEYS[kind]
            for i, stamp in enumerate(stamps):
                out[i].timeStamp = stamp
                out[i].sampleValue.uiVal = int(dev.get(key, 0))
            count[0] = len(stamps)
            return SUCCESS

        # GPM (Hopper+): absent on old drivers, isSupportedDevice = 0 before Hopper
        if self.state.get("gpm") != "absent":
            @device_entry("nvmlGpmQueryDeviceSupport", POINTER(GpmSupport))
            def gpm_support(dev, out):
                if out.contents.version != 1:
                    return 25  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
                supported = self.state.get("gpm") == "supported" and dev["compute_capability"][0] >= 9
                out.contents.isSupportedDevice = 1 if supported else 0
                return SUCCESS

            @entry("nvmlGpmSampleAlloc", POINTER(c_void_p))
            def gpm_alloc(out):
                if not self.initialized:
                    return UNINITIALIZED
                buf = ctypes.create_string_buffer(16)
                self._sample_buffers[ctypes.addressof(buf)] = buf
                out[0] = ctypes.addressof(buf)
                return SUCCESS

            @entry("nvmlGpmSampleFree", _P)
            def gpm_free(sample):
                if self._sample_buffers.pop(sample, None) is None:
                    return INVALID_ARGUMENT
                self._samples.pop(sample, None)
                return SUCCESS

            @device_entry("nvmlGpmSampleGet", _P)
            def gpm_get(dev, sample):
                if sample not in self._sample_buffers:
                    return INVALID_ARGUMENT
                if self.state.get("gpm") != "supported":
                    return NOT_SUPPORTED
                # nvml.h (nvmlGpmMetricsGet): "The interval between these two nvmlGpmSampleGet()
                # calls should be greater than 100ms due to the internal sample refresh rate";
                # the real call does not refuse a shorter one (the metrics are just wrong), so
                # the fake records each call's time for the tests to check.
                now = time.monotonic()
                self.gpm_sample_times.append(now)
                self._samples[sample] = (now, dict(dev))
                return SUCCESS

            @entry("nvmlGpmMetricsGet", POINTER(GpmMetricsGetHead))
            def gpm_metrics(head_ptr):
                head = head_ptr.contents
                if head.version != 1:
                    return 25
                first, second = self._samples.get(head.sample1), self._samples.get(head.sample2)
                if first is None or second is None:
                    return INVALID_ARGUMENT
                base = ctypes.addressof(head) + ctypes.sizeof(GpmMetricsGetHead)
                base += (-base) % ctypes.alignment(GpmMetric)
                for i in range(head.numMetrics):
                    metric = GpmMetric.from_address(base + i * ctypes.sizeof(GpmMetric))
                    key = _GPM_KEYS.get(metric.metricId)
                    if key is None:
                        metric.nvmlReturn = NOT_SUPPORTED
                        continue
                    metric.nvmlReturn = SUCCESS
                    metric.value = float(second[1].get(key, 0.0))
                return SUCCESS

        self._fns = fns
        for name, fn in fns.items():
            setattr(self, name, fn)


def _pci_tuple(bus_id: str):
    """(domain, bus, device, function) of "domain:bus:device.function" or "bus:device.function" (hex)."""
    try:
        parts = bus_id.strip().split(":")
        if len(parts) == 2:
            parts = ["0", *parts]
        domain, bus, rest = parts
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return None


def _put_string(buf, size, text: str) -> int:
    data = text.encode()
    if len(data) + 1 > size:
        return INSUFFICIENT_SIZE
    ctypes.memmove(buf, data + b"\0", len(data) + 1)
    return SUCCESS


# -- swapping it in -------------------------------------------------------------------------
class _NoLibrary:
    def __init__(self, *args, **kwargs):
        raise OSError("libnvidia-ml.so.1: cannot open shared object file: No such file or directory")


_ORIGINAL_CDLL = None


def _forget_nvml_session() -> None:
    """Make sitsprof's NVML session initialise again: the library underneath it was swapped."""
    from sitsprof.pmu import nvml as session

    with session._lock:
        session._started = False


def install(state=None) -> FakeNvmlLib | None:
    """Swap the fake into pynvml (state: a dict, a path to a JSON state file, or None for $SITSPROF_FAKE_NVML).

    Returns the fake (None for driver "no_library", where loading the library fails)."""
    global _ORIGINAL_CDLL
    import pynvml

    path = None
    if state is None:
        state = os.environ.get(ENV) or default_state()
    if isinstance(state, (str, os.PathLike)):
        path = Path(state)
        state = json.loads(path.read_text())
    if _ORIGINAL_CDLL is None:
        _ORIGINAL_CDLL = pynvml.CDLL
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml._nvmlLib_refcount = 0
    _forget_nvml_session()
    if state.get("driver") == "no_library":
        pynvml.nvmlLib = None
        pynvml.CDLL = _NoLibrary
        return None
    pynvml.CDLL = _ORIGINAL_CDLL
    fake = FakeNvmlLib(state, path)
    pynvml.nvmlLib = fake
    return fake


def uninstall() -> None:
    import pynvml

    if _ORIGINAL_CDLL is not None:
        pynvml.CDLL = _ORIGINAL_CDLL
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml._nvmlLib_refcount = 0
    _forget_nvml_session()


def write_state(path, state: dict | None = None) -> Path:
    path = Path(path)
    path.write_text(json.dumps(state or default_state()))
    return path


def read_state(path) -> dict:
    return json.loads(Path(path).read_text())
