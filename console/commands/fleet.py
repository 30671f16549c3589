"""`nodeconsole fleet --prometheus URL`: every host's nodeconsole metrics, read back from Prometheus."""
from __future__ import annotations

import argparse
import json

from nodeconsole.console.argtypes import seconds
from nodeconsole.console.cli_base import subcommand
from nodeconsole.console.usage import UsageError


@subcommand("fleet", "the fleet from Prometheus: unhealthy GPUs, misaligned VMs, failing checks, drift")
def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prometheus", metavar="URL", required=True,
                   help="Prometheus server scraping the nodeconsole exporters (e.g. http://prom:9090)")
    p.add_argument("--timeout", type=seconds, default=10.0, metavar="S",
                   help="seconds the whole report may take, every query included (default 10)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from nodeconsole.console.fleet import AnswerError, FleetError, check_url, fleet_report, http_fetch, render_text
    from nodeconsole.console.hosttext import visible

    try:
        base = check_url(args.prometheus)
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        report = fleet_report(http_fetch(base, timeout=args.timeout))
    except FleetError as e:  # unreachable, too slow: 1; an answer that is not a Prometheus answer: 2
        print(f"nodeconsole fleet: {visible(e)}", file=sys.stderr)
        return 2 if isinstance(e, AnswerError) else 1
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(render_text(report)))
    return 0
