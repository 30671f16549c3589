"""The subcommands that change the host (passthrough, release, log, undo, pin, mig, vgpu, nic, gpu,
nccl, doctor --fix), and `place`, which reads the host the way they plan on it: they register into the
base command line (console/cli.py) when `load` runs.

`main` is the full command without the interactive console: `python -m nodeconsole.actions.cli`
(headless, no Textual). The installed `nodeconsole` (screens/launch.py) loads them the same way."""
from __future__ import annotations

import sys
from collections.abc import Sequence

from nodeconsole.console import cli

MODULES = ("changes", "nccl", "pin", "mig", "vgpu", "nic", "gpu", "doctor_fix", "place", "prepare")


def load() -> None:
    """Register every change subcommand into console.cli's registry (each module does on import)."""
    for name in MODULES:
        __import__(f"{__name__}.{name}")


def main(argv: Sequence[str] | None = None, console: cli.ConsoleRunner | None = None) -> int:
    """The nodeconsole command with every subcommand; `console` runs the interactive console (the UI
    plugs it in: screens/launch.py)."""
    return cli.main(argv, console=console, more=load)


if __name__ == "__main__":
    sys.exit(main())
