"""The one HTTP server behind sitsprof's Prometheus endpoints (`export`, `policy serve-metrics`).

prometheus-client's own `start_http_server` runs one thread per connection, with no limit and
no idle timeout, on a listen backlog of 5: 1,500 connections that never send a request hold
1,500 threads, and twenty clients connecting at once wait seconds for the backlog to drain.
Here a connection costs a thread only while it has a request to answer:

- accepted connections wait in one selector (a file descriptor each, no thread) while their
  request header arrives, read there without blocking: a connection whose whole header (up to
  the blank line, at most 64 KiB) has not arrived `idle_timeout_s` after it was accepted is
  closed, however steadily it trickles bytes (a client sending one byte every 2 s used to take
  a worker each as soon as its first byte came, and 70 of them starved every scrape);
- at most `max_pending` connections wait, and at most `max_per_address` of them from one
  client address (the oldest go first, so a new scrape is never the one dropped);
- a connection whose header is complete is answered by one of at most `max_connections`
  worker threads, whose socket reads (a body) and writes time out after `idle_timeout_s`;
- the listen backlog is `request_queue_size` (128).

So a normal scrape is answered while any number of idle or slow connections are open. Binding beyond
loopback serves the metrics to every host that can reach this one: `exposure_warning` says so
(the commands print it on stderr), and `url` writes an IPv6 address in brackets (RFC 3986).
Standard library only; the WSGI app (prometheus-client's `make_wsgi_app`) comes from the caller.
"""
from __future__ import annotations

import collections
import io
import ipaddress
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

__all__ = [
    "BACKLOG",
    "IDLE_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "MAX_HEADER_BYTES",
    "MAX_PENDING",
    "MAX_PER_ADDRESS",
    "BoundedWSGIServer",
    "exposure_warning",
    "is_loopback",
    "serve_wsgi",
    "start_metrics_server",
    "url",
]

MAX_CONNECTIONS = 64
IDLE_TIMEOUT_S = 10.0
MAX_PENDING = 1024
MAX_PER_ADDRESS = 256
MAX_HEADER_BYTES = 65536
BACKLOG = 128


class _Prefixed(io.RawIOBase):
    """The bytes the selector already read (the request header), then the socket itself."""

    def __init__(self, prefix: bytes, sock):
        self._prefix = memoryview(prefix)
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._prefix:
            n = min(len(buffer), len(self._prefix))
            buffer[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        return self._sock.recv_into(buffer)


class _QuietHandler(WSGIRequestHandler):
    """Reads the request from what the selector gathered; no access log on stderr (a scrape
    every 15 s would fill a terminal)."""

    def setup(self) -> None:
        super().setup()
        prefix = self.server.take_header(self.request)
        self.rfile = io.BufferedReader(_Prefixed(prefix, self.connection))

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


class BoundedWSGIServer(WSGIServer):
    """A WSGI server whose threads and idle connections are bounded (see the module docstring)."""

    request_queue_size = BACKLOG
    allow_reuse_address = True

    def __init__(self, server_address, app, max_connections: int = MAX_CONNECTIONS,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, max_pending: int = MAX_PENDING,
                 max_per_address: int = MAX_PER_ADDRESS, address_family: int = socket.AF_INET):
        self.address_family = address_family
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.max_pending = max_pending
        self.max_per_address = max_per_address
        self._headers: dict = {}  # socket -> bytes read so far (pending), then the whole header (queued)
        self._per_address: collections.Counter = collections.Counter()  # pending connections per host
        self._workers = ThreadPoolExecutor(max_workers=max_connections, thread_name_prefix="sitsprof-metrics")
        self._selector = selectors.DefaultSelector()
        self._pending: collections.OrderedDict = collections.OrderedDict()  # socket -> (address, deadline)
        self._incoming: collections.deque = collections.deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._closed = threading.Event()
        self._queued = 0  # connections handed to the workers and not yet answered
        self._queued_lock = threading.Lock()
        self._watcher = threading.Thread(target=self._watch, name="sitsprof-metrics-idle", daemon=True)
        super().__init__(server_address, _QuietHandler)  # binds; on failure calls server_close
        self.set_app(app)
        self._watcher.start()

    # accept thread (serve_forever): hand the connection to the watcher, start no thread
    def process_request(self, request, client_address) -> None:
        self._incoming.append((request, client_address))
        try:
            self._wake_w.send(b"\0")
        except OSError:  # the wake-up pipe is full: the watcher is awake anyway
            pass

    def _watch(self) -> None:
        while not self._closed.is_set():
            now = time.monotonic()
            while self._incoming:
                self._admit(*self._incoming.popleft(), now + self.idle_timeout_s)
            while len(self._pending) > self.max_pending:
                self._drop(next(iter(self._pending)))
            timeout = 0.5
            if self._pending:
                timeout = max(0.0, min(timeout, next(iter(self._pending.values()))[1] - now))
            try:
                events = self._selector.select(timeout)
            except (OSError, ValueError):  # closed under us at shutdown
                return
            for key, _ in events:
                sock = key.fileobj
                if sock is self._wake_r:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except (BlockingIOError, OSError):
                        pass
                    continue
                if sock in self._pending:
                    self._read_header(sock)
            now = time.monotonic()
            for sock, (_address, deadline) in list(self._pending.items()):
                if deadline > now:
                    break  # in arrival order: the rest are younger
                self._drop(sock)

    def _admit(self, request, address, deadline: float) -> None:
        """Watch a new connection; the oldest pending one from its address goes if it has too many."""
        host = _host(address)
        if self._per_address[host] >= self.max_per_address:
            oldest = next((s for s, (a, _) in self._pending.items() if _host(a) == host), None)
            if oldest is not None:
                self._drop(oldest)
        request.setblocking(False)
        self._pending[request] = (address, deadline)
        self._headers[request] = b""
        self._per_address[host] += 1
        self._selector.register(request, selectors.EVENT_READ)

    def _read_header(self, sock) -> None:
        """Read what the client sent, without blocking; hand it to a worker once the header is whole."""
        try:
            chunk = sock.recv(MAX_HEADER_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        got = self._headers.get(sock, b"") + chunk
        if not chunk or len(got) > MAX_HEADER_BYTES:  # closed by the client, or no HTTP header
            self._drop(sock)
            return
        self._headers[sock] = got
        if b"\r\n\r\n" not in got and b"\n\n" not in got:
            return  # more to come, before the deadline
        address, _deadline = self._forget(sock)
        with self._queued_lock:
            full = self._queued >= self.max_connections + self.max_pending
            self._queued += not full
        if full:  # every worker busy and as many waiting: refuse rather than queue without end
            self._headers.pop(sock, None)
            self.shutdown_request(sock)
            return
        sock.setblocking(True)
        sock.settimeout(self.idle_timeout_s)
        try:
            self._workers.submit(self._answer, sock, address)
        except RuntimeError:  # shutting down
            self._done()
            self._headers.pop(sock, None)
            self.shutdown_request(sock)

    def take_header(self, sock) -> bytes:
        """The header bytes the selector read for `sock` (once; the handler reads on from the socket)."""
        return self._headers.pop(sock, b"")

    def _forget(self, sock):
        """Stop watching `sock`; returns its (address, deadline)."""
        address, deadline = self._pending.pop(sock)
        host = _host(address)
        self._per_address[host] -= 1
        if self._per_address[host] <= 0:
            del self._per_address[host]
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        return address, deadline

    def _drop(self, sock) -> None:
        if sock in self._pending:
            self._forget(sock)
        self._headers.pop(sock, None)
        self.shutdown_request(sock)

    def _answer(self, sock, address) -> None:
        try:
            self.finish_request(sock, address)
        except Exception:  # noqa: BLE001 - a broken or timed-out client is that client's problem
            pass
        finally:
            self._headers.pop(sock, None)
            self.shutdown_request(sock)
            self._done()

    def _done(self) -> None:
        with self._queued_lock:
            self._queued -= 1

    def pending_connections(self) -> int:
        """Connections accepted and waiting for their first bytes (for tests and diagnostics)."""
        return len(self._pending) + len(self._incoming)

    def server_close(self) -> None:
        self._closed.set()
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass
        if self._watcher.is_alive():
            self._watcher.join(2)
        for sock in list(self._pending):
            self._drop(sock)
        while self._incoming:
            self.shutdown_request(self._incoming.popleft()[0])
        self._workers.shutdown(wait=False, cancel_futures=True)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
        super().server_close()


def _host(address):
    return address[0] if isinstance(address, tuple) and address else address


def serve_wsgi(app, port: int, addr: str = "127.0.0.1", **limits) -> tuple[BoundedWSGIServer, threading.Thread]:
    """Serve `app` on (addr, port) from a daemon thread; returns (server, thread). Port 0: any free port.

    An OSError (address in use, cannot assign) propagates for the caller to word."""
    infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    server = BoundedWSGIServer(sockaddr[:2], app, address_family=family, **limits)
    thread = threading.Thread(target=server.serve_forever, name="sitsprof-metrics-accept", daemon=True)
    thread.start()
    return server, thread


def start_metrics_server(registry, port: int, addr: str = "127.0.0.1", **limits):
    """prometheus-client's `start_http_server(port, addr, registry)` on the bounded server."""
    from prometheus_client import make_wsgi_app

    return serve_wsgi(make_wsgi_app(registry), port, addr, **limits)


def is_loopback(addr: str) -> bool:
    """True when `addr` (an IP address or a host name) reaches this machine only."""
    host = addr.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def exposure_warning(addr: str) -> str | None:
    """One line to print when binding `addr` serves the metrics beyond this machine, else None."""
    if is_loopback(addr):
        return None
    return (f"sitsprof: warning: --bind {addr} serves the metrics to every host that can reach this one "
            "(no authentication); --bind 127.0.0.1 keeps them on this machine")


def url(host: str, port: int, path: str = "/metrics") -> str:
    """`http://host:port/path`, an IPv6 literal in brackets (`http://[::1]:9400/metrics`)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"
