"""The write seams of a host, as protocols: what actions (through actions/host.py's ActionHost) call on them.

Implementations satisfy them structurally (none inherits from these):
- `KernelWriter`: console/kernel_writer.py's `Kernel` (the real host, below a root) and console/demo/kernel.py's
  `SimulatedKernel` (the demo host, which also changes its tree the way Linux would);
- `CommandRunner`: console/host_programs.py's `Commands` (this machine's programs) and `NoCommands` (a captured
  tree), and console/demo/commands.py's `DemoCommands` (the demo's simulated driverctl);
- `DomainStore` (libvirt's `VmBackend`, console/vms/backend.py): console/vms/libvirt_domains.py's
  `LibvirtDomainConfig` (a libvirt connection) and
  console/demo/node_domains.py's `NodeFileDomainConfig` (the demo's libvirt test-driver node file),
  both through `DomainConfig`;
- `HostWrites`: makes a kernel writer and a command runner for a root. `Seams.writes` (console/seams.py)
  holds every host's: this machine's (`ThisMachine`: `Kernel` and `Commands`), a captured tree's
  (`CapturedTree`: `Kernel` and `NoCommands`; the tree is read-only), a replay's, the demo's
  (console/demo/writes.py's `SimulatedWrites`), each chosen once by console/seams.py's factories.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from nodeconsole.console.vms.backend import VmBackend

if TYPE_CHECKING:
    from nodeconsole.console.root import Root


class KernelWriter(Protocol):
    """Writes kernel attribute files (sysfs/procfs). An implementation may also offer
    `load_module(name)`; actions look it up with getattr and run `modprobe` otherwise."""

    def write(self, path: str, text: str) -> None:
        """One write() of `text` to the attribute at root-relative `path`, as `echo` does. A missing
        attribute is FileNotFoundError, never a new file."""
        ...


class CommandRunner(Protocol):
    """Runs host programs (driverctl, modprobe, nvidia-smi) as argv lists, never through a shell."""

    def which(self, name: str) -> str | None:
        """Where the program is, None when the host has no such program."""
        ...

    def run(self, argv: list[str]) -> tuple[int, str]:
        """(exit status, combined output)."""
        ...


class HostWrites(Protocol):
    """Makes a host's write seams for its root (a fresh kernel writer per ActionHost)."""

    def kernel(self, root: Root) -> KernelWriter: ...

    def commands(self, root: Root) -> CommandRunner: ...


class DomainStore(VmBackend, Protocol):
    """libvirt's VM backend (console/vms/backend.py's `VmBackend`) with its domain-XML methods: what
    libvirt's implementation of the backend's operations is built on (console/vms/libvirt_domains.py,
    console/vms/libvirt_pins.py) and what tests read. No action calls them (actions/ speak `VmBackend`
    only, tests/actions/test_vm_backend_neutral.py); a second hypervisor implements `VmBackend` alone."""

    def xml(self, vm: str) -> str:
        """libvirt-only: the domain's persistent (inactive) XML. DomainConfigError for an unknown domain."""
        ...

    def define(self, vm: str, xml: str) -> None:
        """libvirt-only: replace the domain's persistent XML with `xml`."""
        ...

    def edit(self, vm: str, change: Callable[[str], str]) -> None:
        """libvirt-only: define the domain again with `change(xml)` when that differs from its XML."""
        ...
