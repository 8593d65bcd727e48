"""CUPTI PM sampling through cupti-python (>= 13.3): availability, the metric check, one session.

Why the decode path bypasses `cupti.pm_sampling.Collector.decode` (cupti-python 13.3/13.4,
cupti/pm_sampling.py): it allocates and initialises a new counter-data image on every call,
never reads the `overflow` and `decodeStopReason` that cuptiPmSamplingDecodeData returns, and
its CounterData creates a ProfilerHost per decode and evaluates one sample per Python call
with fresh lists. So the Collector does only what it does well (enable / configure / start /
stop / disable, with its documented exceptions) and the session decodes through the low-level
binding `cupti.cupti`: one counter-data image sized to a decode period, allocated once and
re-initialised before each decode; the decode params' `overflow` and `decode_stop_reason` read
after each decode; one profiler-host object and one set of params structs reused for the
whole run; timestamps and metric values written straight into preallocated numpy blocks
(CUPTI evaluates one sample index per cuptiProfilerHostEvaluateToGpuValues call, all metrics
at once, so a decode costs two C calls per sample and no Python object per sample).

Why the default interval is 100 us, not CUPTI's 10 us: the host evaluates every sample, on
one Python thread, with two CUPTI calls each. sitsprof's own share of that loop is about 0.3 us
per sample (`bench/bench_cupti_sampler.py --stand-in` prints it as `loop_us_per_sample`, the two
calls made no-ops); with the stand-in's calls it is about 7 us (`host_us_per_sample`), and
CUPTI's metric evaluation is C but not free (the GPU test prints the real `host_us_per_sample`).
At 10 us the GPU makes 100,000 samples/s: 70% of a core at 7 us each, all of it at 10 us, and
then the hardware buffer fills and CUPTI drops samples. At 100 us it is 10,000 samples/s: 7% of
a core, with room for an evaluation ten times as slow. 10 us stays available
(`--cupti-interval 10us`) for short windows; the overflow it causes is counted and reported.

Errors are one line (pmu.errors): a metric the chip lacks or a metric list that needs more
than one pass is named at configure time, against the chip's single-pass PM-sampling sets;
ValueError / RuntimeError / PermissionError / MemoryError / cuptiError from enable, configure
or start become UnsupportedError (NoGpuError for a device index CUDA does not have), and any
failure after enable disables PM sampling again. PM sampling counts for the whole GPU, whichever
process runs on it; without root it needs profiling permission
(NVreg_RestrictProfilingToAdminUsers=0). `device_index` is the CUDA device index.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sitsprof.pmu.errors import NoGpuError, UnsupportedError
from sitsprof.pmu.nvml import cuda_version_text
from sitsprof.pmu.nvperf import ensure_nvperf

__all__ = [
    "COUNTER_DATA_FULL",
    "DEFAULT_BUFFER_BYTES",
    "DEFAULT_DECODE_EVERY_S",
    "DEFAULT_INTERVAL_NS",
    "END_OF_RECORDS",
    "MIN_VERSION",
    "OUT_OF_MEMORY",
    "STOP_REASONS",
    "Decoded",
    "PmSamplingSession",
    "availability",
    "check_metrics",
    "chip_name",
    "image_samples",
    "pm_sampling_sets",
    "single_pass_sets",
]

MIN_VERSION = (13, 3)
DEFAULT_INTERVAL_NS = 100_000
DEFAULT_BUFFER_BYTES = 512 * 1024 * 1024  # cupti-python's configure() default
DEFAULT_DECODE_EVERY_S = 0.05
_IMAGE_MARGIN = 2.0  # image holds this many decode periods: one late wake-up does not split a decode
_MIN_IMAGE_SAMPLES = 256

# cupti.cupti params classes (13.3 names; 13.4 adds the same names without underscores and keeps
# these as aliases) and their struct-size constants.
_SIZES = {
    "PmSampling_GetCounterDataSize_Params": "PM_SAMPLING_GET_COUNTER_DATA_SIZE_PARAMS_STRUCT_SIZE",
    "PmSampling_CounterDataImage_Initialize_Params": "PM_SAMPLING_COUNTER_DATA_IMAGE_INITIALIZE_PARAMS_STRUCT_SIZE",
    "PmSampling_DecodeData_Params": "PM_SAMPLING_DECODE_DATA_PARAMS_STRUCT_SIZE",
    "PmSampling_GetCounterDataInfo_Params": "PM_SAMPLING_GET_COUNTER_DATA_INFO_PARAMS_STRUCT_SIZE",
    "PmSampling_CounterData_GetSampleInfo_Params": "PM_SAMPLING_COUNTER_DATA_GET_SAMPLE_INFO_PARAMS_STRUCT_SIZE",
    "Device_GetChipName_Params": "DEVICE_GET_CHIP_NAME_PARAMS_STRUCT_SIZE",
    "Profiler_Host_Initialize_Params": "PROFILER_HOST_INITIALIZE_PARAMS_STRUCT_SIZE",
    "Profiler_Host_Deinitialize_Params": "PROFILER_HOST_DEINITIALIZE_PARAMS_STRUCT_SIZE",
    "Profiler_Host_EvaluateToGpuValues_Params": "PROFILER_HOST_EVALUATE_TO_GPU_VALUES_PARAMS_STRUCT_SIZE",
}
# CUpti_PmSampling_DecodeStopReason (cupti_pmsampling.h)
STOP_REASONS = {0: "OTHER", 1: "COUNTER_DATA_FULL", 2: "END_OF_RECORDS"}
COUNTER_DATA_FULL = "COUNTER_DATA_FULL"
END_OF_RECORDS = "END_OF_RECORDS"
OUT_OF_MEMORY = "ERROR_OUT_OF_MEMORY"


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def availability(cuda_driver_version: int | None = None) -> tuple[bool, str]:
    """(available, reason): cupti-python >= 13.3 importable and, when known, a CUDA 13 driver."""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("cupti-python")
    except PackageNotFoundError:
        return False, "cupti-python is not installed (pip install 'cupti-python>=13.3')"
    if _version_tuple(installed) < MIN_VERSION:
        return False, f"cupti-python {installed} is too old; PM sampling needs >= 13.3"
    if importlib.util.find_spec("cupti") is None:
        return False, "cupti-python is installed but `cupti` cannot be imported"
    if cuda_driver_version is not None and cuda_driver_version < 13000:
        return False, (f"the driver supports CUDA {cuda_version_text(cuda_driver_version)}; "
                       "cupti-python 13 needs a CUDA 13 driver (580+)")
    return True, f"cupti-python {installed}"


def _params(cc, name: str):
    """A fresh params struct of the low-level binding, its struct_size set (13.3 or 13.4 names)."""
    cls = getattr(cc, name.replace("_", ""), None) or getattr(cc, name)
    params = cls()
    params.struct_size = getattr(cc, _SIZES[name])
    return params


def _reason(exc: BaseException) -> str:
    """One line for an exception from cupti-python: its first line, with the CUPTI status name."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    status = getattr(exc, "status", None)
    if status is not None:
        try:
            import cupti.cupti as cc

            name = cc.Result(status).name
        except Exception:  # noqa: BLE001 - an unknown status keeps its number
            name = str(status)
        if name not in text:
            text = f"{name}: {text}" if text and text != type(exc).__name__ else name
    return text


def _nvperf_hint(nvperf) -> str:
    """What to add to an enable() failure when the nvperf libraries could not be preloaded."""
    return "" if nvperf.loaded else f" ({nvperf.reason()})"


def chip_name(cc, device_index: int) -> str:
    """The CUPTI chip name of a CUDA device ("GH100"), through cuptiDeviceGetChipName."""
    params = _params(cc, "Device_GetChipName_Params")
    params.device_index = device_index
    cc.device_get_chip_name(params.ptr)
    return params.p_chip_name


def _matches(metric: str, names) -> bool:
    """Whether a set lists `metric`, with or without its rollup suffix (.sum, .avg, .pct...)."""
    base = metric.split(".")[0]
    return metric in names or base in {n.split(".")[0] for n in names}


def single_pass_sets(chip: str) -> dict[str, list[str]]:
    """The chip's PM-sampling single-pass metric sets: {set name: [metric, ...]}."""
    from cupti import profiler_host

    return {name: list(profiler_host.get_metrics_in_single_pass_set(chip, name))
            for name in profiler_host.get_single_pass_sets(chip)}


def check_metrics(chip: str, metrics: list[str]) -> None:
    """Refuse, naming them, metrics `chip` lacks or that do not fit one PM-sampling pass together."""
    from cupti import profiler_host

    host = profiler_host.ProfilerHost(chip, profiler_host.ProfilerType.PM_SAMPLING)
    host.initialize()
    try:
        unknown = []
        for metric in metrics:
            try:
                host.get_metric_properties(metric)
            except ValueError:
                unknown.append(metric)
        if unknown:
            raise UnsupportedError(
                f"CUPTI PM sampling: {chip} has no metric {', '.join(unknown)}; "
                "`sitsprof devices --counters` lists the ones sitsprof reads")
        try:
            passes = profiler_host.get_num_of_passes(host.create_config_image(metrics))
        except Exception:  # noqa: BLE001 - not countable here: configure() still refuses a multi-pass list
            passes = None
    finally:
        host.deinitialize()
    if passes is None or passes <= 1:
        return
    try:
        sets = single_pass_sets(chip)
    except Exception:  # noqa: BLE001 - the error below still names the pass count
        sets = {}
    best = max(sets, key=lambda s: sum(_matches(m, sets[s]) for m in metrics), default=None)
    outside = [m for m in metrics if best is None or not _matches(m, sets[best])]
    where = f"; the single-pass set {best!r} holds the others" if best and len(outside) < len(metrics) else ""
    raise UnsupportedError(
        f"CUPTI PM sampling on {chip}: {', '.join(outside)} not available in one pass with the other metrics "
        f"({passes} passes needed, PM sampling has one){where}: drop them or pick metrics from one set")


@dataclass
class Decoded:
    """One decode: completed samples (GPU ns timestamps, values[sample, metric]) and what CUPTI said."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    values: np.ndarray
    stop_reason: str
    overflow: bool

    def __len__(self) -> int:
        return len(self.start_ns)


def image_samples(interval_ns: int, decode_every_s: float) -> int:
    """Counter-data image capacity: `_IMAGE_MARGIN` decode periods of samples."""
    return max(_MIN_IMAGE_SAMPLES, math.ceil(_IMAGE_MARGIN * decode_every_s * 1e9 / interval_ns))


class PmSamplingSession:
    """One enable/configure/start ... stop/disable cycle on one device, decoding into one image."""

    def __init__(self, device_index: int = 0, metrics: list[str] | None = None,
                 interval_ns: int = DEFAULT_INTERVAL_NS, hardware_buffer_size: int = DEFAULT_BUFFER_BYTES,
                 max_samples: int | None = None):
        from sitsprof.pmu.catalog import DEFAULT_CUPTI_METRICS

        self.device_index = device_index
        self.metrics = list(metrics or DEFAULT_CUPTI_METRICS)
        self.interval_ns = int(interval_ns)
        self.hardware_buffer_size = int(hardware_buffer_size)
        self.max_samples = int(max_samples or image_samples(self.interval_ns, DEFAULT_DECODE_EVERY_S))
        self.collector = None
        self.chip: str | None = None
        self._cc = None
        self._image = None
        self._host_object = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        ok, reason = availability()
        if not ok:
            raise UnsupportedError(f"CUPTI PM sampling unavailable: {reason}")
        try:
            from cuda.bindings import driver as cu

            cu.cuInit(0)
        except ImportError:
            pass
        import cupti.cupti as cc
        from cupti import pm_sampling

        self._cc = cc
        where = f"on CUDA device {self.device_index}"
        nvperf = ensure_nvperf()  # CUPTI dlopens nvperf by bare name at enable(): pmu/nvperf.py
        collector = pm_sampling.Collector(self.device_index)
        try:
            collector.enable()
        except PermissionError as exc:
            raise UnsupportedError(f"CUPTI PM sampling {where} needs profiling permission ({_reason(exc)}): "
                                   "run as root or allow profiling for all users "
                                   "(NVreg_RestrictProfilingToAdminUsers=0)") from None
        except ValueError as exc:
            raise NoGpuError(f"CUPTI PM sampling: no {where.removeprefix('on ')} ({_reason(exc)}); "
                             "pick one `sitsprof devices` lists") from None
        except (RuntimeError, MemoryError, cc.cuptiError) as exc:
            raise UnsupportedError(f"CUPTI PM sampling could not be enabled {where}: {_reason(exc)}"
                                   f"{_nvperf_hint(nvperf)}") from None
        self.collector = collector
        try:
            self.chip = self._chip_name()
            check_metrics(self.chip, self.metrics)
            collector.configure(metrics=self.metrics, sampling_interval=self.interval_ns,
                                hardware_buffer_size=self.hardware_buffer_size)
            self._prepare()
            collector.start()
        except BaseException as exc:
            try:
                self.close()  # a failed start leaves PM sampling disabled again
            except Exception:  # noqa: BLE001 - the start failure is the error to report
                pass
            if isinstance(exc, UnsupportedError):
                raise
            if isinstance(exc, ValueError):
                raise UnsupportedError(f"CUPTI PM sampling {where} rejected the configuration "
                                       f"(metrics {', '.join(self.metrics)}, interval {self.interval_ns} ns): "
                                       f"{_reason(exc)}") from None
            if isinstance(exc, (RuntimeError, MemoryError, cc.cuptiError)):
                raise UnsupportedError(f"CUPTI PM sampling could not start {where}: {_reason(exc)}") from None
            raise

    def _chip_name(self) -> str:
        return chip_name(self._cc, self.device_index)

    def _pm_object(self) -> int:
        handle = getattr(self.collector, "_pm_sampling_object", None)
        if not handle:
            raise UnsupportedError("CUPTI PM sampling: this cupti-python's Collector keeps no PM-sampling object "
                                   "where 13.3/13.4 do (_pm_sampling_object); install cupti-python 13.3 or 13.4")
        return handle

    def _prepare(self) -> None:
        """The one counter-data image, the profiler-host evaluator and the reused params."""
        from cupti.utils import metrics_to_c_array

        cc, obj = self._cc, self._pm_object()
        self._names_keepalive, names = metrics_to_c_array(self.metrics)
        size = _params(cc, "PmSampling_GetCounterDataSize_Params")
        size.p_pm_sampling_object, size.p_metric_names = obj, names
        size.num_metrics, size.max_samples = len(self.metrics), self.max_samples
        cc.pm_sampling_get_counter_data_size(size.ptr)
        self._image = image = np.zeros(size.counter_data_size, dtype=np.uint8)
        address, nbytes = image.ctypes.data, len(image)

        self._init = _params(cc, "PmSampling_CounterDataImage_Initialize_Params")
        self._init.p_pm_sampling_object, self._init.counter_data_size, self._init.p_counter_data = obj, nbytes, address
        self._decode = _params(cc, "PmSampling_DecodeData_Params")
        self._decode.p_pm_sampling_object = obj
        self._decode.p_counter_data_image, self._decode.counter_data_image_size = address, nbytes
        self._info = _params(cc, "PmSampling_GetCounterDataInfo_Params")
        self._info.p_counter_data_image, self._info.counter_data_image_size = address, nbytes
        self._sample = _params(cc, "PmSampling_CounterData_GetSampleInfo_Params")
        self._sample.p_pm_sampling_object = obj
        self._sample.p_counter_data_image, self._sample.counter_data_image_size = address, nbytes

        host = _params(cc, "Profiler_Host_Initialize_Params")
        host.profiler_type = int(cc.ProfilerType.PM_SAMPLING)
        host.p_chip_name = self.chip
        host.p_counter_availability_image = 0
        cc.profiler_host_initialize(host.ptr)
        self._host_object = host.p_host_object
        self._eval = _params(cc, "Profiler_Host_EvaluateToGpuValues_Params")
        self._eval.p_host_object = self._host_object
        self._eval.p_counter_data_image, self._eval.counter_data_image_size = address, nbytes
        self._eval.pp_metric_names, self._eval.num_metrics = names, len(self.metrics)

    # -- decoding -------------------------------------------------------------------------
    def decode(self) -> Decoded:
        """Decode the hardware buffer into the image (up to `max_samples`) and evaluate it in one pass.

        CUPTI's ERROR_OUT_OF_MEMORY (the hardware buffer overflowed and cannot be decoded on)
        comes back as an empty decode with stop reason OUT_OF_MEMORY: the caller `restart()`s.
        Other cuptiErrors are raised as they are.
        """
        cc = self._cc
        cc.pm_sampling_counter_data_image_initialize(self._init.ptr)  # reuse: reset, no new image
        decode = self._decode
        decode.decode_stop_reason = 0
        decode.overflow = 0
        try:
            cc.pm_sampling_decode_data(decode.ptr)
        except cc.cuptiError as exc:
            if getattr(exc, "status", None) != cc.Result.ERROR_OUT_OF_MEMORY:
                raise
            empty = np.empty(0, dtype=np.int64)
            return Decoded(empty, empty, np.empty((0, len(self.metrics))), OUT_OF_MEMORY, True)
        stop_reason, overflow = int(decode.decode_stop_reason), bool(decode.overflow)
        cc.pm_sampling_get_counter_data_info(self._info.ptr)
        n = int(self._info.num_completed_samples)
        m = len(self.metrics)
        starts = np.empty(n, dtype=np.int64)
        ends = np.empty(n, dtype=np.int64)
        values = np.empty((n, m), dtype=np.float64)
        sample, evaluate = self._sample, self._eval
        get_info, get_values = cc.pm_sampling_counter_data_get_sample_info, cc.profiler_host_evaluate_to_gpu_values
        sample_ptr, eval_ptr = sample.ptr, evaluate.ptr
        base, row = values.ctypes.data, 8 * m
        for i in range(n):
            sample.sample_index = i
            get_info(sample_ptr)
            starts[i] = sample.start_timestamp
            ends[i] = sample.end_timestamp
            evaluate.range_index = i
            evaluate.p_metric_values = base + i * row
            get_values(eval_ptr)
        return Decoded(starts, ends, values, STOP_REASONS.get(stop_reason, str(stop_reason)), overflow)

    def restart(self) -> None:
        """Stop and start again after CUPTI reported an overflow it cannot continue from."""
        try:
            self.collector.stop()
        except RuntimeError:
            pass  # already stopped
        self.collector.start()

    def stop(self) -> None:
        if self.collector is not None:
            self.collector.stop()

    def close(self) -> None:
        """Free the evaluator and disable PM sampling (safe to call twice)."""
        if self._host_object is not None:
            params = _params(self._cc, "Profiler_Host_Deinitialize_Params")
            params.p_host_object = self._host_object
            self._host_object = None
            try:
                self._cc.profiler_host_deinitialize(params.ptr)
            except Exception:  # noqa: BLE001 - disabling matters more than this error
                pass
        if self.collector is not None:
            collector, self.collector = self.collector, None
            collector.disable()
        self._image = None


def pm_sampling_sets(device_index: int = 0) -> dict:
    """{"chip": name, "sets": {set: [metrics]}}: what PM sampling can read in one pass on this device."""
    ok, reason = availability()
    if not ok:
        raise UnsupportedError(f"CUPTI PM sampling unavailable: {reason}")
    import cupti.cupti as cc
    from cupti import pm_sampling

    nvperf = ensure_nvperf()
    collector = pm_sampling.Collector(device_index)
    try:
        collector.enable()
    except (ValueError, RuntimeError, PermissionError, MemoryError, cc.cuptiError) as exc:
        raise UnsupportedError(f"CUPTI PM sampling could not be enabled on CUDA device {device_index}: "
                               f"{_reason(exc)}{_nvperf_hint(nvperf)}") from None
    try:
        chip = chip_name(cc, device_index)
        return {"chip": chip, "sets": single_pass_sets(chip)}
    finally:
        collector.disable()
