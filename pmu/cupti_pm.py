"""CUPTI PM sampling through cupti-python (>= 13.3): availability and one sampling session.

Uses only `cupti.pm_sampling.Collector(device_index)` with `enable()`, `configure(metrics=...,
sampling_interval=<ns>, hardware_buffer_size=...)`, `start()`, `stop()`, `decode(max_samples)`
and `disable()`; decoded `CounterData` yields `Sample(start_timestamp, end_timestamp,
metric_values)`. `decode` raises MemoryError when the hardware buffer overflowed: that is
reported as an overflow, never hidden. PM sampling counts for the whole GPU, whichever process
runs on it; without root it needs profiling permission (NVreg_RestrictProfilingToAdminUsers=0).
`device_index` is the CUDA device index.
"""
from __future__ import annotations

from sitsprof.pmu.errors import NoGpuError, UnsupportedError
from sitsprof.pmu.nvml import cuda_version_text

MIN_VERSION = (13, 3)
DEFAULT_INTERVAL_NS = 10_000
DEFAULT_BUFFER_BYTES = 512 * 1024 * 1024


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


class PmSamplingSession:
    """One enable/configure/start ... stop/disable cycle on one device."""

    def __init__(self, device_index: int = 0, metrics: list[str] | None = None,
                 interval_ns: int = DEFAULT_INTERVAL_NS, hardware_buffer_size: int = DEFAULT_BUFFER_BYTES):
        from sitsprof.pmu.catalog import DEFAULT_CUPTI_METRICS

        self.device_index = device_index
        self.metrics = list(metrics or DEFAULT_CUPTI_METRICS)
        self.interval_ns = int(interval_ns)
        self.hardware_buffer_size = int(hardware_buffer_size)
        self.collector = None
        self.overflow_events = 0

    def start(self) -> None:
        ok, reason = availability()
        if not ok:
            raise UnsupportedError(f"CUPTI PM sampling unavailable: {reason}")
        try:
            from cuda.bindings import driver as cu

            cu.cuInit(0)
        except ImportError:
            pass
        from cupti import pm_sampling

        collector = pm_sampling.Collector(self.device_index)
        try:
            collector.enable()
        except PermissionError as exc:
            raise UnsupportedError(f"CUPTI PM sampling needs profiling permission: {exc} "
                                   "(run as root or allow profiling for all users)") from None
        except (ValueError, RuntimeError) as exc:
            raise NoGpuError(f"CUPTI PM sampling could not start on device {self.device_index}: {exc}") from None
        try:
            collector.configure(metrics=self.metrics, sampling_interval=self.interval_ns,
                                hardware_buffer_size=self.hardware_buffer_size)
            collector.start()
        except ValueError as exc:
            collector.disable()
            raise UnsupportedError(f"CUPTI PM sampling rejected the configuration: {exc}") from None
        self.collector = collector

    def decode(self, max_samples: int):
        """Decoded CounterData, or None when the hardware buffer overflowed (counted)."""
        try:
            return self.collector.decode(max_samples=max_samples)
        except MemoryError:
            self.overflow_events += 1
            return None

    def stop(self) -> None:
        if self.collector is not None:
            self.collector.stop()

    def close(self) -> None:
        if self.collector is not None:
            self.collector.disable()
            self.collector = None
