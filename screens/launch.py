"""The installed `nodeconsole` command: the headless CLI (console/cli.py with the change subcommands of
actions/cli/) with the interactive console plugged in for the case without a subcommand. The UI depends
on the core, never the other way round: Textual is imported only when the console starts, so
`nodeconsole snapshot` stays light."""
from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence

from nodeconsole.actions.cli import main as cli_main
from nodeconsole.console.cli_base import seams_from_args


def run_console(args: argparse.Namespace) -> int:
    if getattr(args, "fleet", None):
        from nodeconsole.screens.fleet import run_fleet

        return run_fleet(args.fleet, theme=args.theme)
    # No cyclic garbage collection until the host console's first frame is drawn (screens/app.py
    # resume_gc): what start-up allocates lives as long as the console, and collecting over it costs
    # the first frame.
    gc.disable()
    try:
        return _run_host_console(args)
    finally:
        gc.enable()


def _run_host_console(args: argparse.Namespace) -> int:
    from nodeconsole.console.first_look import FirstLook
    from nodeconsole.console.usage import UsageError
    from nodeconsole.themes import resolve

    try:  # bad input changes nothing: before the first look (which may generate the demo host)
        resolve(args.theme)
    except ValueError as e:
        raise UsageError(str(e)) from None
    # The host's first, sysfs-only snapshot is taken from here, in a child process beside Textual's
    # import and start-up (console/first_look.py); the console prepares its own sources in its first
    # poll, after the first frame.
    # Not for a replay: opening a capture unpacks it into a scratch directory removed at exit, and the
    # child leaves without running exit handlers (the console opens it once, on the thread).
    first = FirstLook(lambda: seams_from_args(args), process=not getattr(args, "replay", None),
                      sysfs_factory=lambda: seams_from_args(args, sysfs_only=True))
    from nodeconsole.screens.app import run_app

    return run_app(first, interval=args.interval, theme=args.theme)


def main(argv: Sequence[str] | None = None) -> int:
    return cli_main(argv, console=run_console)


if __name__ == "__main__":
    sys.exit(main())
