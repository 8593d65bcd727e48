"""The metrics servers' HTTP side (issue 12 item 8): bounded threads, idle connections closed,
a deeper listen backlog, a warning when binding beyond loopback, IPv6 URLs in brackets.

Loopback only, bounded in count (200 connections) and time (a 1 s idle timeout).
"""
from __future__ import annotations

import socket
import threading
import time
import urllib.request

import pytest

from sitsprof.common import httpserve


def _server(idle_timeout_s: float):
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    Gauge("sitsprof_test_gauge", "a test gauge", registry=registry).set(42)
    srv, _thread = httpserve.start_metrics_server(registry, 0, "127.0.0.1", max_connections=8,
                                                  idle_timeout_s=idle_timeout_s)
    return srv


@pytest.fixture
def server():
    srv = _server(1.0)
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def patient_server():
    """Idle connections kept 30 s: counting 200 of them must not race the idle timeout on a slow machine."""
    srv = _server(30.0)
    yield srv
    srv.shutdown()
    srv.server_close()


def _scrape(port: int, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
        assert response.status == 200
        return response.read().decode()


def _wait(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def _half_open(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        socks.append(s)
    return socks


def test_half_open_connections_hold_no_threads_and_a_scrape_succeeds(patient_server):
    """12.8: 200 connections that send nothing start no thread each (prometheus-client's
    server started 200), and a normal scrape is answered while they are all open."""
    server = patient_server
    before = threading.active_count()
    socks = _half_open(server.server_port, 200)
    try:
        assert _wait(lambda: server.pending_connections() == 200, 5), server.pending_connections()
        assert threading.active_count() <= before + 2, threading.active_count() - before
        started = time.monotonic()
        assert "sitsprof_test_gauge 42.0" in _scrape(server.server_port)
        assert time.monotonic() - started < 1.0  # not queued behind the idle ones
        assert threading.active_count() <= before + 8 + 2  # at most max_connections workers
    finally:
        for s in socks:
            s.close()


def test_idle_connections_are_closed_after_the_timeout(server):
    """12.8: a connection that never sends a request is closed after idle_timeout_s (1 s here)."""
    socks = _half_open(server.server_port, 20)
    try:
        for s in socks:
            s.settimeout(5)
        started = time.monotonic()
        assert all(s.recv(1) == b"" for s in socks)  # end of stream: the server closed it
        assert 0.8 <= time.monotonic() - started < 4
        assert _wait(lambda: server.pending_connections() == 0, 2)
    finally:
        for s in socks:
            s.close()


def test_half_a_request_cannot_hold_a_worker(server):
    """12.8: a client that sends part of a request and stops is cut off after the timeout,
    and the eight workers (max_connections) still answer a scrape afterwards."""
    socks = _half_open(server.server_port, 8)
    try:
        for s in socks:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")  # no blank line: the request never ends
            s.settimeout(5)
        started = time.monotonic()
        for s in socks:
            s.recv(65536)  # whatever the server says (nothing, or a 400) before it closes
        assert time.monotonic() - started < 4
        assert "sitsprof_test_gauge" in _scrape(server.server_port)
    finally:
        for s in socks:
            s.close()


def test_listen_backlog_is_128(server):
    """12.8: the listen backlog is 128, not socketserver's 5."""
    assert server.request_queue_size == 128


def test_too_many_pending_drops_the_oldest():
    """12.8: beyond max_pending waiting connections, the oldest are closed (file descriptors
    stay bounded too)."""
    from prometheus_client import CollectorRegistry

    srv, _ = httpserve.start_metrics_server(CollectorRegistry(), 0, "127.0.0.1", max_pending=10, idle_timeout_s=30)
    try:
        socks = _half_open(srv.server_port, 30)
        try:
            assert _wait(lambda: srv.pending_connections() <= 10, 5), srv.pending_connections()
            socks[0].settimeout(5)
            assert socks[0].recv(1) == b""  # the first one was dropped
        finally:
            for s in socks:
                s.close()
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("addr, exposed", [
    ("127.0.0.1", False), ("127.0.0.2", False), ("localhost", False), ("::1", False), ("[::1]", False),
    ("0.0.0.0", True), ("::", True), ("192.0.2.10", True),
])
def test_exposure_warning(addr, exposed):
    """12.8: binding beyond loopback gets one warning line; loopback gets none."""
    warning = httpserve.exposure_warning(addr)
    assert (warning is not None) == exposed
    if exposed:
        assert warning.startswith("sitsprof: warning: --bind ") and "\n" not in warning


@pytest.mark.parametrize("host, port, expected", [
    ("127.0.0.1", 9400, "http://127.0.0.1:9400/metrics"),
    ("::1", 9464, "http://[::1]:9464/metrics"),
    ("::", 80, "http://[::]:80/metrics"),
    ("fe80::1", 1, "http://[fe80::1]:1/metrics"),
    ("[::1]", 2, "http://[::1]:2/metrics"),
    ("localhost", 3, "http://localhost:3/metrics"),
])
def test_url_brackets_ipv6(host, port, expected):
    """12.8: an IPv6 address is printed in brackets (RFC 3986), so the URL can be pasted."""
    assert httpserve.url(host, port) == expected


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    write_mooncake_jsonl(generate_requests(seed=0, duration_s=30), path)
    return str(path)


def test_serve_metrics_warns_beyond_loopback(cli, small_trace, monkeypatch):
    """12.8: `policy serve-metrics` prints the warning on stderr when the address is not
    loopback (simulated here, so the test itself binds loopback only)."""
    monkeypatch.setattr(httpserve, "is_loopback", lambda addr: False)
    code, out, err = cli("policy", "serve-metrics", small_trace, "-p", "lru", "--port", "0", "--duration", "0.01")
    assert code == 0, err
    lines = [line for line in err.splitlines() if "warning" in line]
    assert len(lines) == 1 and "--bind 127.0.0.1" in lines[0], err


def test_serve_metrics_quiet_on_loopback(cli, small_trace):
    code, out, err = cli("policy", "serve-metrics", small_trace, "-p", "lru", "--port", "0", "--duration", "0.01")
    assert code == 0, err
    assert "warning" not in err and "http://127.0.0.1:" in err


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")
def test_serve_metrics_on_ipv6_loopback(cli, small_trace):
    """12.8: bound to ::1, the printed URL has brackets and a scrape of it succeeds."""
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    Gauge("sitsprof_v6", "v6", registry=registry).set(1)
    srv, _ = httpserve.start_metrics_server(registry, 0, "::1")
    try:
        host, port = srv.server_address[:2]
        link = httpserve.url(host, port)
        assert link.startswith("http://[::1]:")
        with urllib.request.urlopen(link, timeout=5) as response:
            assert b"sitsprof_v6 1.0" in response.read()
    finally:
        srv.shutdown()
        srv.server_close()
    code, out, err = cli("policy", "serve-metrics", small_trace, "-p", "lru", "--bind", "::1", "--port", "0",
                         "--duration", "0.01")
    assert code == 0 and "http://[::1]:" in err, err


def test_exporter_serves_on_the_bounded_server(fake_gpu):
    """12.8: `sitsprof export` (collectors/exporter.py) uses the same bounded server."""
    from sitsprof.collectors.exporter import serve

    srv, collector = serve(port=0, gpm=False)
    try:
        assert isinstance(srv, httpserve.BoundedWSGIServer)
        assert "DCGM_FI_DEV_SM_CLOCK" in _scrape(srv.server_port)
    finally:
        srv.shutdown()
        srv.server_close()
        collector.close()
