"""`nodeconsole diff A B [--json]`: what changed between two captures (`nodeconsole capture`), and
`nodeconsole diff A --live [--demo | --root DIR | --libvirt URI]`: what changed on the host since
capture A (the host is captured in memory now and compared the same way).

Grouped by topic: drivers and GPU owners, IOMMU groups, MIG layouts, vGPU instances, VM definitions,
the kernel's command line and modules, configuration files, versions, health counters that grew, new
kernel-log GPU events, the audit records made in between and the doctor's verdicts
(console/capture/diff.py). Like diff(1): exit 0 when nothing differs, 1 when something does, 2 for a
usage error (a missing file, not a capture, bad arguments).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from nodeconsole.console.cli_base import seams_from_args, subcommand
from nodeconsole.console.usage import UsageError

EXIT_SAME, EXIT_DIFFERENT = 0, 1


@subcommand("diff", "what changed between two captures, or between a capture and the host now (--live)")
def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A", help="the earlier capture (nodeconsole capture -o A)")
    p.add_argument("b", metavar="B", nargs="?", help="the later capture (or --live: the host now)")
    p.add_argument("--live", action="store_true",
                   help="compare A with the host now: this machine, or the one --demo, --root or --libvirt names")
    p.add_argument("--json", action="store_true",
                   help="print a list of {topic, subject, what, before, after} (and note, when there is one)")
    p.set_defaults(func=run)


def _note(text: str) -> None:
    print(f"nodeconsole diff: {text}", file=sys.stderr, flush=True)


def _check(args: argparse.Namespace) -> None:
    if getattr(args, "replay", None) is not None:
        raise UsageError("diff takes the captures as arguments (diff A B), not --replay")
    host_flags = [f"--{k}" for k in ("demo", "root", "libvirt") if getattr(args, k, None)]
    if args.live and args.b is not None:
        raise UsageError("diff: give a second capture B or --live, not both")
    if not args.live:
        if host_flags:
            raise UsageError(f"diff: {', '.join(host_flags)} names the live host: add --live (diff A --live)")
        if args.b is None:
            raise UsageError("diff needs two captures (diff A B), or one and --live (the host now)")
    for path in (args.a, args.b):
        if path is None:
            continue
        if not path.strip():
            raise UsageError("diff: an empty capture name")
        if not os.path.isfile(path):
            raise UsageError(f"diff: {path}: no such file")


def run(args: argparse.Namespace) -> int:
    from nodeconsole.console.capture.diff import DiffError, compare, live_side, load_side, render

    _check(args)
    try:
        a = load_side(args.a)
        if args.live:
            seams = seams_from_args(args)
            _note("capturing the host now")
            b = live_side(seams)
        else:
            b = load_side(args.b)
    except DiffError as e:
        raise UsageError(str(e)) from None
    diff = compare(a, b)
    if args.json:
        for n in diff.notes:
            _note(f"note: {n}")
        print(json.dumps(diff.to_dicts(), indent=2, ensure_ascii=False))
    else:
        for _style, line in render(diff):
            print(line)
    return EXIT_DIFFERENT if diff.changes else EXIT_SAME
