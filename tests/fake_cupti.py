"""A stand-in for cupti-python's PM-sampling API, backed by a simulated GPU.

It follows the real package, read from the PyPI wheels cupti-python 13.3.0 and 13.4.0
(cp311 manylinux), file by file:

- `cupti/cupti.pyi` (the low-level binding `cupti.cupti`): one params class per CUPTI struct,
  fields in snake_case (`PmSampling_DecodeData_Params`: struct_size, p_priv,
  p_pm_sampling_object, p_counter_data_image, counter_data_image_size, decode_stop_reason,
  overflow), each with `.ptr`, the address passed to the function of the same name
  (`pm_sampling_decode_data(p_params: int)`); `cuptiError(status)` with `.status`; `Result`;
  `PmSampling_DecodeStopReason` {OTHER, COUNTER_DATA_FULL, END_OF_RECORDS, COUNT};
  `ProfilerType` {RANGE_PROFILER, PM_SAMPLING, PROFILER_INVALID}. 13.4 renames the classes
  without underscores (`PmSamplingDecodeDataParams`, `PmSamplingDecodeStopReason`) and keeps
  the 13.3 names as aliases: `install(version="13.4.0")` gives both, "13.3.0" only the old.
- `cupti/pm_sampling.py`: `Collector(device_index=0)` with `enable()`, `configure(*, metrics,
  hardware_buffer_size=512 MiB, sampling_interval=10000, trigger_mode, hw_buffer_append_mode,
  single_pass_metric_set_name=None)`, `start()`, `stop()`, `decode(max_samples=10000)`,
  `disable()`, and the exceptions each documents (enable: ValueError bad index, MemoryError,
  RuntimeError already enabled / nvperf missing, PermissionError, cuptiError; configure:
  ValueError for ERROR_NOT_SUPPORTED, "cannot be collected in a single pass"; start/stop:
  RuntimeError for ERROR_INVALID_OPERATION; decode: MemoryError for ERROR_OUT_OF_MEMORY).
  `decode` allocates a fresh counter-data image on every call, never reads the params'
  `overflow` / `decode_stop_reason`, and `CounterData` evaluates one sample per
  `evaluate_metric_values` call when iterated: the behaviour issue 10 items 3-4 work around.
  The Collector keeps its PM-sampling object in `_pm_sampling_object` and its chip in
  `_chip_name` (both 13.3 and 13.4).
- `cupti/profiler_host.py`: `ProfilerHost(chip_name, profiler_type,
  single_pass_metric_set_name=None)` with `initialize()`, `deinitialize()`,
  `create_config_image(metrics)` (ValueError for ERROR_INVALID_METRIC_NAME, naming no metric),
  `evaluate_metric_values(counter_data_image, metrics, index)`, `get_metric_properties(name)`
  (ValueError for an unknown metric); module functions `get_supported_chips()`,
  `get_single_pass_sets(chip)`, `get_metrics_in_single_pass_set(chip, set_name)`,
  `get_num_of_passes(config_image)`.
- `cupti/utils` `metrics_to_c_array(metrics) -> (keepalive, char** address)`.
- CUPTI's cupti_pmsampling.h (13.x) for the semantics: decode appends completed samples to
  the counter-data image until the image is full (COUNTER_DATA_FULL) or the hardware buffer
  is empty (END_OF_RECORDS); an image must be (re)initialised with
  cuptiPmSamplingCounterDataImageInitialize; with KEEP_OLDEST a full hardware buffer keeps
  its oldest records, drops new ones and sets `overflow = 1` in the decode params. Result
  values from cupti_result.h (INVALID_OPERATION 7, OUT_OF_MEMORY 8, NOT_SUPPORTED 27,
  INSUFFICIENT_PRIVILEGES 35, INVALID_CHIP_NAME 46).

What is simulated (not CUPTI's documented layout): the image is a 32-byte header then one
record per sample (start, end as uint64, then one float64 per metric); a hardware-buffer
record is `RECORD_BYTES` bytes. The GPU's clock runs `speed` times faster than the host's
monotonic clock, so a test can record a minute in seconds. Sample k (counted from start())
covers [t0 + k*interval, t0 + (k+1)*interval) and metric j reads `value(k, j)`.
`overflow_mode="error"` makes decode fail with ERROR_OUT_OF_MEMORY after an overflow instead
of setting the flag (what XLA's PM sampler reports seeing: the session must be restarted).
"""
from __future__ import annotations

import ctypes
import enum
import re
import sys
import threading
import time
import types
import weakref

import numpy as np

RECORD_BYTES = 256
HEADER_BYTES = 32
_MAGIC = 0x5053_4D43_5550_5449  # "PSMCUPTI"
CHIP = "GH100"

DEFAULT_SETS = {
    "L2_DRAM": ["lts__t_sectors_lookup_hit.sum", "lts__t_sectors_lookup_miss.sum", "lts__t_sector_hit_rate.pct",
                "dram__bytes_read.sum", "dram__bytes_write.sum"],
    "SM": ["sm__cycles_active.avg", "sm__inst_executed.sum", "smsp__warps_active.avg"],
}


class Result(enum.IntEnum):
    SUCCESS = 0
    ERROR_INVALID_PARAMETER = 1
    ERROR_INVALID_DEVICE = 2
    ERROR_INVALID_OPERATION = 7
    ERROR_OUT_OF_MEMORY = 8
    ERROR_NOT_INITIALIZED = 15
    ERROR_INVALID_METRIC_NAME = 17
    ERROR_NOT_SUPPORTED = 27
    ERROR_INSUFFICIENT_PRIVILEGES = 35
    ERROR_MIG_DEVICE_NOT_SUPPORTED = 43
    ERROR_INVALID_CHIP_NAME = 46
    ERROR_UNKNOWN = 999


class cuptiError(Exception):  # noqa: N801 - the real name
    def __init__(self, status):
        self.status = status
        super().__init__(f"{Result(status).name}")


class PmSampling_DecodeStopReason(enum.IntEnum):  # noqa: N801
    OTHER = 0
    COUNTER_DATA_FULL = 1
    END_OF_RECORDS = 2
    COUNT = 3


class PmSampling_TriggerMode(enum.IntEnum):  # noqa: N801
    GPU_SYSCLK_INTERVAL = 0
    GPU_TIME_INTERVAL = 1
    COUNT = 2


class PmSampling_HardwareBuffer_AppendMode(enum.IntEnum):  # noqa: N801
    KEEP_OLDEST = 0
    KEEP_LATEST = 1


class ProfilerType(enum.IntEnum):
    RANGE_PROFILER = 0
    PM_SAMPLING = 1
    PROFILER_INVALID = 2


_STRUCTS = {  # 13.3 class name -> fields (cupti.pyi)
    "Profiler_Initialize_Params": "struct_size p_priv",
    "Profiler_DeInitialize_Params": "struct_size p_priv",
    "Device_GetChipName_Params": "struct_size p_priv device_index p_chip_name",
    "PmSampling_Enable_Params": "struct_size p_priv device_index p_pm_sampling_object",
    "PmSampling_Disable_Params": "struct_size p_priv p_pm_sampling_object",
    "PmSampling_SetConfig_Params": "struct_size p_priv p_pm_sampling_object config_size p_config "
                                   "hardware_buffer_size sampling_interval trigger_mode hw_buffer_append_mode",
    "PmSampling_Start_Params": "struct_size p_priv p_pm_sampling_object",
    "PmSampling_Stop_Params": "struct_size p_priv p_pm_sampling_object",
    "PmSampling_GetCounterDataSize_Params": "struct_size p_priv p_pm_sampling_object p_metric_names num_metrics "
                                            "max_samples counter_data_size",
    "PmSampling_CounterDataImage_Initialize_Params": "struct_size p_priv p_pm_sampling_object counter_data_size "
                                                     "p_counter_data",
    "PmSampling_DecodeData_Params": "struct_size p_priv p_pm_sampling_object p_counter_data_image "
                                    "counter_data_image_size decode_stop_reason overflow",
    "PmSampling_GetCounterDataInfo_Params": "struct_size p_priv p_counter_data_image counter_data_image_size "
                                            "num_total_samples num_populated_samples num_completed_samples",
    "PmSampling_CounterData_GetSampleInfo_Params": "struct_size p_priv p_pm_sampling_object p_counter_data_image "
                                                   "counter_data_image_size sample_index start_timestamp "
                                                   "end_timestamp",
    "Profiler_Host_Initialize_Params": "struct_size p_priv profiler_type p_chip_name p_counter_availability_image "
                                       "p_host_object p_single_pass_metric_set_name",
    "Profiler_Host_Deinitialize_Params": "struct_size p_priv p_host_object",
    "Profiler_Host_EvaluateToGpuValues_Params": "struct_size p_priv p_host_object p_counter_data_image "
                                                "counter_data_image_size range_index pp_metric_names num_metrics "
                                                "p_metric_values",
}
_REGISTRY: weakref.WeakValueDictionary[int, object] = weakref.WeakValueDictionary()
_KINDS = {name: name.replace("_", "") for name in _STRUCTS}


def _struct_class(name: str, fields: str):
    names = tuple(fields.split())

    def __init__(self):  # noqa: N807
        for field in names:
            setattr(self, field, 0)
        _REGISTRY[id(self)] = self

    return type(name, (), {"__slots__": names + ("__weakref__",), "__init__": __init__, "_kind": name.replace("_", ""),
                           "ptr": property(lambda self: id(self))})


def _new_name(old: str) -> str:
    """13.4's PEP 8 name of a 13.3 class: PmSampling_DecodeData_Params -> PmSamplingDecodeDataParams."""
    return old.replace("_", "")


def _params(p_params: int, cls_name: str):
    params = _REGISTRY.get(p_params)
    if params is None or params._kind != _KINDS[cls_name]:
        raise cuptiError(Result.ERROR_INVALID_PARAMETER)
    if params.struct_size == 0:
        raise cuptiError(Result.ERROR_INVALID_PARAMETER)  # CUPTI checks structSize first
    return params


def _c_strings(address: int, count: int) -> list[str]:
    if not address or not count:
        return []
    array = (ctypes.c_char_p * count).from_address(address)
    return [array[i].decode() for i in range(count)]


def metrics_to_c_array(metrics):
    """cupti.utils.metrics_to_c_array: (keepalive, address of a char* array)."""
    array = (ctypes.c_char_p * len(metrics))(*[m.encode() for m in metrics])
    return array, ctypes.addressof(array)


class FakeGpu:
    """The device behind the stand-in: its clock, its hardware buffer, the calls it saw."""

    def __init__(self, *, speed: float = 1.0, sets: dict | None = None, devices: int = 1,
                 overflow_mode: str = "flag", fail: dict | None = None, passes=None, dlopen_nvperf: str | None = None):
        # profiler_initialize dlopens nvperf by bare name, as CUPTI does; the library found must
        # export this symbol (the test's own nvperf, not one ldconfig happens to know)
        self.dlopen_nvperf = dlopen_nvperf
        self.speed = float(speed)
        self.sets = {k: list(v) for k, v in (sets or DEFAULT_SETS).items()}
        self.known = {m for ms in self.sets.values() for m in ms}
        self.devices = devices
        self.overflow_mode = overflow_mode
        self.fail = dict(fail or {})  # call name -> Result to fail with (once)
        self.passes = passes  # callable(metrics) -> passes; default: 1 when one set holds them all
        self.calls: list[str] = []
        self.lock = threading.Lock()
        self.profiler_initialized = 0
        self.enabled = False
        self.started = False
        self.config = None
        self.host_objects: set[int] = set()
        self.images_initialized = 0
        self.decodes = 0
        self.lost = 0  # samples the hardware buffer dropped (KEEP_OLDEST, full)
        self.produced_total = 0
        self._views: dict = {}
        self._names: dict = {}
        self._headers: dict = {}
        self._epoch = time.monotonic_ns()
        self.starts = 0
        self.lost_runs: list[tuple[int, int]] = []  # (first sample index, count) the full buffer refused
        self.decode_images: set[int] = set()  # addresses decoded into: one when the image is reused
        self._reset_buffer()

    # -- simulated hardware ------------------------------------------------------------
    def _reset_buffer(self):
        self.runs: list[list[int]] = []  # [first sample index, count] held in the hardware buffer
        self.held = 0
        self.next_k = 0
        self.overflow_pending = False
        self.stuck = False
        self.overflow_flags = getattr(self, "overflow_flags", 0)

    def value(self, k, j):
        return (np.asarray(k) % 997 + 1.0) * (j + 1)

    def _check_fail(self, name):
        self.calls.append(name)
        status = self.fail.pop(name, None)
        if status is not None:
            raise cuptiError(status)

    def _produce(self, now_ns: int | None = None):
        if not self.started:
            return
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        cfg = self.config
        produced = int((now_ns - self.t0_host) * self.speed) // cfg["interval"]
        new = produced - self.next_k
        if new <= 0:
            return
        capacity = cfg["capacity"]
        accept = 0 if self.stuck else max(0, min(new, capacity - self.held))
        if accept:
            if self.runs and self.runs[-1][0] + self.runs[-1][1] == self.next_k:
                self.runs[-1][1] += accept
            else:
                self.runs.append([self.next_k, accept])
            self.held += accept
        if new > accept:
            self.lost += new - accept
            self.lost_runs.append((self.next_k + accept, new - accept))
            self.overflow_pending = True
            if self.overflow_mode == "error":
                self.stuck = True
        self.next_k = produced
        self.produced_total += new

    # -- cupti.cupti functions ---------------------------------------------------------
    def profiler_initialize(self, p):
        _params(p, "Profiler_Initialize_Params")
        self._check_fail("profiler_initialize")
        if self.dlopen_nvperf:  # libcupti.so.13 has no RUNPATH: a bare name, the loader's path only
            try:
                libs = [ctypes.CDLL(name) for name in ("libnvperf_host.so", "libnvperf_target.so")]
            except OSError:
                raise cuptiError(Result.ERROR_NOT_INITIALIZED) from None
            if not all(hasattr(lib, self.dlopen_nvperf) for lib in libs):
                raise cuptiError(Result.ERROR_NOT_INITIALIZED)
        self.profiler_initialized += 1

    def profiler_deinitialize(self, p):
        _params(p, "Profiler_DeInitialize_Params")
        self.calls.append("profiler_deinitialize")
        self.profiler_initialized = max(0, self.profiler_initialized - 1)

    def device_get_chip_name(self, p):
        params = _params(p, "Device_GetChipName_Params")
        self._check_fail("device_get_chip_name")
        if not 0 <= params.device_index < self.devices:
            raise cuptiError(Result.ERROR_INVALID_PARAMETER)
        params.p_chip_name = CHIP

    def pm_sampling_enable(self, p):
        params = _params(p, "PmSampling_Enable_Params")
        self._check_fail("pm_sampling_enable")
        if self.enabled:
            raise cuptiError(Result.ERROR_INVALID_OPERATION)
        self.enabled = True
        self._object = ctypes.c_uint64(0xC0FFEE)
        params.p_pm_sampling_object = ctypes.addressof(self._object)

    def _object_of(self, params):
        if not self.enabled or params.p_pm_sampling_object != ctypes.addressof(self._object):
            raise cuptiError(Result.ERROR_INVALID_PARAMETER)

    def pm_sampling_disable(self, p):
        params = _params(p, "PmSampling_Disable_Params")
        self.calls.append("pm_sampling_disable")
        self._object_of(params)
        self.enabled = self.started = False
        self.config = None

    def pm_sampling_set_config(self, p):
        params = _params(p, "PmSampling_SetConfig_Params")
        self._check_fail("pm_sampling_set_config")
        self._object_of(params)
        blob = bytes((ctypes.c_char * params.config_size).from_address(params.p_config))
        metrics = blob.decode().split("\0")
        if self._passes(metrics) > 1:
            raise cuptiError(Result.ERROR_NOT_SUPPORTED)
        self.config = {"metrics": metrics, "interval": int(params.sampling_interval),
                       "capacity": max(1, int(params.hardware_buffer_size) // RECORD_BYTES),
                       "append": int(params.hw_buffer_append_mode)}

    def pm_sampling_start(self, p):
        params = _params(p, "PmSampling_Start_Params")
        self._check_fail("pm_sampling_start")
        self._object_of(params)
        if self.started:
            raise cuptiError(Result.ERROR_INVALID_OPERATION)
        self.started = True
        self.lost += self.held  # records a restart throws away
        self._reset_buffer()
        self.t0_host = time.monotonic_ns()
        self.t0_gpu = 1_000_000_007 + int((self.t0_host - self._epoch) * self.speed)  # the GPU clock runs on
        self.starts += 1

    def pm_sampling_stop(self, p):
        params = _params(p, "PmSampling_Stop_Params")
        self._check_fail("pm_sampling_stop")
        self._object_of(params)
        if not self.started:
            raise cuptiError(Result.ERROR_INVALID_OPERATION)
        with self.lock:
            self._produce()
        self.started = False

    def _record_bytes(self, num_metrics):
        return 16 + 8 * num_metrics

    def pm_sampling_get_counter_data_size(self, p):
        params = _params(p, "PmSampling_GetCounterDataSize_Params")
        self._object_of(params)
        if params.max_samples <= 0:
            raise cuptiError(Result.ERROR_INVALID_PARAMETER)
        params.counter_data_size = HEADER_BYTES + params.max_samples * self._record_bytes(params.num_metrics)

    def _image(self, address, size):
        """The caller's memory at `address` (cached per buffer, as CUPTI just dereferences it)."""
        key = (address, size)
        image = self._views.get(key)
        if image is None:
            if len(self._views) > 64:
                self._views.clear()
            image = self._views[key] = np.frombuffer((ctypes.c_char * size).from_address(address), dtype=np.uint8)
        return image

    def _header(self, image):
        header = image[:HEADER_BYTES].view(np.uint64)
        if header[0] != _MAGIC:
            raise cuptiError(Result.ERROR_INVALID_PARAMETER)  # not initialised
        return header

    def _records(self, image, header):
        m, cap = int(header[2]), int(header[1])
        width = self._record_bytes(m)
        body = image[HEADER_BYTES:HEADER_BYTES + cap * width]
        return body.view(np.uint8).reshape(cap, width), m

    def pm_sampling_counter_data_image_initialize(self, p):
        params = _params(p, "PmSampling_CounterDataImage_Initialize_Params")
        self._object_of(params)
        image = self._image(params.p_counter_data, params.counter_data_size)
        m = len(self.config["metrics"])
        cap = (params.counter_data_size - HEADER_BYTES) // self._record_bytes(m)
        image[:] = 0
        image[:HEADER_BYTES].view(np.uint64)[:] = (_MAGIC, cap, m, 0)
        self.images_initialized += 1

    def pm_sampling_decode_data(self, p):
        params = _params(p, "PmSampling_DecodeData_Params")
        self._object_of(params)
        self.decodes += 1
        self.decode_images.add(params.p_counter_data_image)
        image = self._image(params.p_counter_data_image, params.counter_data_image_size)
        header = self._header(image)
        with self.lock:
            self._produce()
            if self.stuck:
                raise cuptiError(Result.ERROR_OUT_OF_MEMORY)
            records, m = self._records(image, header)
            done, cap = int(header[3]), int(header[1])
            room = cap - done
            taken = 0
            while room > 0 and self.runs:
                first, count = self.runs[0]
                n = min(room, count)
                k = np.arange(first, first + n, dtype=np.int64)
                rows = records[done + taken:done + taken + n]
                stamps = rows[:, :16].view(np.uint64)
                stamps[:, 0] = self.t0_gpu + k * self.config["interval"]
                stamps[:, 1] = stamps[:, 0] + self.config["interval"]
                values = rows[:, 16:].view(np.float64)
                for j in range(m):
                    values[:, j] = self.value(k, j)
                taken += n
                room -= n
                self.held -= n
                if n == count:
                    self.runs.pop(0)
                else:
                    self.runs[0] = [first + n, count - n]
            header[3] = done + taken
            full = header[3] == cap
            params.decode_stop_reason = (PmSampling_DecodeStopReason.COUNTER_DATA_FULL if full and self.runs
                                         else PmSampling_DecodeStopReason.END_OF_RECORDS)
            params.overflow = 1 if self.overflow_pending else 0
            self.overflow_flags += params.overflow  # decodes that reported an overflow, for the tests
            self.overflow_pending = False

    def pm_sampling_get_counter_data_info(self, p):
        params = _params(p, "PmSampling_GetCounterDataInfo_Params")
        image = self._image(params.p_counter_data_image, params.counter_data_image_size)
        header = self._header(image)
        params.num_total_samples = int(header[1])
        params.num_populated_samples = params.num_completed_samples = int(header[3])

    def _slot(self, address, size, index):
        """Address of sample `index` in an initialised image holding it (header: magic, capacity, metrics, done)."""
        header = self._headers.get(address)
        if header is None:
            header = self._headers[address] = (ctypes.c_uint64 * 4).from_address(address)
        if header[0] != _MAGIC or not 0 <= index < header[3]:
            raise cuptiError(Result.ERROR_INVALID_PARAMETER)
        m = header[2]
        return address + HEADER_BYTES + index * (16 + 8 * m), m

    def pm_sampling_counter_data_get_sample_info(self, p):
        params = _params(p, "PmSampling_CounterData_GetSampleInfo_Params")
        slot, _ = self._slot(params.p_counter_data_image, params.counter_data_image_size, params.sample_index)
        stamps = (ctypes.c_uint64 * 2).from_address(slot)
        params.start_timestamp, params.end_timestamp = stamps[0], stamps[1]

    def profiler_host_initialize(self, p):
        params = _params(p, "Profiler_Host_Initialize_Params")
        self._check_fail("profiler_host_initialize")
        if params.p_chip_name != CHIP:
            raise cuptiError(Result.ERROR_INVALID_CHIP_NAME)
        if params.p_single_pass_metric_set_name and params.p_single_pass_metric_set_name not in self.sets:
            raise cuptiError(Result.ERROR_INVALID_PARAMETER)
        handle = ctypes.c_uint64(len(self.host_objects) + 1)
        self.host_objects.add(id(handle))
        self._hosts = getattr(self, "_hosts", {})
        self._hosts[id(handle)] = handle
        params.p_host_object = id(handle)

    def profiler_host_deinitialize(self, p):
        params = _params(p, "Profiler_Host_Deinitialize_Params")
        self.host_objects.discard(params.p_host_object)

    def profiler_host_evaluate_to_gpu_values(self, p):
        params = _params(p, "Profiler_Host_EvaluateToGpuValues_Params")
        if params.p_host_object not in self.host_objects:
            raise cuptiError(Result.ERROR_INVALID_PARAMETER)
        slot, m = self._slot(params.p_counter_data_image, params.counter_data_image_size, params.range_index)
        key = (params.pp_metric_names, params.num_metrics)
        columns = self._names.get(key)
        if columns is None:
            names = _c_strings(*key)
            configured = self.config["metrics"] if self.config else names
            if any(n not in configured for n in names):
                raise cuptiError(Result.ERROR_INVALID_METRIC_NAME)
            columns = self._names[key] = [configured.index(n) for n in names]
        if len(columns) == m and columns[-1] == m - 1 and columns == list(range(m)):
            ctypes.memmove(params.p_metric_values, slot + 16, 8 * m)
        else:
            row = (ctypes.c_double * m).from_address(slot + 16)
            out = (ctypes.c_double * len(columns)).from_address(params.p_metric_values)
            for i, j in enumerate(columns):
                out[i] = row[j]

    def _passes(self, metrics):
        if self.passes is not None:
            return self.passes(metrics)
        return 1 if any(set(metrics) <= set(s) for s in self.sets.values()) else 2


def _binding(gpu: FakeGpu, version: str) -> types.ModuleType:
    cc = types.ModuleType("cupti.cupti")
    cc.Result, cc.cuptiError, cc.ProfilerType = Result, cuptiError, ProfilerType
    cc.PmSampling_DecodeStopReason = PmSampling_DecodeStopReason
    cc.PmSampling_TriggerMode = PmSampling_TriggerMode
    cc.PmSampling_HardwareBuffer_AppendMode = PmSampling_HardwareBuffer_AppendMode
    new_names = tuple(int(x) for x in version.split(".")[:2]) >= (13, 4)
    for old, fields in _STRUCTS.items():
        cls = _struct_class(old, fields)
        setattr(cc, old, cls)
        if new_names:
            setattr(cc, _new_name(old), cls)
        setattr(cc, struct_size_name(old), 64)
    if new_names:
        cc.PmSamplingDecodeStopReason = PmSampling_DecodeStopReason
        cc.PmSamplingTriggerMode = PmSampling_TriggerMode
        cc.PmSamplingHardwareBufferAppendMode = PmSampling_HardwareBuffer_AppendMode
    for name in dir(FakeGpu):
        if name.startswith(("pm_sampling_", "profiler_", "device_get_chip_name")):
            setattr(cc, name, getattr(gpu, name))
    return cc


def struct_size_name(old: str) -> str:
    """The binding's size constant of a params class: PmSampling_DecodeData_Params ->
    PM_SAMPLING_DECODE_DATA_PARAMS_STRUCT_SIZE (Profiler_DeInitialize_Params -> PROFILER_DEINITIALIZE_...)."""
    snake = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", old.replace("DeInitialize", "Deinitialize"))
    return snake.upper().replace("__", "_") + "_STRUCT_SIZE"


def _struct(cc, old):
    params = getattr(cc, old)()
    params.struct_size = 64
    return params


def _profiler_host(cc, gpu: FakeGpu) -> types.ModuleType:
    ph = types.ModuleType("cupti.profiler_host")
    ph.ProfilerType = ProfilerType

    def get_supported_chips():
        return [CHIP]

    def _chip(chip_name):
        if chip_name != CHIP:
            raise ValueError(f'Unsupported chip_name "{chip_name}". Use get_supported_chips() to query supported chips')

    def get_single_pass_sets(chip_name):
        _chip(chip_name)
        gpu.calls.append("get_single_pass_sets")
        return list(gpu.sets)

    def get_metrics_in_single_pass_set(chip_name, set_name):
        _chip(chip_name)
        if set_name not in gpu.sets:
            raise ValueError(f'Invalid set name "{set_name}". Use get_single_pass_sets(chip_name) to check '
                             'single pass sets for a chip')
        return list(gpu.sets[set_name])

    def get_num_of_passes(config_image):
        gpu._check_fail("get_num_of_passes")
        if len(config_image) == 0:
            raise ValueError("config_image must be non-empty")
        return gpu._passes(bytes(config_image).decode().split("\0"))

    class ProfilerHost:
        def __init__(self, chip_name, profiler_type, single_pass_metric_set_name=None):
            self._chip_name, self._type = chip_name, int(ProfilerType(profiler_type))
            self._set = single_pass_metric_set_name
            self._p_host_object = None

        def initialize(self):
            params = _struct(cc, "Profiler_Host_Initialize_Params")
            params.profiler_type, params.p_chip_name = self._type, self._chip_name
            params.p_single_pass_metric_set_name = self._set or 0
            try:
                cc.profiler_host_initialize(params.ptr)
            except cuptiError as e:
                if e.status == Result.ERROR_INVALID_CHIP_NAME:
                    raise ValueError(f"Invalid chip_name {self._chip_name!r}") from None
                raise
            self._p_host_object = params.p_host_object

        def deinitialize(self):
            if self._p_host_object is not None:
                params = _struct(cc, "Profiler_Host_Deinitialize_Params")
                params.p_host_object = self._p_host_object
                cc.profiler_host_deinitialize(params.ptr)
            self._p_host_object = None

        def create_config_image(self, metrics):
            if self._p_host_object is None:
                raise RuntimeError("Call initialize() before using this object.")
            if any(m not in gpu.known for m in metrics):
                raise ValueError(f"One or more metrics in {list(metrics)!r} are invalid or not supported on "
                                 f"{self._chip_name}")
            return np.frombuffer("\0".join(metrics).encode(), dtype=np.uint8).copy()

        def get_metric_properties(self, metric_name):
            if metric_name not in gpu.known:
                raise ValueError(f"Metric {metric_name!r} is invalid or not supported on {self._chip_name}")
            return types.SimpleNamespace(description=metric_name, hw_unit="", dim_unit="")

        def evaluate_metric_values(self, counter_data_image, metrics, index):
            keep, names = metrics_to_c_array(list(metrics))
            out = np.zeros(len(metrics), dtype=np.float64)
            params = _struct(cc, "Profiler_Host_EvaluateToGpuValues_Params")
            params.p_host_object = self._p_host_object
            params.p_counter_data_image = counter_data_image.ctypes.data
            params.counter_data_image_size = len(counter_data_image)
            params.pp_metric_names, params.num_metrics = names, len(metrics)
            params.range_index, params.p_metric_values = index, out.ctypes.data
            cc.profiler_host_evaluate_to_gpu_values(params.ptr)
            return out.copy()

    for fn in (get_supported_chips, get_single_pass_sets, get_metrics_in_single_pass_set, get_num_of_passes):
        setattr(ph, fn.__name__, fn)
    ph.ProfilerHost = ProfilerHost
    return ph


def _pm_sampling(cc, ph) -> types.ModuleType:
    pm = types.ModuleType("cupti.pm_sampling")
    pm.DecodeStopReason = PmSampling_DecodeStopReason
    pm.TriggerMode = PmSampling_TriggerMode
    pm.HardwareBuffer_AppendMode = PmSampling_HardwareBuffer_AppendMode

    class Sample(types.SimpleNamespace):
        pass

    class CounterData:
        def __init__(self, image, metrics, chip, info, starts, ends):
            self._image, self.metrics = image, metrics
            self.num_total_samples = info.num_total_samples
            self.num_populated_samples = info.num_populated_samples
            self.num_completed_samples = info.num_completed_samples
            self._starts, self._ends = starts, ends
            self._host = ph.ProfilerHost(chip, ProfilerType.PM_SAMPLING)
            self._host.initialize()

        def __len__(self):
            return self.num_completed_samples

        def __getitem__(self, i):
            values = self._host.evaluate_metric_values(self._image, self.metrics, i).tolist()
            return Sample(start_timestamp=self._starts[i], end_timestamp=self._ends[i], metric_values=values)

        def __iter__(self):
            for i in range(self.num_completed_samples):
                yield self[i]

    class Collector:
        def __init__(self, device_index=0):
            self._device_index = device_index
            self._metrics, self._pm_sampling_object, self._chip_name, self._config = [], None, None, None

        def _need(self):
            if self._pm_sampling_object is None:
                raise RuntimeError("Collector is not enabled. Call enable() first.")

        def enable(self):
            try:
                params = _struct(cc, "Profiler_Initialize_Params")
                cc.profiler_initialize(params.ptr)
            except cuptiError as e:
                if e.status == Result.ERROR_NOT_INITIALIZED:
                    raise RuntimeError("CUPTI could not load the nvperf* libraries required for profiling.") from None
                raise
            try:
                chip = _struct(cc, "Device_GetChipName_Params")
                chip.device_index = self._device_index
                try:
                    cc.device_get_chip_name(chip.ptr)
                except cuptiError as e:
                    if e.status == Result.ERROR_INVALID_PARAMETER:
                        raise ValueError(f"Invalid device_index: {self._device_index}") from None
                    raise
                params = _struct(cc, "PmSampling_Enable_Params")
                params.device_index = self._device_index
                try:
                    cc.pm_sampling_enable(params.ptr)
                except cuptiError as e:
                    if e.status == Result.ERROR_OUT_OF_MEMORY:
                        raise MemoryError("Memory allocation failed while creating PM sampling object.") from None
                    if e.status == Result.ERROR_INVALID_OPERATION:
                        raise RuntimeError("PM sampling is already enabled on this device.") from None
                    if e.status == Result.ERROR_INSUFFICIENT_PRIVILEGES:
                        raise PermissionError("Insufficient privileges for PM sampling") from None
                    raise
            except RuntimeError:
                raise  # as the real one: no rollback for RuntimeError
            except Exception:
                params = _struct(cc, "Profiler_DeInitialize_Params")
                cc.profiler_deinitialize(params.ptr)
                raise
            self._chip_name, self._pm_sampling_object = chip.p_chip_name, params.p_pm_sampling_object

        def configure(self, *, metrics, hardware_buffer_size=512 * 1024 * 1024, sampling_interval=10000,
                      trigger_mode=PmSampling_TriggerMode.GPU_TIME_INTERVAL,
                      hw_buffer_append_mode=PmSampling_HardwareBuffer_AppendMode.KEEP_OLDEST,
                      single_pass_metric_set_name=None):
            self._need()
            if hardware_buffer_size <= 0:
                raise ValueError("hardware_buffer_size must be > 0")
            if sampling_interval <= 0:
                raise ValueError("sampling_interval must be > 0")
            host = ph.ProfilerHost(self._chip_name, ProfilerType.PM_SAMPLING,
                                   single_pass_metric_set_name=single_pass_metric_set_name)
            host.initialize()
            try:
                config = host.create_config_image(metrics=metrics)
                params = _struct(cc, "PmSampling_SetConfig_Params")
                params.p_pm_sampling_object = self._pm_sampling_object
                params.config_size, params.p_config = len(config), config.ctypes.data
                params.hardware_buffer_size, params.sampling_interval = hardware_buffer_size, sampling_interval
                params.trigger_mode, params.hw_buffer_append_mode = int(trigger_mode), int(hw_buffer_append_mode)
                cc.pm_sampling_set_config(params.ptr)
            except cuptiError as e:
                if e.status == Result.ERROR_NOT_SUPPORTED:
                    raise ValueError("Requested PM sampling configuration is not supported. This may mean the "
                                     "requested metrics cannot be collected in a single pass, ...") from None
                raise
            finally:
                host.deinitialize()
            self._metrics, self._config = list(metrics), config

        def _run(self, name, already):
            self._need()
            if self._config is None:
                raise RuntimeError("Collector is not configured. Call configure() first.")
            params = _struct(cc, f"PmSampling_{name.title()}_Params")
            params.p_pm_sampling_object = self._pm_sampling_object
            try:
                getattr(cc, f"pm_sampling_{name}")(params.ptr)
            except cuptiError as e:
                if e.status == Result.ERROR_INVALID_OPERATION:
                    raise RuntimeError(f"PM Sampling collection has already {already}") from None
                raise

        def start(self):
            self._run("start", "started")

        def stop(self):
            self._run("stop", "stopped")

        def decode(self, max_samples=10000):
            self._need()
            if max_samples <= 0:
                raise ValueError("max_samples must be > 0")
            keep, names = metrics_to_c_array(self._metrics)
            size = _struct(cc, "PmSampling_GetCounterDataSize_Params")
            size.p_pm_sampling_object, size.p_metric_names = self._pm_sampling_object, names
            size.num_metrics, size.max_samples = len(self._metrics), max_samples
            cc.pm_sampling_get_counter_data_size(size.ptr)
            image = np.zeros(size.counter_data_size, dtype=np.uint8)
            init = _struct(cc, "PmSampling_CounterDataImage_Initialize_Params")
            init.p_pm_sampling_object = self._pm_sampling_object
            init.counter_data_size, init.p_counter_data = len(image), image.ctypes.data
            cc.pm_sampling_counter_data_image_initialize(init.ptr)
            dec = _struct(cc, "PmSampling_DecodeData_Params")
            dec.p_pm_sampling_object = self._pm_sampling_object
            dec.p_counter_data_image, dec.counter_data_image_size = image.ctypes.data, len(image)
            try:
                cc.pm_sampling_decode_data(dec.ptr)
            except cuptiError as e:
                if e.status == Result.ERROR_OUT_OF_MEMORY:
                    raise MemoryError("Record overflow in the hardware buffer.") from None
                raise
            info = _struct(cc, "PmSampling_GetCounterDataInfo_Params")
            info.p_counter_data_image, info.counter_data_image_size = image.ctypes.data, len(image)
            cc.pm_sampling_get_counter_data_info(info.ptr)
            starts, ends = [], []
            for i in range(info.num_completed_samples):
                si = _struct(cc, "PmSampling_CounterData_GetSampleInfo_Params")
                si.p_pm_sampling_object = self._pm_sampling_object
                si.p_counter_data_image, si.counter_data_image_size = image.ctypes.data, len(image)
                si.sample_index = i
                cc.pm_sampling_counter_data_get_sample_info(si.ptr)
                starts.append(si.start_timestamp)
                ends.append(si.end_timestamp)
            return CounterData(image, self._metrics, self._chip_name, info, starts, ends)

        def disable(self):
            if self._pm_sampling_object is not None:
                params = _struct(cc, "PmSampling_Disable_Params")
                params.p_pm_sampling_object = self._pm_sampling_object
                cc.pm_sampling_disable(params.ptr)
                params = _struct(cc, "Profiler_DeInitialize_Params")
                cc.profiler_deinitialize(params.ptr)
            self._pm_sampling_object = self._chip_name = None

    pm.Sample, pm.CounterData, pm.Collector = Sample, CounterData, Collector
    return pm


def install(monkeypatch, *, version: str = "13.4.0", **gpu_options) -> FakeGpu:
    """Put the stand-in `cupti` package into sys.modules (undone by monkeypatch); returns its GPU."""
    gpu = FakeGpu(**gpu_options)
    package = types.ModuleType("cupti")
    package.__path__ = []
    package.__version__ = version
    cc = _binding(gpu, version)
    utils = types.ModuleType("cupti.utils")
    utils.metrics_to_c_array = metrics_to_c_array
    ph = _profiler_host(cc, gpu)
    pm = _pm_sampling(cc, ph)
    package.cupti, package.utils, package.profiler_host, package.pm_sampling = cc, utils, ph, pm
    for name, module in {"cupti": package, "cupti.cupti": cc, "cupti.utils": utils,
                         "cupti.profiler_host": ph, "cupti.pm_sampling": pm}.items():
        if monkeypatch is None:
            sys.modules[name] = module
        else:
            monkeypatch.setitem(sys.modules, name, module)
    return gpu
