"""Guided changes from the command line: passthrough, release, log, undo.

Every change prints its plan and changes nothing without --apply; with --apply it asks on the terminal
(typing the GPU address when a VM's config holds the GPU) unless --yes is given. Exit status: 0 done or
nothing to do, 1 refused / cancelled / failed, 2 bad arguments.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from nodeconsole.console.argtypes import count
from nodeconsole.console.cli import UsageError, seams_from_args, subcommand
from nodeconsole.console.hosttext import lines as host_lines
from nodeconsole.console.hosttext import visible

if TYPE_CHECKING:  # the actions are imported when a command runs
    from nodeconsole.actions.plan import Plan
    from nodeconsole.actions.runner import ActionHost, Progress


def _change_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--apply", action="store_true", help="make the changes (default: only print the plan)")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation (for scripts)")


@subcommand("passthrough", "hand a GPU (its whole IOMMU group) to vfio-pci, optionally to a VM's config")
def configure_passthrough(p: argparse.ArgumentParser) -> None:
    p.add_argument("gpu", metavar="GPU", help="console index, PCI address (DDDD:BB:DD.F) or UUID")
    p.add_argument("--vm", metavar="VM", help="also add the GPU and its companion functions to VM's config")
    p.add_argument("--persist", action="store_true",
                   help="keep the GPU on vfio-pci across reboots (driverctl, else a modprobe.d file)")
    _change_args(p)
    p.set_defaults(func=run_passthrough)


@subcommand("release", "give a passed-through GPU back to the host (VM configs, persistence, drivers)")
def configure_release(p: argparse.ArgumentParser) -> None:
    p.add_argument("gpu", metavar="GPU", help="console index, PCI address or UUID")
    _change_args(p)
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
    _change_args(p)
    p.set_defaults(func=run_undo)


def _host(args: argparse.Namespace) -> ActionHost:
    from nodeconsole.actions.runner import ActionHost

    return ActionHost.from_seams(seams_from_args(args))


def run_passthrough(args: argparse.Namespace) -> int:
    from nodeconsole.actions.passthrough import plan_passthrough

    host = _host(args)
    return _execute(args, host, lambda: plan_passthrough(host, host.snapshot(), args.gpu, vm=args.vm,
                                                          persist=args.persist))


def run_release(args: argparse.Namespace) -> int:
    from nodeconsole.actions.passthrough import plan_release

    host = _host(args)
    return _execute(args, host, lambda: plan_release(host, host.snapshot(), args.gpu))


def run_undo(args: argparse.Namespace) -> int:
    from nodeconsole.actions.runner import plan_undo

    host = _host(args)
    try:
        latest = host.audit.latest_undoable()
    except OSError:
        latest = {}  # plan_undo reports the unreadable log
    if args.id is None and latest is None:
        print(f"nothing to undo: no recorded change left to roll back ({host.audit.path})")
        return 0
    return _execute(args, host, lambda: plan_undo(host, args.id))


def _execute(args: argparse.Namespace, host: ActionHost, make_plan: Callable[[], Plan]) -> int:
    from nodeconsole.actions.plan import RequestError, StepError
    from nodeconsole.actions.runner import Runner

    try:
        plan = make_plan()
    except RequestError as e:
        raise UsageError(str(e)) from None
    except StepError as e:
        print(f"nodeconsole: cannot plan this change: {visible(e)}", file=sys.stderr)
        return 1
    print(host_lines("\n".join(plan.lines())))  # titles and steps hold VM and GPU names
    if not plan.ok:
        return 1
    if plan.empty:
        if plan.undoes and args.apply:  # recorded as undone, so a plain `undo` moves on to older changes
            print(Runner(host).run(plan).message)
        return 0
    if not args.apply:
        print("\nNothing was changed: add --apply to make these changes.")
        return 0
    print()
    result = Runner(host).run(plan, confirm=None if args.yes else _ask, progress=_show)
    for warning in result.warnings:  # e.g. a lock left by a dead run, and the change it was making
        print(f"nodeconsole: warning: {warning}", file=sys.stderr)
    print(host_lines(result.message), file=sys.stdout if result.ok else sys.stderr)
    return 0 if result.ok else 1


def _ask(plan: Plan) -> bool:
    """Ask on the terminal: the GPU address to type when a VM config holds the GPU, else y/N."""
    from nodeconsole.actions.plan import needs_typed_confirmation

    typed = needs_typed_confirmation(plan)
    prompt = (f"A VM's config uses this GPU. Type {typed} to go ahead: " if typed
              else f"Apply these {len(plan.steps)} step(s)? [y/N] ")
    sys.stderr.write(prompt)
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer:
        sys.stderr.write("\n(no answer: end of input)\n")
        return False
    answer = answer.strip()
    return answer == typed if typed else answer.lower() in ("y", "yes")


def _show(event: Progress) -> None:
    if event.phase in ("apply", "verify"):
        return
    tail = f": {event.message}" if event.message else ""
    print(visible(f"  [{event.index}/{event.total}] {event.phase:<11} {event.title}{tail}"), flush=True)


def run_log(args: argparse.Namespace) -> int:
    host = _host(args)
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
            print(json.dumps(r, sort_keys=True))
        return 0
    if not records:
        print(f"no recorded changes ({host.audit.path})")
        return 0
    for r in records:  # records hold host text (titles name VMs and GPUs): shown with visible escapes
        user = visible((r.get("who") or {}).get("user", "?"))
        result = visible(r.get("result", "?"))
        if r.get("undone_by"):
            result += f", undone by {visible(r['undone_by'])}"
        rid = visible(r["id"])
        print(f"{rid}  {visible(r.get('when', '?'))}  {user:<8}  {visible(r.get('action', '?')):<11}  {result}")
        print(f"    {visible(r.get('title', ''))}")
        failed = r.get("failed")
        if failed:
            print(visible(f"    failed at step {failed.get('step')} ({failed.get('title')}): {failed.get('error')}"))
            if r.get("undone"):
                print(visible(f"    undone: {'; '.join(map(str, r['undone']))}"))
            for f in r.get("undo_failed") or []:
                print(f"    NOT undone: {visible(f)}")
        for note in r.get("notes") or []:
            print(f"    note: {visible(note)}")
        pending = ("applied", "failed, undo", "interrupted, undo", "in-progress")
        if r.get("undo") and not r.get("undone_by") and result.startswith(pending):
            if result.startswith("in-progress"):
                print("    never finished (the process died mid-change?): it may be half-applied")
            # undoing an undo puts the change back: say so, the plain `undo` walks back instead
            verb = "redo" if r.get("undoes") else "undo"
            print(f"    {verb}: nodeconsole undo {rid} --apply")
    return 0
