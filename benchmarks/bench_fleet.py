"""`nodeconsole fleet`'s answer reader and report on hostile and large Prometheus answers.

    .venv/bin/python benchmarks/bench_fleet.py [--big-mib 15]

1. The answer reader (console/fleet_answer.py read_answer) on 1 MiB answers of every padding: spaces
   between tokens, one label value of 1 MiB of spaces, of `\\u0020` escapes, of backslashes, and 1 MiB
   of small series; then the same at 15 MiB (just under the cap). Target (issue 28): each 1 MiB answer
   under 1 s, and so each 15 MiB one under 15 s. The json module's decoder is a linear scanner and the
   reader adds one pass over the series (with the cyclic GC paused: with it, small series cost grew
   faster than their size). The per-MiB ratio is printed, not a target: at a few ms, cache and page
   faults of the larger buffers dominate it.
2. The whole report against a local stub Prometheus answering each of the 12 queries with an answer
   just under the 16 MiB cap: wall time and the process's peak RSS (the old reader held every raw
   answer at once: 12 answers of ~43 MB took 6.6 GB).
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nodeconsole.console.fleet import fleet_report, http_fetch  # noqa: E402
from nodeconsole.console.fleet_answer import read_answer  # noqa: E402

MIB = 1024 * 1024


def answer(kind: str, size: int) -> bytes:
    head = b'{"status":"success","data":{"resultType":"vector","result":['
    tail = b"]}}"
    if kind == "spaces between tokens":
        return b'{"status":"success",' + b" " * size + b'"data":{"resultType":"vector","result":[]}}'
    if kind == "many series":
        one = b'{"metric":{"instance":"node-0001:9842","address":"0000:18:00.0","job":"nodeconsole"},"value":[1,"1"]}'
        return head + b",".join([one] * (size // (len(one) + 1))) + tail
    pad = {"a label of spaces": b" ", "a label of \\u0020": b"\\u0020", "a label of backslashes": b"\\\\"}[kind]
    return head + b'{"metric":{"instance":"a' + pad * (size // len(pad)) + b'"},"value":[1,"1"]}' + tail


def time_read(body: bytes) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        read_answer(body, "q")
        best = min(best, time.perf_counter() - t0)
    return best


def reader_table() -> bool:
    ok = True
    print("answer reader: 1 MiB, 15 MiB, and the ratio of their time per MiB")
    for kind in ("spaces between tokens", "many series", "a label of spaces", "a label of \\u0020",
                 "a label of backslashes"):
        t1, t15 = time_read(answer(kind, MIB)), time_read(answer(kind, 15 * MIB))
        ratio = (t15 / 15) / t1 if t1 > 0 else 1.0
        ok &= t1 < 1.0 and t15 < 15.0
        print(f"  {kind:24} {t1 * 1000:8.1f} ms {t15 * 1000:9.1f} ms   x{ratio:.2f}")
    return ok


def report_run(big_mib: float) -> tuple[float, float]:
    one = {"metric": {"instance": "node-0001:9842", "hostname": "node-0001", "address": "0000:18:00.0",
                      "job": "nodeconsole", "pad": "p" * 200}, "value": [1, "1"]}
    unit = json.dumps(one).encode()
    body = (b'{"status":"success","data":{"resultType":"vector","result":['
            + b",".join([unit] * int(big_mib * MIB / (len(unit) + 1))) + b"]}}")

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        t0 = time.perf_counter()
        fleet_report(http_fetch(f"http://127.0.0.1:{srv.server_port}", timeout=120))
        took = time.perf_counter() - t0
    finally:
        srv.shutdown()
        srv.server_close()
    return took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big-mib", type=float, default=15.0, help="size of each of the 12 answers (MiB)")
    args = ap.parse_args()
    ok = reader_table()
    took, rss = report_run(args.big_mib)
    print(f"report over 12 answers of {args.big_mib:g} MiB: {took:.1f} s, peak RSS {rss:.0f} MiB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
