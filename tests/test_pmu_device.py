"""Device facts through the real pynvml wrappers over the fake NVML; missing driver/library."""
from __future__ import annotations

import fake_nvml
import pytest

from sitsprof.pmu.device import device_facts, event_reason_names
from sitsprof.pmu.errors import NoGpuError, PmuError


def test_device_facts(fake_gpu):
    facts = device_facts(0, cuda=False)
    assert facts["name"] == "NVIDIA H200"
    assert facts["uuid"].startswith("GPU-")
    assert facts["pci_bus_id"] == "00000000:18:00.0"
    assert facts["compute_capability"] == "9.0"
    assert facts["sm_count"] == 132 and facts["sources"]["sm_count"].startswith("nvml")
    assert facts["l2_bytes"] == 60 * 2**20  # pmu.device.KNOWN_DEVICES (issue 20.4: one H200 figure)
    assert facts["memory_bytes"] == 150_754_820_096
    assert facts["bus_width_bits"] == 6144
    assert facts["driver"] == "580.82.07" and facts["cuda"] == "13.0"
    assert facts["clocks"]["sm_max_mhz"] == 1980 and facts["clocks"]["sm_base_mhz"] == 1755
    assert facts["clocks"]["supported_memory_mhz"] == [3201]
    assert facts["clocks"]["supported_sm_mhz"][0] == 1980
    assert facts["clock_event_reasons"] == ["gpu_idle"]


def test_event_reason_names():
    assert event_reason_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert event_reason_names(0x10000) == ["other_0x10000"]


def test_no_such_gpu(fake_gpu):
    with pytest.raises(PmuError, match="there is no GPU 3: this node has 1"):
        device_facts(3)


@pytest.mark.parametrize("driver, message", [
    ("not_loaded", "kernel driver is not loaded"),
    ("no_library", "libnvidia-ml.so.1 was not found"),
])
def test_driver_absent_is_one_clear_error(tmp_path, driver, message):
    fake_nvml.install(fake_nvml.default_state(driver=driver))
    try:
        with pytest.raises(NoGpuError, match=message) as info:
            device_facts(0)
        assert info.value.exit_code == 2
    finally:
        fake_nvml.uninstall()


def test_no_gpus(tmp_path):
    fake_nvml.install(fake_nvml.default_state(devices=[]))
    try:
        with pytest.raises(NoGpuError, match="sees no GPU"):
            device_facts(0)
    finally:
        fake_nvml.uninstall()
