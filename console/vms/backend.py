"""The VM backend: a host's VMs read and changed in terms of the VM model (console/model.py `Vm`), not of
one hypervisor's formats. console/seams.py holds a factory of it (`Seams.vm_backend`); the collector reads
VMs through its `reader()`, the actions' host-device operations (passthrough, release, NIC pairing) go
through its host-device methods.

libvirt implements it (console/vms/libvirt_domains.py's `DomainConfig`: a libvirt connection, and the
demo's test-driver node file); a second hypervisor (Proxmox VE) implements it again. What an action still
does in libvirt's own terms (domain XML: pins, NUMA, mdevs, the exact put-back of a removed <hostdev>) is
on console/host_seams.py's `DomainStore`, the libvirt-only extension of this protocol.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from nodeconsole.console.model import Vm
    from nodeconsole.console.sources.types import LibvirtData


class VmReader(Protocol):
    """Reads every VM of the host, poll after poll (a long-lived, caching reader: the collector's)."""

    version: str  # the hypervisor's version on the open connection ("" before one)

    def poll(self) -> LibvirtData:
        """One reading of every VM, sorted by name; SourceError (with the reason) when unreachable."""
        ...

    def invalidate(self, uuid: str | None = None) -> None:
        """Forget what is cached of one VM (or all): a change was made."""
        ...

    def close(self) -> None: ...


class VmBackend(Protocol):
    """A host's VM definitions: list, read one, add/remove a PCI host device, verify, save and restore a
    definition exactly. Errors are DomainConfigError (console/vms/libvirt_domains.py) with the reason."""

    label: str  # what it is, for messages ("libvirt", "node file")
    one_state: bool  # True: the running and the persistent state are one (the demo's node file)

    def reader(self) -> VmReader:
        """A reader of every VM of this host (the collector keeps one)."""
        ...

    def names(self) -> list[str]:
        """The names of every defined VM."""
        ...

    def vm(self, name: str) -> Vm | None:
        """One VM as the model holds it; None when the host has no such VM."""
        ...

    def pci_hostdevs(self, vm: str) -> set[str]:
        """PCI addresses of the VM's persistent PCI host devices (what verify compares)."""
        ...

    def add_hostdev(self, vm: str, address: str, managed: bool = True, index: int | None = None) -> None:
        """Give the VM the host PCI function `address` (persistently); `index` (its place among the VM's
        host devices) is a hint that lets an undo put a removed device back where it was."""
        ...

    def remove_hostdev(self, vm: str, address: str) -> None: ...

    def hostdev_place(self, vm: str, address: str) -> tuple[int, bool] | None:
        """(index among the VM's host devices, managed) of the PCI host device for `address`."""
        ...

    def save(self, vm: str) -> str:
        """The VM's persistent definition as an opaque token (libvirt: its inactive XML)."""
        ...

    def restore(self, vm: str, token: str) -> None:
        """Put back exactly the definition `save` returned."""
        ...

    def close(self) -> None: ...

    # -- run state (gpu reset: stop the VMs that hold a GPU, start them again) -------------------------
    def run_state(self, vm: str) -> str:
        """The VM's state as the model names it ("running", "shut off", "paused", ...)."""
        ...

    def shutdown(self, vm: str) -> None:
        """Ask the guest to shut down (ACPI); returns at once, the VM stops later or never."""
        ...

    def destroy(self, vm: str) -> None:
        """Stop the VM at once (power off)."""
        ...

    def start(self, vm: str) -> None:
        """Start a defined VM that is shut off."""
        ...
