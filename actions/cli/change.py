"""The command line's adapter over the action session (actions/session.py): every change subcommand
(passthrough, release, undo, pin, mig, vgpu) turns its arguments into a request and calls `run_request`.

The plan is printed; nothing changes without --apply; with --apply the terminal is asked (the GPU address
to type when a VM's config holds the GPU) unless --yes. Exit status: 0 done or nothing to do, 1 refused /
cancelled / failed, 2 bad arguments (a RequestError).
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from nodeconsole.console.cli_base import seams_from_args
from nodeconsole.console.hosttext import lines as host_lines
from nodeconsole.console.hosttext import visible
from nodeconsole.console.usage import UsageError

if TYPE_CHECKING:  # the actions are imported when a command runs
    from nodeconsole.actions.plan import Plan
    from nodeconsole.actions.progress import Progress
    from nodeconsole.actions.session import ActionSession, Request


def change_args(p: argparse.ArgumentParser) -> None:
    """--apply and --yes, which every change subcommand takes."""
    p.add_argument("--apply", action="store_true", help="make the changes (default: only print the plan)")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation (for scripts)")


def allow_unhealthy_arg(p: argparse.ArgumentParser) -> None:
    """--allow-unhealthy, for the changes that put work on a GPU (actions/health_gate.py)."""
    p.add_argument("--allow-unhealthy", action="store_true",
                   help="go ahead on a GPU whose health verdict is unhealthy (the audit record says so)")


def session_for(args: argparse.Namespace) -> ActionSession:
    """The action session on the host that --demo/--root/--libvirt name."""
    from nodeconsole.actions.session import ActionSession

    return ActionSession.from_seams(seams_from_args(args))


def run_request(args: argparse.Namespace, request: Request, session: ActionSession | None = None) -> int:
    """Plan `request`, print the plan and, with --apply, apply it (asking unless --yes)."""
    from nodeconsole.actions.session import NothingToDo, RequestError, StepError

    session = session or session_for(args)
    try:
        plan = session.plan(request)
    except NothingToDo as e:
        print(e)
        return 0
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
            print(session.apply(plan).message)
        return 0
    if not args.apply:
        print("\nNothing was changed: add --apply to make these changes.")
        return 0
    print()
    result = session.apply(plan, confirm=None if args.yes else _ask, progress=_show)
    for warning in result.warnings:  # e.g. a lock left by a dead run, and the change it was making
        print(f"nodeconsole: warning: {warning}", file=sys.stderr)
    print(host_lines(result.message), file=sys.stdout if result.ok else sys.stderr)
    return 0 if result.ok else 1


def _ask(plan: Plan) -> bool:
    """Ask on the terminal: the GPU address to type when a VM config holds the GPU, else y/N."""
    from nodeconsole.actions.session import ActionSession

    typed = ActionSession.typed_confirmation(plan)
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
