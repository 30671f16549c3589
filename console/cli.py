"""The `nodeconsole` command. Without a subcommand it starts the console (Textual, imported lazily);
every subcommand runs headless on the same core. Every subcommand takes --demo, --root, --libvirt and
--replay (a capture, read-only).

This module is the base: the parser, the host flags and the read-only subcommands (console/commands/).
The subcommands that change the host live in actions/cli/ and register here when the full command
loads them (`main(..., more=...)`: screens/launch.py, the installed command, and
`python -m nodeconsole.actions.cli`, the headless one); `python -m nodeconsole.console.cli` has only
the read-only ones and names the full command when asked for another.
Bad arguments: one line on stderr, exit 2."""
from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence

from nodeconsole.console import __version__
from nodeconsole.console.argtypes import seconds
from nodeconsole.console.cli_base import (
    BASE,
    FULL_COMMAND,
    SUBCOMMANDS,
    _Parser,
    host_args,
    validate_host_args,
)
from nodeconsole.console.usage import EXIT_USAGE, UsageError

# Names of the subcommands console/commands/ registers (read-only). The subcommands are imported only
# when the command line names one (not to start the console, which saves ~50 ms before the first frame).
KNOWN_COMMANDS = frozenset({"snapshot", "demo", "doctor", "events", "capture", "diff", "exporter", "fleet",
                            "reboot-impact"})
# Names of the subcommands that change the host: actions/cli/ registers them into this parser (the full
# command). Named here only to say, when the base entry is asked for one, where it is.
CHANGE_COMMANDS = frozenset({"passthrough", "release", "log", "undo", "nccl", "pin", "mig", "vgpu", "nic", "gpu",
                             "place", "prepare"})
PLANNING_COMMANDS = frozenset({"place"})  # of those, the read-only ones (they use actions/ to plan)
# Registers more subcommands (calls `subcommand`): the change commands of actions/cli/.
Loader = Callable[[], None]
# The order `--help` lists the subcommands in (whichever module registers them).
ORDER = ("demo", "snapshot", "passthrough", "release", "log", "undo", "nccl", "pin", "mig", "vgpu", "doctor",
         "events", "capture", "nic", "diff", "exporter", "fleet", "reboot-impact", "gpu", "place", "prepare")


def build_parser(load: bool = True, more: Loader | None = None) -> argparse.ArgumentParser:
    """The parser; with `load`, every subcommand of console/commands/ and those `more` registers."""
    common = host_args()
    parser = _Parser(prog="nodeconsole", parents=[common],
                     description="Console for GPU virtualization hosts (KVM/libvirt + NVIDIA GPUs).")
    parser.add_argument("--version", action="version", version=f"nodeconsole {__version__}")
    parser.add_argument("--interval", type=seconds, default=1.0, metavar="S",
                        help="refresh interval of the console in seconds (default 1)")
    parser.add_argument("--fleet", metavar="URL", default=None,
                        help="the fleet console: every host exporting nodeconsole metrics to the Prometheus at URL")
    parser.add_argument("--theme", default=None,
                        help="console theme: dark, light or contrast (high contrast, reads well with 16 colours)")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    if load:
        _load_subcommands()
        if more is not None:
            more()
    registry = SUBCOMMANDS if more is not None else BASE
    for name in sorted(registry, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER)):
        help_text, configure = registry[name]
        sp = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        configure(sp)
    return parser


def _load_subcommands() -> None:
    # Each module registers its subcommands on import.
    import nodeconsole.console.commands.demo
    import nodeconsole.console.commands.snapshot  # noqa: F401
    for optional in ("nodeconsole.console.commands.doctor", "nodeconsole.console.commands.events",
                     "nodeconsole.console.commands.capture",
                     "nodeconsole.console.commands.diff", "nodeconsole.console.commands.exporter",
                     "nodeconsole.console.commands.fleet", "nodeconsole.console.commands.reboot_impact"):
        try:
            __import__(optional)
        except ModuleNotFoundError as e:
            if e.name != optional:
                raise


HOST_VALUE_FLAGS = ("--root", "--libvirt", "--replay")


def _host_flags_last(argv: list[str]) -> list[str]:
    """Move --demo/--root/--libvirt/--replay after everything else: argparse cannot take a subcommand's
    optional positional (e.g. `mig 2 --demo 7g.80gb`) once a flag has come between."""
    rest, host = [], []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest += argv[i:]
            break
        if a == "--demo" or any(a.startswith(f + "=") for f in HOST_VALUE_FLAGS):
            host.append(a)
        elif a in HOST_VALUE_FLAGS and i + 1 < len(argv):
            host += [a, argv[i + 1]]
            i += 1
        else:
            rest.append(a)
        i += 1
    return rest + host


ConsoleRunner = Callable[[argparse.Namespace], int]
# the console's own options that take a value: `nodeconsole --interval 2` is the console, not a command "2"
CONSOLE_VALUE_FLAGS = ("--interval", "--fleet", "--theme", *HOST_VALUE_FLAGS)


def _wants_subcommand(argv: list[str]) -> bool:
    """Whether the command line names a subcommand (or asks for help, which lists them): only then
    are the subcommands' parsers built. A word that is not an option nor an option's value is taken
    for one (an unknown word then gets argparse's error listing the commands)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help", "--") or not a.startswith("-"):
            return True
        if a in CONSOLE_VALUE_FLAGS:
            i += 1  # its value, whatever it looks like
        i += 1
    return False


def main(argv: Sequence[str] | None = None, console: ConsoleRunner | None = None,
         more: Loader | None = None) -> int:
    """The nodeconsole command. `console` runs the interactive console when no subcommand is given:
    the UI package plugs it in (screens/launch.py is the installed command), so the core never imports
    the UI. Without it only the subcommands work. `more` registers the subcommands that change the host
    (actions/cli/); without it they are refused with a line naming the full command."""
    argv = _host_flags_last(list(sys.argv[1:] if argv is None else argv))
    try:
        # Without a subcommand word (and without --help, which lists them) the console starts:
        # don't import every subcommand for that.
        wants = _wants_subcommand(argv)
        if wants and more is None:
            _refuse_change_command(argv)
        parser = build_parser(load=wants, more=more)
        args = parser.parse_args(argv)
        if args.interval <= 0:
            raise UsageError("--interval must be positive")
        if args.command is None:
            if console is None:
                raise UsageError("the interactive console is started by the `nodeconsole` command "
                                 "(python -m nodeconsole.screens.launch); give a subcommand here")
            validate_host_args(args)  # usage errors before the screen opens
            return console(args)
        with _visible_output():
            return int(args.func(args) or 0)
    except UsageError as e:
        from nodeconsole.console.hosttext import visible

        print(f"nodeconsole: error: {visible(e)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def _refuse_change_command(argv: list[str]) -> None:
    """The base entry asked for a subcommand that changes the host: say where it is (UsageError)."""
    name = _command_word(argv)
    if name in CHANGE_COMMANDS:
        what = "plans with the changes' code" if name in PLANNING_COMMANDS else "changes the host"
        raise UsageError(f"`{name}` {what}: it is a command of the full {FULL_COMMAND}; "
                         f"this entry has the read-only commands: {', '.join(sorted(KNOWN_COMMANDS))}")


def _command_word(argv: list[str]) -> str | None:
    """The subcommand word of a command line (the first word that is not an option nor its value)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return None
        if not a.startswith("-"):
            return a
        if a in CONSOLE_VALUE_FLAGS:
            i += 1
        i += 1
    return None


@contextlib.contextmanager
def _visible_output() -> Iterator[None]:
    """While a subcommand runs, what it prints has control characters made visible: host text (names,
    plans, audit titles) never reaches the terminal as escape sequences (console/hosttext.py)."""
    from nodeconsole.console.hosttext import VisibleWriter

    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = VisibleWriter(saved[0]), VisibleWriter(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


if __name__ == "__main__":
    # `python -m nodeconsole.console.cli`: the read-only subcommands (every subcommand, headless:
    # nodeconsole.actions.cli; the console itself: nodeconsole.screens.launch)
    from nodeconsole.console.cli import main as _main

    sys.exit(_main())
