"""Formatting shared by the `nodeconsole nccl` subcommands (actions/cli/nccl.py): sweep options,
numbers, findings and a parsed output as JSON."""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, TextIO

from nodeconsole.console.argtypes import MAX_COUNT, count
from nodeconsole.console.usage import UsageError

if TYPE_CHECKING:  # the NCCL checks are imported when a command runs
    from nodeconsole.actions.nccl.finding import Finding
    from nodeconsole.actions.nccl.parse import ParsedOutput



def _sweep_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-b", "--min-bytes", default="8", metavar="SIZE", help="smallest message (8; K/M/G suffixes)")
    p.add_argument("-e", "--max-bytes", default="1G", metavar="SIZE", help="largest message (1G)")
    p.add_argument("-f", "--factor", type=count(1, MAX_COUNT, "factor"), default=2, metavar="N", help="size step factor (2)")


def _sweep(args: argparse.Namespace) -> list[str]:
    from nodeconsole.actions.nccl.commands import sweep_args

    try:
        return sweep_args(args.min_bytes, args.max_bytes, args.factor)
    except ValueError as e:
        raise UsageError(str(e)) from None


# -- formatting ----------------------------------------------------------------------------------------
def _num(v: float | None) -> str:
    """A parsed number as the parser read it (repr round-trips the float exactly)."""
    if v is None:
        return "-"
    return "N/A" if math.isnan(v) else repr(v)


def _json_num(v: float | None) -> float | None:
    return None if v is None or math.isnan(v) else v


def size_label(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _finding_dict(f: Finding) -> dict[str, str]:
    return dataclasses.asdict(f)


def _print_findings(findings: Iterable[Finding], out: TextIO | None = None) -> None:
    out = out or sys.stdout  # looked up per call: tests and pagers swap it
    marks = {"error": "✖", "warning": "▲", "info": "•"}
    for f in findings:
        print(f"  {marks.get(f.severity, '•')} [{f.severity}] {f.message}", file=out)
        print(f"      why: {f.reason}", file=out)
        print(f"      fix: {f.fix}", file=out)


def _transports(parsed: ParsedOutput) -> str:
    kinds = parsed.transport_kinds
    return ", ".join(f"{k} ×{n}" for k, n in sorted(kinds.items())) or "-"


def _oob(parsed: ParsedOutput) -> str:
    if parsed.oob_ok is None:
        return "not reported"
    return f"{parsed.oob_count} {'OK' if parsed.oob_ok else 'FAILED'}"


def parsed_dict(parsed: ParsedOutput) -> dict[str, object]:
    """The reading of an output as plain data (rows included)."""
    return {
        "rows": len(parsed.rows), "avg_busbw": _json_num(parsed.avg_busbw), "peak_busbw": parsed.peak_busbw,
        "complete": parsed.complete, "oob_count": parsed.oob_count, "oob_ok": parsed.oob_ok,
        "corrupted": parsed.corrupted, "wrong_total": parsed.wrong_total, "nccl_version": parsed.version,
        "networks": list(parsed.networks), "transports": dict(sorted(parsed.transport_kinds.items())),
        "devices": [dataclasses.asdict(d) for d in parsed.devices], "errors": list(parsed.errors),
        "table": [dataclasses.asdict(r) for r in parsed.rows],
    }
