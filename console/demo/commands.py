"""The demo host's programs: a simulated driverctl. It satisfies the `CommandRunner` protocol
(actions/host_seams.py) that the real host's `Commands` (actions/commands.py) implements."""
from __future__ import annotations

from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.root import Root


class DemoCommands:
    """The demo host's programs: a driverctl that keeps its saved overrides under the demo root
    (etc/driverctl.d/pci-ADDR, as driverctl does under /etc), so persistence on the demo is per
    device, exactly like a real host with driverctl. Nothing of the machine's own is run: running the
    machine's driverctl would change the real host."""

    def __init__(self, root: Root) -> None:
        self.root = root

    def which(self, name: str) -> str | None:
        return "driverctl (demo)" if name == "driverctl" else None

    def run(self, argv: list[str]) -> tuple[int, str]:
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
