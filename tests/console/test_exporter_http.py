"""The exporter's HTTP server (console/metrics_http.py) on 127.0.0.1, a random port: idle and dripping
connections are closed after the timeout, the threads stay bounded, HEAD is answered, the query string
is ignored, and a burst of parallel scrapes is served."""
from __future__ import annotations

import http.client
import select
import socket
import threading
import time
import urllib.request

import pytest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from nodeconsole.console.metrics_http import serve_metrics

TIMEOUT = 0.5  # a short connection timeout for the tests (the exporter's is 5 s)
MAX_THREADS = 8


class _Fixed:
    def collect(self):
        g = GaugeMetricFamily("nodeconsole_gpu_info", "a GPU", labels=["address"])
        g.add_metric(["0000:18:00.0"], 1)
        yield g
        yield GaugeMetricFamily("nodeconsole_build_info", "version", value=1)


@pytest.fixture
def server():
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Fixed())
    srv, _t = serve_metrics("127.0.0.1", 0, reg, timeout=TIMEOUT, max_threads=MAX_THREADS)
    try:
        yield srv.server_port
    finally:
        srv.shutdown()
        srv.server_close()


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """True when the server closes `sock` (EOF, after any answer) within `within` seconds."""
    end = time.monotonic() + within
    while (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select([sock], [], [], left)
        if ready:
            try:
                if sock.recv(65536) == b"":
                    return True
            except ConnectionResetError:
                return True
    return False


def test_idle_connections_are_closed_and_threads_stay_bounded(server):
    before = threading.active_count()
    socks = [socket.create_connection(("127.0.0.1", server)) for _ in range(200)]
    try:
        time.sleep(0.2)
        assert threading.active_count() <= before + MAX_THREADS
        assert all(closed_by_server(s, within=TIMEOUT + 10) for s in socks)
    finally:
        for s in socks:
            s.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{server}/metrics", timeout=5) as r:  # still serving
        assert r.status == 200


def test_a_dripping_request_is_cut_after_the_timeout(server):
    """One byte of header every 0.1 s never leaves the connection idle for a whole timeout; the
    request's own deadline closes it."""
    with socket.create_connection(("127.0.0.1", server)) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX-Pad: ")
        t0 = time.monotonic()
        closed = False
        while time.monotonic() - t0 < 20 and not closed:
            try:
                s.sendall(b"a")
            except OSError:
                closed = True
                break
            closed = closed_by_server(s, within=0.1)
        assert closed and time.monotonic() - t0 < 10


def _request(port: int, method: str, path: str) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def test_head_is_answered_with_the_headers_and_no_body(server):
    status, headers, body = _request(server, "HEAD", "/metrics")
    assert status == 200 and body == b""
    assert headers["Content-Type"].startswith("text/plain")
    get_status, _h, get_body = _request(server, "GET", "/metrics")
    assert get_status == 200 and int(headers["Content-Length"]) == len(get_body)


@pytest.mark.parametrize("query", ["?name[]=", "?name[]=nodeconsole_build_info", "?x=%ff&&=="])
def test_the_query_string_is_ignored(server, query):
    status, _h, body = _request(server, "GET", "/metrics" + query)
    assert status == 200
    assert b'nodeconsole_gpu_info{address="0000:18:00.0"} 1.0' in body and b"nodeconsole_build_info 1.0" in body


def test_a_burst_of_parallel_scrapes_is_served(server):
    """Parallel scrapes up to the thread bound: every one answered (the listen backlog holds the burst)."""
    results: list[int] = []

    def scrape():
        for _ in range(3):
            with urllib.request.urlopen(f"http://127.0.0.1:{server}/metrics", timeout=10) as r:
                r.read()
                results.append(r.status)

    threads = [threading.Thread(target=scrape) for _ in range(MAX_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [200] * (3 * MAX_THREADS)


def test_a_connection_beyond_the_bound_is_refused_at_once():
    """While MAX_THREADS idle connections hold every slot (a 30 s timeout here), one more is answered
    503 at once, not left waiting."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Fixed())
    srv, _t = serve_metrics("127.0.0.1", 0, reg, timeout=30, max_threads=MAX_THREADS)
    idle = [socket.create_connection(("127.0.0.1", srv.server_port)) for _ in range(MAX_THREADS)]
    try:
        time.sleep(0.2)
        with socket.create_connection(("127.0.0.1", srv.server_port)) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            s.settimeout(10)
            assert s.recv(100).startswith(b"HTTP/1.0 503")
    finally:
        for s in idle:
            s.close()
        srv.shutdown()
        srv.server_close()
