"""The CUPTI PM sampler's bookkeeping against a stub of cupti-python's documented interface
(`cupti.pm_sampling.Collector`: enable/configure/start/stop/decode/disable; decode returns
CounterData of Sample(start_timestamp, end_timestamp, metric_values) and raises MemoryError on
hardware-buffer overflow). The real thing runs only in the GPU test."""
from __future__ import annotations

import sys
import time
import types
from dataclasses import dataclass

import pytest

from sitsprof.collectors import cupti_sampler
from sitsprof.pmu import cupti_pm
from sitsprof.pmu.errors import UnsupportedError


@dataclass(frozen=True)
class Sample:
    start_timestamp: int
    end_timestamp: int
    metric_values: list


class CounterData(list):
    def __init__(self, metrics, samples):
        super().__init__(samples)
        self.metrics = metrics
        self.num_completed_samples = len(samples)


class StubCollector:
    script: list = []  # per decode call: number of samples, a gap in ns before them, or "overflow"

    def __init__(self, device_index=0):
        self.calls, self.t, self.metrics = [], 1_000_000, []

    def enable(self):
        self.calls.append("enable")

    def configure(self, *, metrics, sampling_interval, hardware_buffer_size, **_):
        self.calls.append("configure")
        self.metrics, self.interval = list(metrics), sampling_interval

    def start(self):
        self.calls.append("start")

    def stop(self):
        self.calls.append("stop")

    def disable(self):
        self.calls.append("disable")

    def decode(self, max_samples=10000):
        step = StubCollector.script.pop(0) if StubCollector.script else 0
        if step == "overflow":
            raise MemoryError("Record overflow in the hardware buffer")
        count, gap = step if isinstance(step, tuple) else (step, 0)
        self.t += gap
        samples = []
        for i in range(count):
            samples.append(Sample(self.t, self.t + self.interval, [float(i)] * len(self.metrics)))
            self.t += self.interval
        return CounterData(self.metrics, samples)


@pytest.fixture
def stub_cupti(monkeypatch):
    module = types.ModuleType("cupti")
    module.pm_sampling = types.SimpleNamespace(Collector=StubCollector)
    monkeypatch.setitem(sys.modules, "cupti", module)
    monkeypatch.setattr(cupti_pm, "availability", lambda *a: (True, "stub"))
    yield StubCollector


def test_samples_gaps_and_overflow_are_reported(stub_cupti):
    stub_cupti.script = [100, "overflow", (50, 30_000)]  # 100 samples, an overflow, a 3-sample gap, 50 more
    sampler = cupti_sampler.CuptiPmSampler(0, interval_ns=10_000, decode_every_s=0.01).start()
    time.sleep(0.15)
    sampler.stop()
    rows = sampler.drain()
    stats = sampler.stats()
    assert stats["samples"] == len(rows["gpu_start_ns"]) == 150
    assert stats["overflow"] is True and stats["overflow_events"] == 1
    assert stats["dropped"] == 3
    assert set(rows) == {"gpu_start_ns", "gpu_end_ns", *cupti_pm.PmSamplingSession().metrics}
    assert stats["achieved_hz"] == pytest.approx(150 / ((153 * 10_000) / 1e9), rel=0.05)
    assert sampler.session.collector is None  # disabled at the end


def test_unavailable_cupti_says_why(monkeypatch):
    monkeypatch.setattr(cupti_pm, "availability", lambda *a: (False, "cupti-python is not installed"))
    with pytest.raises(UnsupportedError, match="cupti-python is not installed"):
        cupti_sampler.CuptiPmSampler(0).start()


def test_availability_checks_version_and_driver(monkeypatch):
    import importlib.metadata as md

    monkeypatch.setattr(md, "version", lambda name: "13.2.0")
    assert "too old" in cupti_pm.availability()[1]
    monkeypatch.setattr(md, "version", lambda name: "13.4.0")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object())
    ok, reason = cupti_pm.availability(12080)
    assert not ok and "CUDA 12.8" in reason
    assert cupti_pm.availability(13000)[0]
