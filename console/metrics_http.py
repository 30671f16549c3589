"""The exporter's HTTP server: /metrics from a prometheus_client registry, bounded in time and threads.

prometheus_client's own server (`start_http_server`) starts a thread per connection with no socket
timeout, so idle connections pile up threads forever; its listen backlog is 5, HEAD is 405 and
`?name[]=` restricts the answer to nothing. This one, a small `ThreadingHTTPServer`:

- gives each connection `timeout` seconds to send its request (line and headers, however slowly it
  drips them) and again `timeout` seconds to take the answer, then closes it;
- runs at most `max_threads` connections at once; one more is answered `503` at once and closed (a
  flood of idle sockets costs at most `max_threads` threads for `timeout` seconds);
- listens with a backlog of 128, so a burst of scrapes waits in the kernel instead of being dropped;
- answers GET and HEAD (the headers of GET, no body) on every path, ignoring the query string: the
  body is always the full registry (`generate_latest`, or OpenMetrics when asked for), gzip when asked.
"""
from __future__ import annotations

import gzip
import io
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import CollectorRegistry

TIMEOUT_S = 5.0  # a connection's time to send its request, and again to take the answer
MAX_THREADS = 64  # connections served at once
_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"


class _DeadlineReader(io.RawIOBase):
    """The connection's bytes, every read waiting at most for the time left before `end`."""

    def __init__(self, sock: socket.socket, end: float) -> None:
        self._sock, self._end = sock, end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._end - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request was not sent in time")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: the connection closes after the answer
    server: MetricsServer

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket's own reader: replaced by one with a deadline
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, time.monotonic() + self.server.conn_timeout))

    def do_GET(self) -> None:
        self._metrics(body=True)

    def do_HEAD(self) -> None:
        self._metrics(body=False)

    def do_OPTIONS(self) -> None:
        self.send_response(200)
        self.send_header("Allow", "GET, HEAD, OPTIONS")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _metrics(self, body: bool) -> None:
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        try:
            output = encoder(self.server.registry)
        except Exception:  # a collector failed: the scrape fails, the server stays
            self.send_error(500, "collecting the metrics failed")
            return
        self.connection.settimeout(self.server.conn_timeout)  # sendall: the whole answer within the timeout
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        if gzip_accepted(self.headers.get("Accept-Encoding", "")):
            output = gzip.compress(output)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(output)))
        self.end_headers()
        if body:
            self.wfile.write(output)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes are not logged


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # closing the server does not wait for slow clients
    request_queue_size = 128

    def __init__(self, addr: str, port: int, registry: CollectorRegistry, timeout: float = TIMEOUT_S,
                 max_threads: int = MAX_THREADS) -> None:
        info = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, sockaddr = info[0]
        self.address_family = family
        self.registry, self.conn_timeout = registry, timeout
        self._slots = threading.BoundedSemaphore(max_threads)
        super().__init__((str(sockaddr[0]), port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-answer: nothing to report

    def _refuse(self, request: socket.socket) -> None:
        try:
            request.settimeout(0.1)
            request.sendall(_BUSY)
        except OSError:
            pass
        self.shutdown_request(request)


def serve_metrics(addr: str, port: int, registry: CollectorRegistry, timeout: float = TIMEOUT_S,
                  max_threads: int = MAX_THREADS) -> tuple[MetricsServer, threading.Thread]:
    """Start serving `registry` on addr:port in a daemon thread; OSError when it cannot listen."""
    server = MetricsServer(addr, port, registry, timeout=timeout, max_threads=max_threads)
    return server, start_serving(server)


def start_serving(server: MetricsServer) -> threading.Thread:
    """Answer the connections of a server made (listening) before: until now they waited in its backlog."""
    thread = threading.Thread(target=server.serve_forever, name="nodeconsole-metrics-http", daemon=True)
    thread.start()
    return thread
