"""The Prometheus exporter, scraped over loopback by a real HTTP client and parsed by prometheus_client."""
from __future__ import annotations

import socket
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from sitsprof.collectors.exporter import serve


def _scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        return {f.name: f for f in text_string_to_metric_families(response.read().decode())}


def test_scrape_dcgm_style_gauges(fake_gpu):
    server, collector = serve(port=0, bind="127.0.0.1", gpm_interval_s=0.1)
    try:
        time.sleep(0.35)  # a few GPM intervals
        families = _scrape(server.server_port)
        sample = families["DCGM_FI_DEV_SM_CLOCK"].samples[0]
        assert sample.value == 345.0
        assert sample.labels == {"gpu": "0", "UUID": "GPU-00000000-fake-4200-0000-000000000000",
                                 "pci_bus_id": "00000000:18:00.0", "device": "nvidia0",
                                 "modelName": "NVIDIA H200", "Hostname": socket.gethostname()}
        assert families["DCGM_FI_DEV_POWER_USAGE"].samples[0].value == 120.0
        assert families["DCGM_FI_DEV_FB_USED"].samples[0].value == 1024.0
        assert families["DCGM_FI_DEV_GPU_TEMP"].type == "gauge"
        assert families["DCGM_FI_PROF_DRAM_ACTIVE"].samples[0].value == 0.015
        # values are read at scrape time
        fake_gpu.state["devices"][0]["power_mw"] = 650_000
        assert _scrape(server.server_port)["DCGM_FI_DEV_POWER_USAGE"].samples[0].value == 650.0
    finally:
        server.shutdown()
        collector.close()


def test_port_in_use_is_one_clear_error(fake_gpu):
    import pytest

    from sitsprof.collectors.errors import CollectorError

    server, collector = serve(port=0, gpm=False)
    try:
        with pytest.raises(CollectorError, match="cannot listen"):
            serve(port=server.server_port, gpm=False)
    finally:
        server.shutdown()
        collector.close()
