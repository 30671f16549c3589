"""`nodeconsole exporter`: the snapshot as Prometheus metrics, served over HTTP or written once for
node_exporter's textfile collector."""
from __future__ import annotations

import argparse
import re

from nodeconsole.console.argtypes import seconds
from nodeconsole.console.cli_base import seams_from_args, subcommand
from nodeconsole.console.usage import UsageError

DEFAULT_LISTEN = "127.0.0.1:9842"


@subcommand("exporter", "serve the host's metrics to Prometheus (or write them once with --textfile)")
def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", metavar="ADDR:PORT", default=DEFAULT_LISTEN,
                   help=f"address to serve /metrics on (default {DEFAULT_LISTEN}; [::]:9842 for IPv6)")
    p.add_argument("--textfile", metavar="PATH", default=None,
                   help="write the metrics once to PATH (atomically, for node_exporter's textfile "
                        "collector; name it *.prom) and exit")
    p.add_argument("--interval", dest="sample_interval", type=seconds, default=15.0, metavar="S",
                   help="seconds between snapshots while serving (default 15)")
    p.set_defaults(func=run)


def parse_listen(text: str) -> tuple[str, int]:
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([^\s:\[\]]*):(\d{1,5})", text.strip())
    if not m:
        raise UsageError(f"--listen {text!r}: expected ADDR:PORT (e.g. 0.0.0.0:9842 or [::]:9842)")
    addr = m.group(1) if m.group(1) is not None else (m.group(3) or "0.0.0.0")
    port = int(m.group(2) or m.group(4))
    if port > 65535:
        raise UsageError(f"--listen {text!r}: port {port} is out of range")
    return addr, port


def run(args: argparse.Namespace) -> int:
    import time

    from nodeconsole.console.collector import Collector
    from nodeconsole.console.exporter import Sampler, registry_for

    listen = parse_listen(args.listen) if args.textfile is None else None
    if args.textfile is not None and not args.textfile.strip():
        raise UsageError("--textfile needs a path")
    collector = Collector(seams_from_args(args))
    sampler = Sampler(collector, interval=args.sample_interval)
    registry = registry_for(lambda: sampler.latest)
    try:
        if args.textfile is not None:
            from prometheus_client import generate_latest

            from nodeconsole.console.outfile import OutputError, write_output

            collector.collect()  # CPU use is a delta between two reads: prime it
            time.sleep(0.25)
            sampler.take()
            try:  # whole or not at all, mode 0644 (node_exporter reads it), never through a link
                write_output(args.textfile, generate_latest(registry), 0o644)
            except OutputError as e:
                raise UsageError(f"--textfile {e}") from None
            return 0
        from nodeconsole.console.exporter import FIRST_SAMPLE_WAIT
        from nodeconsole.console.metrics_http import MetricsServer, start_serving

        assert listen is not None
        try:  # listening at once (a port in use is said now); answering once the first sample is taken
            server = MetricsServer(listen[0], listen[1], registry)
        except OSError as e:
            raise UsageError(f"--listen {args.listen}: {e.strerror or e}") from None
        sampler.start()
        sampler.ready.wait(FIRST_SAMPLE_WAIT)  # a source that hangs costs the first scrapes, not the port
        start_serving(server)
        print(f"nodeconsole exporter: serving http://{args.listen.strip()}/metrics "
              f"(port {server.server_port}), a snapshot every {args.sample_interval:g} s", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        sampler.stop()
        server.shutdown()
        server.server_close()
        return 0
    finally:
        collector.close()
