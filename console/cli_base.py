"""What every subcommand builds on, in console/ or actions/cli/: the parser that says a bad argument in
one line, the host flags (--demo, --root, --libvirt, --replay) and the seams they choose, and the
registry subcommands add themselves to (`subcommand`). console/cli.py builds the command line from it
and imports the subcommands; they import this module, not the command line.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from nodeconsole.console.usage import UsageError

if TYPE_CHECKING:
    from nodeconsole.console.seams import Seams

class _Parser(argparse.ArgumentParser):
    """One line on a bad argument; no abbreviations (`--allow` must never be taken for one of the
    `--allow-…` flags)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        raise UsageError(message)


def host_args() -> _Parser:
    """A parent parser with --demo, --root, --libvirt and --replay, which every subcommand takes."""
    p = _Parser(add_help=False)
    g = p.add_argument_group("host")
    g.add_argument("--demo", action="store_true", default=argparse.SUPPRESS,
                   help="use the bundled simulated host")
    g.add_argument("--root", metavar="DIR", default=argparse.SUPPRESS,
                   help="read sysfs/procfs below DIR instead of / (a captured host)")
    g.add_argument("--libvirt", metavar="URI", default=argparse.SUPPRESS,
                   help="libvirt URI (default qemu:///system; test:///ABS/node.xml for the test driver)")
    g.add_argument("--replay", metavar="FILE", default=argparse.SUPPRESS,
                   help="open a capture (nodeconsole capture) read-only instead of a host")
    return p


Configure = Callable[[argparse.ArgumentParser], None]
# Subcommands registered by other modules: name → (help, configure(parser)); configure sets the parser's
# `func` default: run(args) -> int. A later registration of a name replaces it (actions/cli/ registers
# `doctor` again with --fix); BASE keeps what console/ registered, which the base entry builds from.
SUBCOMMANDS: dict[str, tuple[str, Configure]] = {}
BASE: dict[str, tuple[str, Configure]] = {}


def subcommand(name: str, help: str) -> Callable[[Configure], Configure]:
    """Decorator: register `configure(parser)`; the parser's `func` default runs it."""
    def wrap(configure: Configure) -> Configure:
        SUBCOMMANDS[name] = (help, configure)
        if configure.__module__.startswith("nodeconsole.console."):
            BASE.setdefault(name, (help, configure))
        return configure
    return wrap


FULL_COMMAND = "nodeconsole (python -m nodeconsole.actions.cli without the console)"

def seams_from_args(args: argparse.Namespace, sysfs_only: bool = False) -> Seams:
    """Turn --demo/--root/--libvirt/--replay into Seams (validated: bad input is a UsageError).
    `sysfs_only`: enough for a sysfs-only look (the demo's simulated NVML is not loaded)."""
    from nodeconsole.console.seams import demo_host, real_host, replay_host

    validate_host_args(args)
    if getattr(args, "replay", None):
        return replay_host(args.replay)
    uri = getattr(args, "libvirt", None)
    if getattr(args, "demo", False):
        return demo_host(libvirt_uri=uri, sysfs_only=sysfs_only)
    return real_host(getattr(args, "root", None) or "/", uri)


def validate_host_args(args: argparse.Namespace) -> None:
    """The cheap checks of --demo/--root/--libvirt/--replay (UsageError), without opening anything."""
    import os

    demo = getattr(args, "demo", False)
    root = getattr(args, "root", None)
    uri = getattr(args, "libvirt", None)
    replay = getattr(args, "replay", None)
    if replay is not None:
        if demo or root is not None or uri is not None:
            raise UsageError("--replay cannot be combined with --demo, --root or --libvirt (the capture is the host)")
        if not replay.strip():
            raise UsageError("--replay needs a capture file")
        if not os.path.isfile(replay):
            raise UsageError(f"--replay {replay}: no such file")
    if demo and root:
        raise UsageError("--demo and --root are exclusive")
    if uri is not None and not uri.strip():
        raise UsageError("--libvirt needs a URI")
    if demo and uri is not None:
        # the demo's VMs live in its own node file; another URI would let demo actions (no root
        # check) change a real libvirt
        raise UsageError("--libvirt cannot be combined with --demo (the demo host has its own libvirt)")
    if demo:
        from nodeconsole.console.seams import check_demo_state_dir

        check_demo_state_dir()  # a directory the demo did not make is refused before anything is generated
    if root is not None:
        if not os.path.isdir(root):
            raise UsageError(f"--root {root}: not a directory")
        if not (os.path.isdir(os.path.join(root, "sys")) or os.path.isdir(os.path.join(root, "proc"))):
            raise UsageError(f"--root {root}: no sys/ or proc/ below it")
