"""`nodeconsole doctor --fix ID…`: plan the fixes of those checks through the action session (plan →
confirm → apply → verify → audit → undo), like every other change. The read-only doctor is
console/commands/doctor.py; this registers `doctor` again with --fix plugged in."""
from __future__ import annotations

import argparse

from nodeconsole.actions.cli.change import change_args, run_request
from nodeconsole.console.cli_base import subcommand
from nodeconsole.console.commands import doctor
from nodeconsole.console.usage import UsageError


@subcommand("doctor", doctor.HELP)
def configure(p: argparse.ArgumentParser) -> None:
    doctor.configure_doctor(p, fix=_fix_args)


def _fix_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fix", nargs="+", metavar="ID",
                   help="plan the fixes of these checks (printed; made with --apply)")
    change_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.fix:
        ids = doctor.check_ids(args.fix)
        if args.json:
            raise UsageError("--json shows the report; it does not go with --fix")
        from nodeconsole.actions.session import DoctorFix

        return run_request(args, DoctorFix(ids, role=args.role))
    if args.apply or args.yes:
        raise UsageError("--apply and --yes go with --fix ID… (the checks whose fixes to make)")
    return doctor.run(args)
