"""The exporter's HTTP server (console/metrics_http.py) under idle sockets and parallel scrapes.

    .venv/bin/python benchmarks/bench_exporter_http.py [--idle 1000] [--loops 50] [--seconds 20]

1. `--idle` sockets opened and left idle: the most threads the process runs while they are open
   (target: at most MAX_THREADS more than before) and how long until the server has closed all of them
   (target: within the connection timeout plus a second).
2. `--loops` threads scraping /metrics back to back for `--seconds` (a registry of ~300 series,
   about the demo host's 26 KiB): scrapes, failures (target: none) and the slowest scrape.
(Issue 28 measured prometheus_client's server: ~400 threads 60 s after 1,000 idle sockets, never
closed; 3 of 2,464 scrapes timed out under 50 parallel loops.)
"""
from __future__ import annotations

import argparse
import selectors
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prometheus_client.core import GaugeMetricFamily  # noqa: E402
from prometheus_client.registry import CollectorRegistry  # noqa: E402

from nodeconsole.console.metrics_http import MAX_THREADS, TIMEOUT_S, serve_metrics  # noqa: E402


class _Demo:
    def collect(self):
        for name in ("util", "mem_used", "mem_total", "temp", "power", "ecc", "width", "gen", "mig", "vgpu"):
            g = GaugeMetricFamily(f"nodeconsole_gpu_{name}", name, labels=["address", "index", "model"])
            for i in range(30):
                g.add_metric([f"0000:{i:02x}:00.0", str(i), "NVIDIA H100 80GB HBM3"], i)
            yield g


def idle(port: int, n: int) -> tuple[int, float, int]:
    before = threading.active_count()
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    t0, peak, open_ = time.monotonic(), 0, len(socks)
    while open_ and time.monotonic() - t0 < TIMEOUT_S + 30:
        peak = max(peak, threading.active_count() - before)
        for key, _ev in sel.select(0.05):
            try:
                gone = key.fileobj.recv(65536) == b""  # type: ignore[union-attr]
            except OSError:
                gone = True
            if gone:
                sel.unregister(key.fileobj)
                open_ -= 1
    took = time.monotonic() - t0
    sel.close()
    for s in socks:
        s.close()
    return peak, took, open_


def loops(port: int, n: int, seconds: float) -> tuple[int, int, float]:
    ok, failed, slowest = [0], [0], [0.0]
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def loop():
        while time.monotonic() < end:
            t = time.monotonic()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    r.read()
                good = r.status == 200
            except OSError:
                good = False
            with lock:
                ok[0] += good
                failed[0] += not good
                slowest[0] = max(slowest[0], time.monotonic() - t)

    threads = [threading.Thread(target=loop) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ok[0], failed[0], slowest[0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--loops", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Demo())
    srv, _t = serve_metrics("127.0.0.1", 0, reg)
    try:
        peak, took, left = idle(srv.server_port, args.idle)
        print(f"{args.idle} idle sockets: at most {peak} more threads (bound {MAX_THREADS}); all closed by the "
              f"server after {took:.1f} s (timeout {TIMEOUT_S:g} s); {left} still open")
        ok, failed, slowest = loops(srv.server_port, args.loops, args.seconds)
        print(f"{args.loops} parallel scrape loops for {args.seconds:g} s: {ok} scrapes, {failed} failed, "
              f"slowest {slowest * 1000:.0f} ms")
        return 0 if peak <= MAX_THREADS and left == 0 and took < TIMEOUT_S + 1 and failed == 0 else 1
    finally:
        srv.shutdown()
        srv.server_close()


if __name__ == "__main__":
    sys.exit(main())
