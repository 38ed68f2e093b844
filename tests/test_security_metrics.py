"""The metrics endpoint against idle and slow clients (issue 23 point 6: 300 idle connections
held 316 threads until their clients closed, the TLS handshake running in each): connections
cost no thread, idle ones are closed after their timeout or to make room, and Prometheus is
answered meanwhile. No test asserts a duration."""

from __future__ import annotations

import socket
import ssl
import threading
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from controller.security.metrics_http import MetricsLimits
from controller.security.transport import TLSFiles
from controller.testing.metrics import serve_metrics


def _registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("aifabric_test_requests", "test counter", registry=reg).inc(3)
    return reg


def wait_until(cond, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _idle(port: int, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        out.append(s)
    return out


def _closed_by_server(s: socket.socket) -> bool:
    s.settimeout(10)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("tls", [False, True])
def test_three_hundred_idle_connections_cost_no_thread_and_leave_prometheus_answered(pki, tls):
    files = TLSFiles.from_dir(pki.directory, "controller", with_ca=False) if tls else None
    srv = serve_metrics(_registry(), tls=files, limits=MetricsLimits(read_timeout_s=3.0,
                                                                     handshake_timeout_s=3.0))
    threads = threading.active_count()
    socks: list[socket.socket] = []
    try:
        socks = _idle(srv.port, 300)
        ctx = ssl.create_default_context(cafile=str(pki.ca_cert)) if tls else None
        for _ in range(10):   # one after another (the request may beat the handshake's end)
            with urllib.request.urlopen(srv.url, timeout=10, context=ctx) as r:
                assert r.status == 200 and b"aifabric_test_requests_total 3.0" in r.read()
        # not one per connection: the render pool (2) and asyncio's resolver thread at most
        assert threading.active_count() <= threads + 3
        assert srv.open_connections() <= srv.limits.max_connections
        assert srv.stats.evicted_idle >= 300 - srv.limits.max_connections
        # the ones still open are closed by their timeout (TLS handshake / request head)
        assert wait_until(lambda: srv.open_connections() == 0)
        assert all(_closed_by_server(s) for s in socks[-srv.limits.max_connections + 1:])
        assert srv.stats.timed_out >= 1
    finally:
        for s in socks:
            s.close()
        srv.close()


def test_a_request_head_sent_too_slowly_is_closed_and_others_are_served(pki):
    srv = serve_metrics(_registry(), limits=MetricsLimits(read_timeout_s=1.0))
    try:
        slow = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")   # never the blank line
        with urllib.request.urlopen(srv.url, timeout=10) as r:
            assert r.status == 200
        assert _closed_by_server(slow)
        slow.close()
        big = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        big.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"y" * 20000 + b"\r\n\r\n")
        assert _closed_by_server(big)   # beyond max_request_bytes: closed, nothing answered
        big.close()
        assert srv.stats.answered == 1
    finally:
        srv.close()


def test_head_and_other_methods(pki):
    srv = serve_metrics(_registry())
    try:
        req = urllib.request.Request(srv.url, method="HEAD")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200 and r.read() == b""
            assert r.headers["Content-Type"].startswith("text/plain")
        req = urllib.request.Request(srv.url + "?name[]=aifabric_test_requests_total",
                                     headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=10) as r:
            import gzip

            assert r.headers["Content-Encoding"] == "gzip"
            assert b"aifabric_test_requests_total 3.0" in gzip.decompress(r.read())
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(urllib.request.Request(srv.url, method="POST", data=b""),
                                   timeout=10)
        assert ei.value.code == 405
    finally:
        srv.close()
