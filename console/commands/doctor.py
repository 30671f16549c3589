"""`nodeconsole doctor`: is this host ready for GPU VMs? Every check (console/doctor) on one snapshot,
grouped (firmware & kernel, modules & driver, memory & CPUs, PCIe, GPUs, VMs), with the fix of each
warning or failure; `--json` for scripts. `--fix ID…` plans those checks' fixes through the action
session (plan → confirm → apply → verify → audit → undo), like every other change: the full command
plugs it in (actions/cli/doctor_fix.py registers `doctor` again with `configure(p, fix=...)`).

Exit status: 0 when no check fails, 1 when one does (or a fix is refused or fails), 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from typing import TYPE_CHECKING

from nodeconsole.console.cli_base import FULL_COMMAND, Configure, seams_from_args, subcommand
from nodeconsole.console.doctor.model import CHECK_IDS, GROUPS, ROLES, CheckResult, DoctorReport
from nodeconsole.console.hosttext import visible
from nodeconsole.console.usage import UsageError

if TYPE_CHECKING:
    from nodeconsole.console.audit_log import AuditRecord
    from nodeconsole.console.seams import Seams

HELP = "check the host's readiness for GPU VMs (pass/warn/fail/skip, each with its fix)"


@subcommand("doctor", HELP)
def configure(p: argparse.ArgumentParser) -> None:
    configure_doctor(p)


def configure_doctor(p: argparse.ArgumentParser, fix: Configure | None = None) -> None:
    """The read-only doctor; `fix(p)` adds --fix ID… and what it takes, and sets the parser's `func`."""
    p.add_argument("--role", choices=ROLES, default="mixed",
                   help="what the host is for: passthrough, mig, vgpu or mixed (default); decides which "
                        "checks apply")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)
    if fix is not None:
        fix(p)
    else:  # the base entry: named, so that asking for it says where it is
        p.add_argument("--fix", nargs="+", metavar="ID", help=argparse.SUPPRESS)


def check_ids(words: list[str]) -> tuple[str, ...]:
    """The check ids of --fix (commas allowed), in order, each once; UsageError naming a close match."""
    out: list[str] = []
    for word in words:
        for cid in (w.strip() for w in word.split(",")):
            if not cid:
                continue
            if cid not in CHECK_IDS:
                close = difflib.get_close_matches(cid, CHECK_IDS, n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                raise UsageError(f"unknown check {cid!r}: {hint}valid ids: {', '.join(CHECK_IDS)}")
            if cid not in out:
                out.append(cid)
    if not out:
        raise UsageError(f"--fix needs check ids: {', '.join(CHECK_IDS)}")
    return tuple(out)


def run(args: argparse.Namespace) -> int:
    """The report (exit 1 when a check fails)."""
    if args.fix:
        raise UsageError(f"doctor --fix changes the host: it is a command of the full {FULL_COMMAND}")
    report = diagnose(args)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(render(report))
    return report.exit_code


def diagnose(args: argparse.Namespace) -> DoctorReport:
    """One snapshot through the same seams as `snapshot` (--demo/--root/--libvirt), the audit log's
    records, and every check."""
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.doctor.run import run_doctor

    seams = seams_from_args(args)
    collector = Collector(seams)
    try:
        snap = collector.collect()
        hypervisor = collector.hypervisor
    finally:
        collector.close()
    return run_doctor(snap, seams.root, role=args.role, changes=_changes(seams), hypervisor=hypervisor)


def _changes(seams: Seams) -> list[AuditRecord]:
    """The audit log's records (as `nodeconsole log` reads them); an unreadable log: none, with a warning."""
    from nodeconsole.console.audit_log import host_audit

    log = host_audit(seams)
    try:
        records = log.records()
    except OSError as e:
        print(f"nodeconsole: warning: cannot read the audit log {log.path}: {e.strerror or e} (changes "
              "waiting for a reboot are not shown)", file=sys.stderr)
        return []
    for problem in log.problems:
        print(f"nodeconsole: warning: {log.path} {problem}", file=sys.stderr)
    return records


def render(report: DoctorReport) -> str:
    """The table: by group, a status, the check id and its finding; for warnings and failures the fix
    and its commands; pending-reboot notes; then a summary line."""
    by_id = {c.id: c for c in report.checks}
    lines: list[str] = []
    for group, ids in GROUPS:
        rows = [by_id[i] for i in ids if i in by_id]
        if not rows:
            continue
        lines.append(group)
        for c in rows:
            lines += _rows(c)
        lines.append("")
    n = report.counts()
    lines.append(f"{n['pass']} pass, {n['warn']} warn, {n['fail']} fail, {n['skip']} skip (role {report.role})")
    todo = [c for c in report.checks if c.status in ("warn", "fail") and c.fix is not None
            and c.fix.plannable and not c.pending.startswith("pending reboot")]
    if todo:
        reboot = any(c.fix is not None and c.fix.needs_reboot for c in todo)
        lines.append(f"plan the fixes: nodeconsole doctor --fix {' '.join(c.id for c in todo)}"
                     + (" (then reboot once)" if reboot else ""))
    pending = [c.id for c in report.checks if c.pending.startswith("pending reboot")]
    if pending:
        lines.append(f"waiting for a reboot: {', '.join(pending)}")
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def _rows(c: CheckResult) -> list[str]:
    out = [f"  {c.status.upper():<4}  {c.id:<19}  {visible(c.finding)}"]
    pad = " " * 29
    if c.pending:
        out.append(f"{pad}({visible(c.pending)})")
    if c.fix is not None and c.status in ("warn", "fail"):
        how = "" if c.fix.plannable else " [by hand]"
        out.append(f"{pad}fix{how}: {visible(c.fix.summary)}")
        out += [f"{pad}  $ {visible(cmd)}" for cmd in c.fix.commands]
    return out
