"""The VM backend: a host's VMs read and changed in terms of the VM model (console/model.py `Vm`), not of
one hypervisor's formats. console/seams.py holds a factory of it (`Seams.vm_backend`); the collector reads
VMs through its `reader()`; every action that changes a VM's definition (passthrough, release, NIC pairing,
vGPU, pinning) goes through its methods (tests/actions/test_vm_backend_neutral.py: a dict serves them).

libvirt implements it (console/vms/libvirt_domains.py's `DomainConfig`: a libvirt connection, and the
demo's test-driver node file); a second hypervisor (Proxmox VE) implements it again. Actions speak to it
in these terms only (vCPU pins, memory policy, mdevs, a VM's shape -- console/vms/shape.py `VmShape` --, a
removed device's or a whole definition's saved form as an opaque token);
libvirt's domain XML (`xml`/`define`/`edit`, console/host_seams.py's `DomainStore`) stays below it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from nodeconsole.console.libvirt_xml import parse_libvirt_set
from nodeconsole.console.vms.shape import GuestCell, VmShape

__all__ = ["GuestCell", "LIVE_AND_CONFIG", "PinScopes", "SavedHostdev", "VmBackend", "VmConfigError", "VmPins",
           "VmReader", "VmShape"]

if TYPE_CHECKING:
    from nodeconsole.console.model import Vm
    from nodeconsole.console.sources.types import LibvirtData


class VmConfigError(Exception):
    """A VM's definition cannot be read or changed; the message says why."""


# VmPins' comparable form: (vCPU → CPUs, emulator CPUs, (memory mode, nodes))
PinSets = tuple[dict[int, frozenset[int]], frozenset[int] | None, tuple[str, frozenset[int]] | None]


@dataclass(frozen=True)
class VmPins:
    """A VM's pins in one scope (live or its definition), CPU sets as the hypervisor wrote them ("0-3,^2"),
    so writing back what was read gives back the very same text."""
    vcpus: tuple[tuple[int, str], ...] = ()  # every pinned vCPU; a vCPU not listed has no pin
    emulator: str | None = None  # the emulator threads' CPU set
    numa: tuple[str | None, str] | None = None  # memory policy (mode, nodeset); mode None: strict, unsaid

    def sets(self, every: frozenset[int] = frozenset()) -> PinSets:
        """Comparable form: CPU sets parsed; a pin covering `every` CPU counts as no pin."""
        def norm(text: str | None) -> frozenset[int] | None:
            cpus = frozenset(parse_libvirt_set(text)) if text else frozenset()
            return None if not cpus or (every and cpus >= every) else cpus
        vcpus = {v: s for v, text in self.vcpus if (s := norm(text)) is not None}
        numa = (self.numa[0] or "strict", frozenset(parse_libvirt_set(self.numa[1]))) if self.numa else None
        return vcpus, norm(self.emulator), numa


LIVE_AND_CONFIG = "live now and in the config (kept at the next start)"  # where one pin edit lands


@dataclass(frozen=True)
class PinScopes:
    """Where a VM's pins are set: the scopes ("live", "config"), whether the running VM changes now, and
    what a plan says about it ("VM x is running: " + `says`)."""
    scopes: tuple[str, ...]
    live: bool
    says: str


@dataclass(frozen=True)
class SavedHostdev:
    """A host device as the VM's definition held it, taken out: an opaque token (its exact form there)
    and its place among the definition's devices; `restore_hostdev` puts exactly that back there."""
    token: str
    place: int | None = None


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
    definition exactly; pins, memory policy, mdevs. Errors are VmConfigError with the reason."""

    label: str  # what it is, for messages ("libvirt", "node file")
    one_state: bool  # True: the running and the persistent state are one (the demo's node file)
    # True: pins are the whole VM process's (Proxmox VE's `affinity`): `set_pins` takes every vCPU and the
    # emulator on one CPU set only, and a pin plan must propose that (libvirt: False, per-vCPU pins)
    whole_process_pins: bool
    guest_threads: bool  # its definition can give the guest threads per core (libvirt's <topology threads>)
    hypervisor: str  # "libvirt" | "proxmox": whose tool the hints name (console/vms/hints.py)

    def command_hint(self, kind: str, vm: str, **args: str) -> str:
        """What an admin types for `kind` on `vm` in this hypervisor's tool (console/vms/hints.py's kinds):
        text for a plan's fix or step, never run."""
        ...

    def pin_commands(self, vm: str, target: VmPins, current: VmPins, live: bool, memory_policy: bool,
                     all_cpus: str) -> tuple[str, ...]:
        """The commands an admin would type to make the pins `target` (from `current`; `all_cpus`: the
        host's CPU list, for an unpin). VmConfigError when this hypervisor cannot hold such pins."""
        ...

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

    # -- pins, memory policy, mdev host devices, a removed device's exact put-back -----------------------
    # (what actions/pin_steps.py, actions/vgpu.py and actions/vm_hostdev.py change)

    def pin_scopes(self, vm: str, running: bool) -> PinScopes:
        """Where `vm`'s pins go (`running`: the snapshot's view, for a backend without a live state).
        VmConfigError when the backend cannot say whether the VM runs."""
        ...

    def every_cpu(self) -> frozenset[int]:
        """The host CPUs a live pin to all of counts as no pin (empty: no such rule)."""
        ...

    def pins(self, vm: str, live: bool) -> VmPins:
        """The VM's pins: live (the running VM; VmConfigError where the backend has no live state) or in
        its definition."""
        ...

    def set_pins(self, vm: str, pins: VmPins, live: bool, memory_policy: bool) -> None:
        """Make the VM's pins exactly `pins` (live, or in its definition); `memory_policy` False leaves the
        memory policy alone. A definition edit changes only the pins: set back, it is byte for byte as it was."""
        ...

    def mdev_hostdevs(self, vm: str) -> set[str]:
        """UUIDs (lower case) of the mediated devices (vGPUs) the VM's definition holds."""
        ...

    def add_mdev(self, vm: str, uuid: str, parent: str | None = None, type_id: str | None = None) -> None:
        """Give the VM the mediated device `uuid` (persistently); `parent` and `type_id` (the mdev's GPU and
        type, when known) are for a hypervisor that creates the mdev itself."""
        ...

    def remove_mdev(self, vm: str, uuid: str) -> None: ...

    def saved_hostdev(self, vm: str, address: str) -> SavedHostdev | None:
        """The PCI host device for `address` as the definition holds it (None: it holds none)."""
        ...

    def check_saved_hostdev(self, address: str, token: str) -> str:
        """`token` (e.g. read back from an audit log) checked to be one saved host device of `address`;
        the token to restore. VmConfigError saying what is wrong otherwise."""
        ...

    def restore_hostdev(self, vm: str, address: str, saved: SavedHostdev) -> None:
        """Put the saved host device back into the definition exactly as it was, at its place."""
        ...

    def hostdev_text(self, address: str, managed: bool, token: str | None = None) -> str:
        """The host device as a plan shows it: the saved one (`token`), else a new one for `address`."""
        ...

    def close(self) -> None: ...

    # -- size and memory layout; the whole definition's exact put-back (actions/shape_steps.py) ---------

    def shape(self, vm: str) -> VmShape:
        """The VM's size and memory layout as its persistent definition says (console/vms/shape.py)."""
        ...

    def set_shape(self, vm: str, shape: VmShape) -> None:
        """Make the definition's size and memory layout exactly `shape` (the VM shut off), nothing else of
        it changed; VmConfigError with the reason (a bad shape: nothing written)."""
        ...

    def shape_commands(self, vm: str, shape: VmShape) -> tuple[str, ...]:
        """The commands an admin would type to make the definition's shape `shape` (virsh, qm set): text
        for a plan's step, never run. VmConfigError when this hypervisor cannot hold the shape."""
        ...

    def check_saved(self, vm: str, token: str) -> str:
        """`token` (e.g. read back from an audit log) checked to be a saved definition of `vm` (libvirt: a
        domain XML of the same name and UUID); the token to `restore`. VmConfigError otherwise."""
        ...

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
