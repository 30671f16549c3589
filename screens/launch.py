"""The installed `nodeconsole` command: the headless CLI (console/cli.py) with the interactive console
plugged in for the case without a subcommand. The UI depends on the core, never the other way round:
Textual is imported only when the console starts, so `nodeconsole snapshot` stays light."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nodeconsole.console.cli import main as cli_main
from nodeconsole.console.cli import seams_from_args


def run_console(args: argparse.Namespace) -> int:
    if getattr(args, "fleet", None):
        from nodeconsole.screens.fleet import run_fleet

        return run_fleet(args.fleet, theme=args.theme)
    from nodeconsole.screens.app import run_app

    # Preparing the host (the demo's generation check, opening sources) happens in the first poll,
    # overlapping Textual's start-up.
    return run_app(lambda: seams_from_args(args), interval=args.interval, theme=args.theme)


def main(argv: Sequence[str] | None = None) -> int:
    return cli_main(argv, console=run_console)


if __name__ == "__main__":
    sys.exit(main())
