"""How actions run host programs (driverctl, modprobe): argv lists, never a shell. The demo host has
its own driverctl that keeps its overrides under the demo root, and nothing else."""
from __future__ import annotations

import shutil
import subprocess

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
    """The demo host has no programs of its own: running the machine's driverctl would change the
    real host, so persistence on the demo goes through files under its root."""

    def which(self, name: str) -> str | None:
        return None

    def run(self, argv: list[str]) -> tuple[int, str]:
        return 127, f"{argv[0]}: not available on this host"


class DemoCommands(NoCommands):
    """The demo host's programs: a driverctl that keeps its saved overrides under the demo root
    (etc/driverctl.d/pci-ADDR, as driverctl does under /etc), so persistence on the demo is per
    device, exactly like a real host with driverctl. Nothing of the machine's own is run."""

    def __init__(self, root: Root) -> None:
        self.root = root

    def which(self, name: str) -> str | None:
        return "driverctl (demo)" if name == "driverctl" else None

    def run(self, argv: list[str]) -> tuple[int, str]:
        from nodeconsole.console.pciaddr import parse_pci_address

        if len(argv) < 3 or argv[0] != "driverctl" or argv[1] not in ("set-override", "unset-override"):
            return 127, f"{argv[0]}: not available on the demo host"
        try:
            address = parse_pci_address(argv[2])
        except ValueError as e:
            return 2, f"driverctl: {e}"
        conf = self.root.p(f"etc/driverctl.d/pci-{address}")
        if argv[1] == "set-override":
            if len(argv) < 4:
                return 2, "driverctl: set-override needs a driver"
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(argv[3] + "\n")
        elif conf.exists():
            conf.unlink()
            for d in (conf.parent, conf.parent.parent):  # leave the demo root as it was generated
                try:
                    d.rmdir()
                except OSError:
                    break
        else:
            return 1, f"driverctl: no override for {address}"
        return 0, ""
