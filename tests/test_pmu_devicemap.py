"""Issue 10 item 11: CUDA and NVML number GPUs differently (CUDA's default FASTEST_FIRST order,
CUDA_VISIBLE_DEVICES), so the device a user names is CUDA's and every NVML consumer finds it
through its PCI bus id (`pmu.device.choose_device`). Checked with a fake NVML holding two GPUs
and a CuPy stand-in whose order differs from NVML's."""
from __future__ import annotations

import os
import sys
import time
import types

import fake_nvml
import pytest


def _cupy_seeing(bus_ids: list[str]):
    """A CuPy stand-in: `cupy.cuda.runtime.getDeviceCount()` and `cupy.cuda.Device(i).pci_bus_id`,
    CuPy's names (the latter is cudaDeviceGetPCIBusId's "domain:bus:device.function", domain in
    4 hex digits where NVML writes 8)."""
    class Device:
        def __init__(self, index):
            self.id = index

        @property
        def pci_bus_id(self):
            return bus_ids[self.id]

    cp = types.ModuleType("cupy")
    cp.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: len(bus_ids)), Device=Device)
    return cp


@pytest.fixture
def two_gpus(tmp_path, monkeypatch):
    """Two fake H200s; NVML device 1 draws 300 W so a reading says which device it came from."""
    state = fake_nvml.default_state()
    state["devices"] = [fake_nvml._h200(0), fake_nvml._h200(1)]
    state["devices"][1]["power_mw"] = 300_000
    path = fake_nvml.write_state(tmp_path / "fake-nvml.json", state)
    monkeypatch.setenv(fake_nvml.ENV, str(path))
    monkeypatch.setenv("SITSPROF_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setitem(sys.modules, "cuda", None)  # no cuda-python: CuPy (or nothing) maps
    fake = fake_nvml.install(path)
    yield fake
    fake_nvml.uninstall()


def test_cuda_index_is_found_in_nvml_by_pci_bus_id(two_gpus, monkeypatch):
    from sitsprof.pmu.device import choose_device, cuda_to_nvml

    # CUDA puts NVML's second GPU first (FASTEST_FIRST or CUDA_VISIBLE_DEVICES=1,0)
    monkeypatch.setitem(sys.modules, "cupy", _cupy_seeing(["0000:19:00.0", "0000:18:00.0"]))
    choice = choose_device(0)
    assert (choice.cuda_index, choice.nvml_index) == (0, 1) and choice.how == "cupy pci bus id"
    assert choice.uuid == two_gpus.state["devices"][1]["uuid"] and choice.pci_bus_id == "00000000:19:00.0"
    assert cuda_to_nvml(1) == 0


def test_samplers_read_the_cuda_device_not_nvmls_same_index(two_gpus, monkeypatch):
    from sitsprof.collectors.gpm_sampler import GpmSampler
    from sitsprof.collectors.nvml_sampler import NvmlSampler

    monkeypatch.setitem(sys.modules, "cupy", _cupy_seeing(["0000:19:00.0", "0000:18:00.0"]))
    with NvmlSampler(0, interval_s=0.01) as sampler:
        time.sleep(0.05)
    assert set(sampler.drain()["power_w"]) == {300.0}  # NVML device 1, which is CUDA's 0
    assert sampler.describe()["nvml_index"] == 1 and sampler.describe()["cuda_index"] == 0
    two_gpus.state["devices"][1]["dram_bw_util"] = 42.0
    with GpmSampler(0, interval_s=0.1) as gpm:
        time.sleep(0.15)
    assert set(gpm.drain()["gpm_dram_bw_util_pct"]) == {42.0}


def test_a_run_locks_and_describes_the_cuda_device(two_gpus, monkeypatch, tmp_path):
    from sitsprof.collectors.recording import recording
    from sitsprof.collectors.rundir import open_run

    monkeypatch.setitem(sys.modules, "cupy", _cupy_seeing(["0000:19:00.0", "0000:18:00.0"]))
    with recording(tmp_path, "r", "record", {}, device_index=0, clocks="lock", sm="max", gpm=False):
        live = fake_nvml.read_state(os.environ[fake_nvml.ENV])["devices"]
        locked = [dev["locked_gpu"] for dev in live]
    assert locked == [None, [1980, 1980]]  # the lock went to CUDA's device 0 = NVML's 1, not NVML's 0
    meta = open_run(tmp_path / "r").meta
    assert meta["device"]["uuid"] == two_gpus.state["devices"][1]["uuid"]
    assert meta["device"]["device_choice"]["cuda_index"] == 0 and meta["device"]["device_choice"]["nvml_index"] == 1
    assert meta["samplers"]["nvml"]["nvml_index"] == 1


def test_without_a_cuda_library_the_index_is_nvmls_and_that_is_said(two_gpus, monkeypatch):
    from sitsprof.pmu.device import choose_device

    monkeypatch.setitem(sys.modules, "cupy", None)
    choice = choose_device(1)
    assert choice.cuda_index is None and choice.nvml_index == 1 and not choice.mapped
    assert "no CUDA library" in choice.how and "NVML's index 1" in choice.how and "CUDA_VISIBLE_DEVICES" in choice.how


def test_an_index_cuda_does_not_have_is_one_clear_error(two_gpus, monkeypatch):
    from sitsprof.pmu.device import choose_device
    from sitsprof.pmu.errors import PmuError

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setitem(sys.modules, "cupy", _cupy_seeing(["0000:19:00.0"]))
    assert choose_device(0).nvml_index == 1
    with pytest.raises(PmuError) as info:
        choose_device(1)
    assert str(info.value) == ("there is no CUDA device 1: CUDA sees 1 with CUDA_VISIBLE_DEVICES=1 (indices 0..0); "
                               "pick one of those")
    assert info.value.exit_code == 2


def test_device_facts_name_the_cuda_index_of_each_nvml_gpu(two_gpus, monkeypatch):
    """Issue 10 item 11: `sitsprof devices` lists GPUs in NVML's order; each says which CUDA index
    (the one `--device` takes) it has, None where no CUDA library can say."""
    from sitsprof.pmu.device import device_facts

    monkeypatch.setitem(sys.modules, "cupy", _cupy_seeing(["0000:19:00.0", "0000:18:00.0"]))
    assert [device_facts(i)["cuda_index"] for i in (0, 1)] == [1, 0]
    assert device_facts(0, cuda=False)["cuda_index"] is None
    monkeypatch.setitem(sys.modules, "cupy", _cupy_seeing(["0000:19:00.0"]))  # CUDA_VISIBLE_DEVICES=1
    assert [device_facts(i)["cuda_index"] for i in (0, 1)] == [None, 0]
