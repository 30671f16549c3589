"""`nodeconsole demo reset`: throw the demo host's state away and generate it afresh."""
from __future__ import annotations

import argparse
import sys

from nodeconsole.console.cli import UsageError, subcommand


@subcommand("demo", "manage the bundled demo host (demo reset)")
def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=["reset"], help="reset: regenerate the demo host's state")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nodeconsole.console.seams import reset_demo

    if getattr(args, "root", None):
        raise UsageError("demo reset works on the demo host, not on --root")
    if getattr(args, "libvirt", None) is not None:
        raise UsageError("demo reset takes no --libvirt (the demo host has its own libvirt)")
    try:
        state = reset_demo()
    except OSError as e:  # e.g. a symbolic link planted as the lock file: refused, nothing touched
        print(f"nodeconsole: error: cannot reset the demo host: {e.strerror or e}", file=sys.stderr)
        return 1
    # The audit log describes changes to the host that was just thrown away: its undo records
    # would target devices and configs that no longer exist.
    from nodeconsole.actions.audit import AUDIT_NAME

    log = state / AUDIT_NAME
    if log.exists():
        log.unlink()
    print(f"demo host regenerated in {state} (audit log cleared)")
    return 0
