"""`nodeconsole demo reset`: throw the demo host's state away and generate it afresh."""
from __future__ import annotations

import argparse

from nodeconsole.console.cli import UsageError, subcommand


@subcommand("demo", "manage the bundled demo host (demo reset)")
def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=["reset"], help="reset: regenerate the demo host's state")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nodeconsole.console.demo.state import reset_demo

    if getattr(args, "root", None):
        raise UsageError("demo reset works on the demo host, not on --root")
    host = reset_demo()
    # The audit log describes changes to the host that was just thrown away: its undo records
    # would target devices and configs that no longer exist.
    from nodeconsole.actions.audit import AUDIT_NAME

    log = host.root.parent / AUDIT_NAME
    if log.exists():
        log.unlink()
    print(f"demo host regenerated in {host.root.parent} (audit log cleared)")
    return 0
