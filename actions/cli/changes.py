"""Guided changes from the command line: passthrough, release, log, undo.

Each change is a request to the action session (actions/session.py), planned, printed and applied by
actions/cli/change.py: nothing changes without --apply; --apply asks unless --yes. Exit status: 0
done or nothing to do, 1 refused / cancelled / failed, 2 bad arguments.
"""
from __future__ import annotations

import argparse
import json
import sys

from nodeconsole.actions.cli.change import allow_unhealthy_arg, change_args, run_request, session_for
from nodeconsole.console.argtypes import count
from nodeconsole.console.audit_log import AuditRecord, Status
from nodeconsole.console.cli_base import subcommand
from nodeconsole.console.hosttext import visible


@subcommand("passthrough", "hand a GPU (its whole IOMMU group) to vfio-pci, optionally to a VM's config")
def configure_passthrough(p: argparse.ArgumentParser) -> None:
    p.add_argument("gpu", metavar="GPU", help="console index, PCI address (DDDD:BB:DD.F), UUID or smi:N (nvidia-smi's index)")
    p.add_argument("--vm", metavar="VM", help="also add the GPU and its companion functions to VM's config")
    p.add_argument("--persist", action="store_true",
                   help="keep the GPU on vfio-pci across reboots (driverctl, else a modprobe.d file)")
    p.add_argument("--with-nic", action="store_true",
                   help="with --vm: also give the VM the free NIC VF closest to the GPU (PIX, PXB, PHB, then NODE)")
    p.add_argument("--allow-far-nic", action="store_true",
                   help="with --with-nic: take a VF across the sockets (SYS) when none is nearer")
    allow_unhealthy_arg(p)
    change_args(p)
    p.set_defaults(func=run_passthrough)


@subcommand("release", "give a passed-through GPU back to the host (VM configs, persistence, drivers)")
def configure_release(p: argparse.ArgumentParser) -> None:
    p.add_argument("gpu", metavar="GPU", help="console index, PCI address, UUID or smi:N (nvidia-smi's index)")
    change_args(p)
    p.set_defaults(func=run_release)


@subcommand("log", "list the recorded changes (the audit log)")
def configure_log(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the records as JSON lines")
    p.add_argument("-n", "--last", type=count(0, 1 << 62, "count"), default=0,
                   metavar="N", help="only the last N changes")
    p.set_defaults(func=run_log)


@subcommand("undo", "roll a recorded change back (the latest when no ID is given)")
def configure_undo(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", nargs="?", metavar="ID", help="audit record id (see `nodeconsole log`)")
    change_args(p)
    p.set_defaults(func=run_undo)


def run_passthrough(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import Passthrough

    return run_request(args, Passthrough(args.gpu, vm=args.vm, persist=args.persist, with_nic=args.with_nic,
                                         allow_far_nic=args.allow_far_nic, allow_unhealthy=args.allow_unhealthy))


def run_release(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import Release

    return run_request(args, Release(args.gpu))


def run_undo(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import Undo

    return run_request(args, Undo(args.id))


def run_log(args: argparse.Namespace) -> int:
    host = session_for(args).host
    try:
        log = host.audit
        records = log.records()
    except OSError as e:
        print(f"nodeconsole: cannot read the audit log {host.audit.path}: {e.strerror or e}", file=sys.stderr)
        return 1
    for problem in log.problems:  # damaged lines: named, skipped, the rest still listed
        print(f"nodeconsole: warning: {host.audit.path} {problem}", file=sys.stderr)
    if args.last and args.last > 0:
        records = records[-args.last:]
    if args.json:
        for r in records:
            print(json.dumps(r.to_json(), sort_keys=True))
        return 0
    if not records:
        print(f"no recorded changes ({host.audit.path})")
        return 0
    for r in records:  # records hold host text (titles name VMs and GPUs): shown with visible escapes
        _print_record(r)
    return 0


def _or(value: str | None, default: str) -> str:
    return default if value is None else value


def _print_record(r: AuditRecord) -> None:
    user = visible((r.who or {}).get("user", "?"))
    result = visible(_or(r.result, "?"))
    if r.undone_by:
        result += f", undone by {visible(r.undone_by)}"
    rid = visible(r.id)
    print(f"{rid}  {visible(_or(r.when, '?'))}  {user:<8}  {visible(_or(r.action, '?')):<11}  {result}")
    print(f"    {visible(_or(r.title, ''))}")
    if r.failed:
        failed = r.failed
        print(visible(f"    failed at step {failed.get('step')} ({failed.get('title')}): {failed.get('error')}"))
        if r.undone:
            print(visible(f"    undone: {'; '.join(map(str, r.undone))}"))
        for f in r.undo_failed:
            print(f"    NOT undone: {visible(f)}")
    for note in r.notes:
        print(f"    note: {visible(note)}")
    pending = (Status.APPLIED, "failed, undo", "interrupted, undo", Status.IN_PROGRESS)
    if r.undo and not r.undone_by and result.startswith(pending):
        if result.startswith(Status.IN_PROGRESS):
            print("    never finished (the process died mid-change, or its final record was lost): "
                  "it may be half-applied")
        # undoing an undo puts the change back: say so, the plain `undo` walks back instead
        verb = "redo" if r.undoes else "undo"
        print(f"    {verb}: nodeconsole undo {rid} --apply")
