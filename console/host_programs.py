"""How actions run host programs (driverctl, modprobe): argv lists, never a shell. `Commands` is the real
implementation of the `CommandRunner` seam (actions/host_seams.py); a captured tree gets `NoCommands`. The
demo host's simulated driverctl (console/demo/commands.py's `DemoCommands`) satisfies the same protocol."""
from __future__ import annotations

import shutil
import subprocess


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
