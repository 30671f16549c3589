"""How actions run host programs (driverctl, modprobe): argv lists, never a shell. `Commands` is the real
implementation of the `CommandRunner` seam (console/host_seams.py); a captured tree gets `NoCommands`. The
demo host's simulated driverctl (console/demo/commands.py's `DemoCommands`) satisfies the same protocol."""
from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodeconsole.console.kernel_writer import Kernel
    from nodeconsole.console.root import Root


class Commands:
    """Runs host programs (driverctl, modprobe) as argv lists, never through a shell."""

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def run(self, argv: list[str]) -> tuple[int, str]:
        """(exit status, combined output)."""
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=120, shell=False)
        except FileNotFoundError as e:
            return 127, str(e)
        except subprocess.TimeoutExpired:
            return 124, f"{argv[0]} did not finish in 120 s"
        return out.returncode, (out.stdout + out.stderr).strip()


class NoCommands(Commands):
    """A host with no programs of its own (a captured tree): running the machine's driverctl would
    change the machine, not the host being looked at."""

    def which(self, name: str) -> str | None:
        return None

    def run(self, argv: list[str]) -> tuple[int, str]:
        return 127, f"{argv[0]}: not available on this host"


class ThisMachine:
    """The write seams (`HostWrites`) of the machine we run on: its kernel attributes and its programs."""

    def kernel(self, root: Root) -> Kernel:
        from nodeconsole.console.kernel_writer import Kernel

        return Kernel(root)

    def commands(self, root: Root) -> Commands:
        return Commands()


class CapturedTree(ThisMachine):
    """The write seams of a captured tree (`--root`): its files through the kernel writer, none of this
    machine's programs (they would change this machine, not the host being looked at)."""

    def commands(self, root: Root) -> Commands:
        return NoCommands()
