"""`nodeconsole capture [-o FILE] [--redact]`: one compressed archive of what the console reads from this
host (console/capture/__init__.py has the layout), which `nodeconsole --replay FILE` (and `snapshot`,
`doctor`, `events` with --replay) opens again offline, read-only.

Progress goes to stderr; a source that cannot be read is recorded as failed in the manifest and the
capture goes on. Works on the live host (as root: sysfs config space, the kernel log and NVML need it),
on the demo host (--demo), on a captured tree (--root DIR) and on a replay (a copy of the capture).
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from nodeconsole.console.capture import limits
from nodeconsole.console.cli_base import seams_from_args, subcommand
from nodeconsole.console.hosttext import visible
from nodeconsole.console.usage import UsageError

if TYPE_CHECKING:
    from nodeconsole.console.audit_log import AuditRecord
    from nodeconsole.console.seams import Seams

MAX_AUDIT = limits.MAX_MEMBER_BYTES  # the largest member a replay opens


@subcommand("capture", "write one archive of what the console reads from this host (reopen it with --replay FILE)")
def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="FILE",
                   help="where to write the archive (default: nodeconsole-HOST-TIME.tar.gz here)")
    p.add_argument("--redact", action="store_true",
                   help="replace host names, VM names, UUIDs, MAC addresses and GPU serials by pseudonyms")
    p.set_defaults(func=run)


def _note(text: str) -> None:
    print(f"nodeconsole capture: {text}", file=sys.stderr, flush=True)


def _programs(seams: Seams) -> dict[str, str | None]:
    """Where the host's command seam finds each program a plan looks for."""
    from nodeconsole.console.capture.replay import PLAN_PROGRAMS

    commands = seams.writes.commands(seams.root)
    return {name: commands.which(name) for name in PLAN_PROGRAMS}


def _audit(seams: Seams) -> tuple[bytes | None, list[AuditRecord]]:
    """The host's audit log (bytes and records) in the state directory its seams chose, as `nodeconsole
    log` reads it."""
    from nodeconsole.console.audit_log import host_audit

    log = host_audit(seams)
    try:
        with open(log.path, "rb") as f:
            data = f.read(MAX_AUDIT + 1)
        records = log.records()
    except FileNotFoundError:
        return None, []
    except OSError as e:
        _note(f"warning: cannot read the audit log {log.path}: {e.strerror or e}")
        return None, []
    if len(data) > MAX_AUDIT:
        _note(f"warning: the audit log {log.path} is larger than {MAX_AUDIT >> 20} MiB: not captured")
        return None, records
    return data, records


def run(args: argparse.Namespace) -> int:
    import time

    from nodeconsole.console.capture.take import take_capture

    out = args.output
    if out is not None and os.path.isdir(out):
        raise UsageError(f"-o {out}: is a directory")
    seams = seams_from_args(args)
    t0 = time.perf_counter()
    audit, records = _audit(seams)
    from nodeconsole.console.capture.archive import ArchiveError

    try:
        capture = take_capture(seams, changes=records, audit=audit, programs=_programs(seams), redact=args.redact,
                               progress=_note)
    except ArchiveError as e:  # beyond what a replay opens (console/capture/limits.py)
        raise UsageError(str(e)) from None
    if out is None:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in capture.manifest.get("hostname") or "host")
        out = f"nodeconsole-{name[:64]}-{stamp}.tar.gz"
    _write(Path(out), capture.data)
    failed = {name: s.get("reason", "") for name, s in capture.manifest["sources"].items()
              if s.get("status") == "failed"}
    for name, reason in failed.items():
        _note(f"{name} failed: {visible(reason)}")
    _note(f"wrote {out}: {capture.entries} entries, {len(capture.data) / 1024:.0f} KiB "
          f"in {time.perf_counter() - t0:.1f} s" + (f"; {len(failed)} source(s) failed" if failed else ""))
    return 0


def _write(path: Path, data: bytes) -> None:
    """Write atomically, private to the user (0600): a capture names the host's VMs and devices."""
    from nodeconsole.console.outfile import OutputError, write_output

    try:
        write_output(path, data, 0o600)
    except OutputError as e:
        raise UsageError(f"-o {e}") from None
