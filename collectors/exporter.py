"""Prometheus exporter: NVML (and GPM) gauges named and labelled as dcgm-exporter does.

Metric names follow dcgm-exporter's default counters (`DCGM_FI_DEV_SM_CLOCK`, ...), with its
labels `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName` and `Hostname`, so existing
dashboards work; the values come from NVML, read at scrape time. GPM metrics
(`DCGM_FI_PROF_*`, ratios 0..1) come from a background reader per GPU, since GPM needs two
samples at least 100 ms apart; they are absent where GPM is not supported. The HTTP side is
`sitsprof.common.httpserve`'s bounded server (threads and idle connections bounded).
"""
from __future__ import annotations

import socket
import threading

__all__ = ["LABELS", "NvmlCollector", "serve", "serve_until_interrupted"]

# name, help
_GAUGES = (
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "Current clock event (throttle) reasons, nvmlClocksEventReason bitmask."),
)
_GPM_GAUGES = (
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gpm_dram_bw_util_pct",
     "Ratio of cycles the device memory interface is active (GPM DRAM_BW_UTIL / 100)."),
    ("DCGM_FI_PROF_SM_ACTIVE", "gpm_sm_util_pct",
     "Ratio of cycles an SM has at least one warp assigned (GPM SM_UTIL / 100)."),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "gpm_sm_occupancy_pct",
     "Ratio of resident warps to the maximum (GPM SM_OCCUPANCY / 100)."),
)
LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]


class _GpmPoller:
    """Keeps the latest GPM metrics of one GPU, read every `interval_s` (>= 0.1 s)."""

    def __init__(self, index: int, interval_s: float = 1.0):
        from sitsprof.pmu.gpm import GpmReader

        self.reader = GpmReader(index).open()
        self.interval_s = max(0.1, interval_s)
        self.latest: dict = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"sitsprof-gpm-export-{index}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.latest = self.reader.read()
            except Exception:  # noqa: BLE001 - a failed read keeps the previous values
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.reader.close()


def _gauge_readers(p, h) -> list:
    """Per GPU, one function per NVML call, each returning {gauge name: value or None}."""
    from sitsprof.pmu.device import event_reasons

    def utilization():
        util = p.nvmlDeviceGetUtilizationRates(h)
        return {"DCGM_FI_DEV_GPU_UTIL": util.gpu, "DCGM_FI_DEV_MEM_COPY_UTIL": util.memory}

    def memory():
        info = p.nvmlDeviceGetMemoryInfo(h)
        return {"DCGM_FI_DEV_FB_USED": info.used / 2**20, "DCGM_FI_DEV_FB_FREE": info.free / 2**20}

    return [
        lambda: {"DCGM_FI_DEV_SM_CLOCK": p.nvmlDeviceGetClockInfo(h, p.NVML_CLOCK_SM)},
        lambda: {"DCGM_FI_DEV_MEM_CLOCK": p.nvmlDeviceGetClockInfo(h, p.NVML_CLOCK_MEM)},
        lambda: {"DCGM_FI_DEV_GPU_TEMP": p.nvmlDeviceGetTemperature(h, p.NVML_TEMPERATURE_GPU)},
        lambda: {"DCGM_FI_DEV_POWER_USAGE": p.nvmlDeviceGetPowerUsage(h) / 1000.0},
        lambda: {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": event_reasons(h)},
        utilization,
        memory,
    ]


class NvmlCollector:
    """A prometheus_client custom collector reading NVML at scrape time."""

    def __init__(self, devices: list[int] | None = None, gpm: bool = True, gpm_interval_s: float = 1.0):
        from sitsprof.pmu.errors import PmuError
        from sitsprof.pmu.nvml import handle, nvml, text

        self.pynvml = p = nvml()
        self.indices = list(range(p.nvmlDeviceGetCount())) if devices is None else list(devices)
        self.hostname = socket.gethostname()
        self.devices = []
        self.pollers: dict[int, _GpmPoller] = {}
        for index in self.indices:
            h = handle(index)
            labels = [str(index), text(p.nvmlDeviceGetUUID(h)), text(p.nvmlDeviceGetPciInfo(h).busId),
                      f"nvidia{index}", text(p.nvmlDeviceGetName(h)), self.hostname]
            self.devices.append((index, _gauge_readers(p, h), labels))
            if gpm:
                try:
                    self.pollers[index] = _GpmPoller(index, gpm_interval_s)
                except PmuError:
                    pass

    def _read(self, readers) -> dict:
        """Every gauge whose NVML call succeeds; a failed or unreported one is left out of the scrape."""
        values = {}
        for reader in readers:
            try:
                row = reader()
            except self.pynvml.NVMLError:
                continue
            values.update((name, float(value)) for name, value in row.items() if value is not None)
        return values

    def describe(self):
        """Every family this collector can yield, with no samples: what prometheus-client's
        registry indexes names by, so `/metrics?name[]=DCGM_FI_DEV_SM_CLOCK` selects this
        collector (without it the filtered scrape was an empty body)."""
        from prometheus_client.core import GaugeMetricFamily

        names = [(name, doc) for name, doc in _GAUGES] + [(name, doc) for name, _, doc in _GPM_GAUGES]
        return [GaugeMetricFamily(name, doc, labels=LABELS) for name, doc in names]

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        families = {name: GaugeMetricFamily(name, doc, labels=LABELS) for name, doc in _GAUGES}
        gpm_families = {name: GaugeMetricFamily(name, doc, labels=LABELS) for name, _, doc in _GPM_GAUGES}
        for index, readers, labels in self.devices:
            for name, value in self._read(readers).items():
                families[name].add_metric(labels, value)
            poller = self.pollers.get(index)
            if poller is not None:
                for name, key, _ in _GPM_GAUGES:
                    value = poller.latest.get(key)
                    if value is not None:
                        gpm_families[name].add_metric(labels, value / 100.0)
        yield from families.values()
        yield from (family for family in gpm_families.values() if family.samples)

    def close(self) -> None:
        for poller in self.pollers.values():
            poller.close()


def serve(port: int = 9400, bind: str = "127.0.0.1", devices=None, gpm: bool = True, gpm_interval_s: float = 1.0):
    """Start the exporter on a daemon thread; returns (server, collector). `server.server_port` is the port."""
    from prometheus_client import CollectorRegistry

    from sitsprof.collectors.errors import CollectorError
    from sitsprof.common.httpserve import start_metrics_server

    collector = NvmlCollector(devices, gpm=gpm, gpm_interval_s=gpm_interval_s)
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        server, _thread = start_metrics_server(registry, port, bind)
    except OSError as exc:
        collector.close()
        raise CollectorError(f"cannot listen on {bind}:{port}: {exc.strerror or exc}") from None
    return server, collector


def serve_until_interrupted(port: int = 9400, bind: str = "127.0.0.1", gpm: bool = True, on_ready=None) -> None:
    """`sitsprof export`: serve until interrupted (Ctrl-C), then stop the server and the GPM readers.

    `on_ready(port)` is called once the server listens (the port it got, for port 0)."""
    server, collector = serve(port, bind, gpm=gpm)
    if on_ready is not None:
        on_ready(server.server_port)
    try:
        threading.Event().wait()
    finally:
        server.shutdown()
        server.server_close()
        collector.close()
