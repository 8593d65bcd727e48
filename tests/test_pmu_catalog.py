"""The counter catalog and `sitsprof devices` over the fake NVML."""
from __future__ import annotations

import json

import fake_nvml
import pytest

from sitsprof.cli.main import main
from sitsprof.pmu import catalog
from sitsprof.pmu.errors import UnsupportedError


def test_catalog_entries_are_complete():
    for counter in catalog.COUNTERS:
        assert counter.unit is not None and counter.meaning
        if counter.backend == "none":
            assert counter.unavailable
        else:
            assert counter.source and counter.min_interval_s and not counter.unavailable
    assert catalog.GPM_METRIC_IDS["gpm_dram_bw_util_pct"] == 10
    assert "lts__t_sectors_lookup_hit.sum" in catalog.DEFAULT_CUPTI_METRICS
    assert all(c.min_interval_s >= 0.1 for c in catalog.counters("gpm"))


def test_what_no_api_exposes_says_so():
    with pytest.raises(UnsupportedError, match="measured by the TLB probe"):
        catalog.lookup("tlb_misses")
    with pytest.raises(UnsupportedError, match="does not exist"):
        catalog.lookup("pmc_sample")
    assert catalog.lookup("power_w").backend == "nvml"


def _cupti_python(monkeypatch, installed):
    """Pretend cupti-python `installed` (a version string) is there, or (None) that it is not."""
    import importlib.metadata
    import importlib.util

    real_version, real_find_spec = importlib.metadata.version, importlib.util.find_spec

    def version(name):
        if name != "cupti-python":
            return real_version(name)
        if installed is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "cupti" else real_find_spec(name, *a))


def test_devices_json_reports_capabilities(fake_gpu, capsys, monkeypatch):
    _cupti_python(monkeypatch, None)
    assert main(["devices", "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    caps = entry["capabilities"]
    assert entry["name"] == "NVIDIA H200" and entry["l2_bytes"] == 60 * 2**20  # KNOWN_DEVICES (cudaDeviceProp)
    assert caps["gpm"]["supported"] is True
    absent = "cupti-python is not installed (pip install 'cupti-python>=13.3')"
    assert caps["cupti_pm_sampling"] == {"available": False, "reason": absent}
    cupti_counters = [c for c in caps["counters"] if c["backend"] == "cupti_pm"]
    assert cupti_counters and all(not c["readable"] and c["reason"] == absent for c in cupti_counters)
    readable = {c["name"]: c["readable"] for c in caps["counters"]}
    assert readable["sm_clock_mhz"] and readable["power_instant_w"] and readable["gpm_dram_bw_util_pct"]
    assert readable["tlb_misses"] is False



@pytest.mark.parametrize("installed,driver,expected", [
    ("13.3.0", 13000, (True, "cupti-python 13.3.0")),
    ("13.2.1", 13000, (False, "cupti-python 13.2.1 is too old; PM sampling needs >= 13.3")),
    ("13.3.0", 12040, (False, "the driver supports CUDA 12.4; cupti-python 13 needs a CUDA 13 driver (580+)")),
])
def test_cupti_availability_follows_package_and_driver(fake_gpu, capsys, monkeypatch, installed, driver, expected):
    _cupti_python(monkeypatch, installed)
    fake_gpu.state["cuda_driver_version"] = driver
    assert main(["devices", "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    available, reason = expected
    assert entry["capabilities"]["cupti_pm_sampling"] == {"available": available, "reason": reason}


def test_devices_without_gpm(tmp_path, capsys):
    fake_nvml.install(fake_nvml.default_state(gpm="unsupported"))
    try:
        assert main(["devices", "--counters"]) == 0
        out = capsys.readouterr().out
        assert "GPM" in out and "needs Hopper" in out and "tlb_misses" in out
    finally:
        fake_nvml.uninstall()


def test_clocks_cli(fake_gpu, capsys):
    assert main(["clocks", "lock", "--sm", "tdp"]) == 0
    assert fake_gpu.state["devices"][0]["locked_gpu"] == [1830, 1830]
    assert main(["clocks", "show"]) == 0
    assert "locked by `sitsprof clocks lock`" in capsys.readouterr().out
    assert main(["clocks", "reset"]) == 0
    assert fake_gpu.state["devices"][0]["locked_gpu"] is None
    assert main(["clocks", "lock", "--memory", "1234"]) == 2
    assert "supported: 3201" in capsys.readouterr().err
