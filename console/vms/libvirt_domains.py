"""Read-write libvirt domain configuration (the `DomainStore` seam, console/host_seams.py), behind one
interface with two implementations.

- `LibvirtDomainConfig`: a libvirt connection. Host devices go through `attachDeviceFlags` /
  `detachDeviceFlags` with VIR_DOMAIN_AFFECT_CONFIG (the persistent config; a running guest sees the
  change at its next start); drivers without device attach (the test driver) get `defineXML` of the
  edited inactive XML instead, as does every other edit.
- `NodeFileDomainConfig` (console/demo/node_domains.py): the demo host's libvirt test-driver node file.

Every edit of a domain's XML is console/domain_edits.py's (one splicing editor).
"""
from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodeconsole.console.domain_edits import (
    add_mdev_hostdev,
    add_pci_hostdev,
    hostdev_place,
    put_hostdev,
    remove_mdev_hostdev,
    remove_pci_hostdev,
    take_hostdev,
)
from nodeconsole.console.libvirt_xml import parse_domain
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.vms import libvirt_pins, libvirt_shape
from nodeconsole.console.vms.backend import PinScopes, SavedHostdev, VmConfigError, VmPins, VmShape
from nodeconsole.console.vms.hints import command_hint
from nodeconsole.console.vms.shape_hints import virsh_shape_commands

if TYPE_CHECKING:
    from nodeconsole.console.model import Vm
    from nodeconsole.console.sources.libvirt_src import LibvirtSource

_ERR_NO_SUPPORT = 3  # libvirt.VIR_ERR_NO_SUPPORT: the driver lacks the call (test driver: attach)
_ERR_NO_DOMAIN = 42
_AFFECT_CONFIG = 2  # libvirt.VIR_DOMAIN_AFFECT_CONFIG
_XML_INACTIVE = 2  # libvirt.VIR_DOMAIN_XML_INACTIVE


DomainConfigError = VmConfigError  # a domain's configuration cannot be read or changed (the backend's error)


def hostdev_xml(address: str, managed: bool = True) -> str:
    """The <hostdev> element for host PCI function `address`."""
    dom, bus, rest = parse_pci_address(address).split(":")
    slot, fn = rest.split(".")
    return (f"<hostdev mode='subsystem' type='pci' managed='{'yes' if managed else 'no'}'><source>"
            f"<address domain='0x{dom}' bus='0x{bus}' slot='0x{slot}' function='0x{fn}'/>"
            f"</source></hostdev>")


class DomainConfig:
    """The persistent configuration of a host's domains: libvirt's VM backend (console/vms/backend.py),
    its XML methods (`xml`, `define`, `edit`) libvirt-only."""

    label = "libvirt"
    one_state = False  # True: the running and the persistent state are one (the demo's node file)
    whole_process_pins = False  # libvirt pins each vCPU and the emulator apart
    guest_threads = True
    hypervisor = "libvirt"
    reader_uri: str | None = None  # the libvirt URI the VMs are read through (`reader()`)

    def reader(self) -> LibvirtSource:
        """A reader of every domain (console/sources/libvirt_src.py), through `reader_uri`."""
        from nodeconsole.console.sources.libvirt_src import LibvirtSource

        return LibvirtSource(self.reader_uri)

    def vm(self, name: str) -> Vm | None:
        """One domain as the model holds it (read through a reader of its own); None when unknown."""
        source = self.reader()
        try:
            return next((v for v in source.poll().vms if v.name == name), None)
        finally:
            source.close()

    def save(self, vm: str) -> str:
        """The domain's persistent XML: an exact definition to `restore`."""
        return self.xml(vm)

    def restore(self, vm: str, token: str) -> None:
        if token != self.xml(vm):
            self.define(vm, token)

    def names(self) -> list[str]:
        raise NotImplementedError

    def xml(self, vm: str) -> str:
        """The domain's persistent (inactive) XML. DomainConfigError for an unknown domain."""
        raise NotImplementedError

    def define(self, vm: str, xml: str) -> None:
        """Replace the domain's persistent XML with `xml`."""
        raise NotImplementedError

    def add_hostdev(self, vm: str, address: str, managed: bool = True, index: int | None = None) -> None:
        """Add a PCI hostdev; `index` (its place among the domain's <hostdev> elements) is a hint that
        lets an undo put a removed device back where it was."""
        self.edit(vm, lambda x: add_pci_hostdev(x, address, managed=managed, index=index))

    def remove_hostdev(self, vm: str, address: str) -> None:
        self.edit(vm, lambda x: remove_pci_hostdev(x, address))

    def edit(self, vm: str, change: Callable[[str], str]) -> None:
        old = self.xml(vm)
        new = change(old)
        if new != old:
            self.define(vm, new)

    def pci_hostdevs(self, vm: str) -> set[str]:
        return {h.address for h in parse_domain(self.xml(vm)).hostdevs if h.type == "pci" and h.address}

    def hostdev_place(self, vm: str, address: str) -> tuple[int, bool] | None:
        """(index among the domain's <hostdev> elements, managed) of the PCI hostdev for `address`."""
        return hostdev_place(self.xml(vm), address)

    def run_state(self, vm: str) -> str:
        raise NotImplementedError

    def shutdown(self, vm: str) -> None:
        raise NotImplementedError

    def destroy(self, vm: str) -> None:
        raise NotImplementedError

    def start(self, vm: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    # -- pins, memory policy, mdevs, a removed device's exact put-back (console/vms/backend.py) ---------

    def pin_scopes(self, vm: str, running: bool) -> PinScopes:
        return libvirt_pins.stored_scopes(running, self.label, self.one_state)

    def every_cpu(self) -> frozenset[int]:
        return frozenset()

    def command_hint(self, kind: str, vm: str, **args: str) -> str:
        return command_hint("libvirt", kind, vm, **args)

    def pin_commands(self, vm: str, target: VmPins, current: VmPins, live: bool, memory_policy: bool,
                     all_cpus: str) -> tuple[str, ...]:
        return libvirt_pins.pin_commands(vm, target, current, live, memory_policy, all_cpus)

    def shape_commands(self, vm: str, shape: VmShape) -> tuple[str, ...]:
        return virsh_shape_commands(vm, self.shape(vm), shape)

    def pins(self, vm: str, live: bool) -> VmPins:
        if live:
            raise VmConfigError("live pins need a libvirt connection")
        return libvirt_pins.read_xml_state(self.xml(vm))

    def set_pins(self, vm: str, pins: VmPins, live: bool, memory_policy: bool) -> None:
        if live:
            raise VmConfigError("live pins need a libvirt connection")
        self._edit_checked(vm, lambda xml: libvirt_pins.edit_pins(xml, pins, memory_policy))

    def _edit_checked(self, vm: str, change: Callable[[str], str]) -> None:
        try:
            self.edit(vm, change)
        except ValueError as e:
            raise VmConfigError(f"the config of {vm} cannot be edited: {e}") from None

    def mdev_hostdevs(self, vm: str) -> set[str]:
        return {h.uuid for h in parse_domain(self.xml(vm)).hostdevs if h.type == "mdev" and h.uuid}

    def add_mdev(self, vm: str, uuid: str, parent: str | None = None, type_id: str | None = None) -> None:
        self._edit_checked(vm, lambda x: add_mdev_hostdev(x, uuid))  # libvirt: the mdev exists already

    def remove_mdev(self, vm: str, uuid: str) -> None:
        self._edit_checked(vm, lambda x: remove_mdev_hostdev(x, uuid))

    def saved_hostdev(self, vm: str, address: str) -> SavedHostdev | None:
        """The <hostdev> of `address` as the store edits the definition (the text `edit` hands over, whose
        indentation can differ from `xml()`'s), read through an edit that changes nothing."""
        seen: list[SavedHostdev] = []

        def look(text: str) -> str:
            found = take_hostdev(text, "pci", address)
            if found is not None:
                seen.append(SavedHostdev(found.text, found.child))
            return text  # unchanged: nothing is written

        self.edit(vm, look)
        return seen[0] if seen else None

    def check_saved_hostdev(self, address: str, token: str) -> str:
        """One <hostdev> element of `address` (an audit log is a file anyone with access could have
        edited), its text stripped."""
        text = token.strip()
        if not (text.startswith("<hostdev") and text.endswith(">")):
            raise VmConfigError("'element' is not a <hostdev> element")
        try:
            hostdevs = parse_domain("<domain><devices>" + text + "</devices></domain>").hostdevs
        except ValueError as e:
            raise VmConfigError(str(e)) from None
        if [(h.type, h.address) for h in hostdevs] != [("pci", parse_pci_address(address))]:
            raise VmConfigError(f"'element' is not the hostdev of {address}")
        return text

    def restore_hostdev(self, vm: str, address: str, saved: SavedHostdev) -> None:
        self.edit(vm, lambda x: put_hostdev(x, saved.token, child=saved.place))

    def hostdev_text(self, address: str, managed: bool, token: str | None = None) -> str:
        return as_shown(token) if token is not None else hostdev_xml(address, managed)

    # -- size and memory layout (console/vms/libvirt_shape.py); a saved definition checked ------------

    def shape(self, vm: str) -> VmShape:
        try:
            return libvirt_shape.read_shape(self.xml(vm))
        except ValueError as e:
            raise VmConfigError(f"the config of {vm} cannot be read: {e}") from None

    def set_shape(self, vm: str, shape: VmShape) -> None:
        problems = shape.problems()
        if problems:  # refused before anything is read or written
            raise VmConfigError(f"cannot give {vm} that shape: " + "; ".join(problems))
        self._edit_checked(vm, lambda xml: libvirt_shape.edit_shape(xml, shape))

    def check_saved(self, vm: str, token: str) -> str:
        return libvirt_shape.check_saved_definition(token, vm, self.xml(vm))


def as_shown(element: str) -> str:
    """An element's text as a domain file holds it, without the indentation of its place there: its
    closing line's indent comes off every later line."""
    lines = element.strip("\n").split("\n")
    if len(lines) < 2:
        return element.strip()
    last = lines[-1]
    indent = last[:len(last) - len(last.lstrip(" \t"))]
    return "\n".join([lines[0]] + [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[1:]])


class LibvirtDomainConfig(DomainConfig):
    """A libvirt connection (opened on first use, kept: the test driver forgets changes on reopen)."""

    def __init__(self, uri: str) -> None:
        self.uri = self.reader_uri = uri
        self._conn: Any = None

    def _c(self) -> Any:
        if self._conn is not None and not self._alive():
            self.close()  # the daemon dropped us (restart, lost socket): a rollback needs a new connection
        if self._conn is None:
            import libvirt

            libvirt.registerErrorHandler(lambda *_a: None, None)
            try:
                self._conn = libvirt.open(self.uri)
            except libvirt.libvirtError as e:
                raise DomainConfigError(f"cannot open libvirt {self.uri}: {e.get_error_message()}") from None
        return self._conn

    def _dom(self, vm: str) -> Any:
        import libvirt

        try:
            return self._c().lookupByName(vm)
        except libvirt.libvirtError as e:
            if e.get_error_code() == _ERR_NO_DOMAIN:
                raise DomainConfigError(f"no VM named {vm!r} in {self.uri}") from None
            raise DomainConfigError(f"libvirt: {e.get_error_message()}") from None

    def _alive(self) -> bool:
        try:
            return self._conn.isAlive() == 1
        except Exception:
            return False

    def domain(self, vm: str) -> Any:
        """The libvirt domain handle (for live changes such as pins). DomainConfigError when unknown."""
        return self._dom(vm)

    def is_active(self, vm: str) -> bool:
        return bool(self._dom(vm).isActive())

    def live_xml(self, vm: str) -> str:
        """The running domain's XML (its live state)."""
        import libvirt

        try:
            return self._dom(vm).XMLDesc(0)
        except libvirt.libvirtError as e:
            raise DomainConfigError(f"libvirt: {e.get_error_message()}") from None

    def cpu_count(self) -> int:
        """How many host CPUs libvirt's CPU maps cover (the width of a pin)."""
        import libvirt

        try:
            return int(self._c().getCPUMap()[0])
        except libvirt.libvirtError as e:
            raise DomainConfigError(f"libvirt: {e.get_error_message()}") from None

    def names(self) -> list[str]:
        return sorted(d.name() for d in self._c().listAllDomains())

    def pin_scopes(self, vm: str, running: bool) -> PinScopes:
        return libvirt_pins.libvirt_scopes(self, vm)

    def every_cpu(self) -> frozenset[int]:
        """Every CPU of libvirt's CPU maps: a live pin to all of them is no pin (libvirt keeps an unpinned
        vCPU's "pin" as the full map; offline CPUs in it are ignored by the kernel)."""
        return frozenset(range(self.cpu_count()))

    def pins(self, vm: str, live: bool) -> VmPins:
        return libvirt_pins.read_xml_state(self.live_xml(vm) if live else self.xml(vm))

    def set_pins(self, vm: str, pins: VmPins, live: bool, memory_policy: bool) -> None:
        if live:
            libvirt_pins.write_live(self, vm, pins, memory_policy)
        else:
            super().set_pins(vm, pins, False, memory_policy)

    def xml(self, vm: str) -> str:
        import libvirt

        try:
            return self._dom(vm).XMLDesc(_XML_INACTIVE)
        except libvirt.libvirtError as e:
            raise DomainConfigError(f"libvirt: {e.get_error_message()}") from None

    def define(self, vm: str, xml: str) -> None:
        import libvirt

        self._dom(vm)
        try:
            self._c().defineXML(xml)
        except libvirt.libvirtError as e:
            raise DomainConfigError(f"libvirt refused the new config of {vm}: {e.get_error_message()}") from None

    def _device(self, vm: str, xml: str, attach: bool, fallback: Callable[[str], str]) -> None:
        import libvirt

        dom = self._dom(vm)
        try:
            (dom.attachDeviceFlags if attach else dom.detachDeviceFlags)(xml, _AFFECT_CONFIG)
        except libvirt.libvirtError as e:
            if e.get_error_code() != _ERR_NO_SUPPORT:
                raise DomainConfigError(f"libvirt: {e.get_error_message()}") from None
            self.edit(vm, fallback)

    def add_hostdev(self, vm: str, address: str, managed: bool = True, index: int | None = None) -> None:
        if parse_pci_address(address) in self.pci_hostdevs(vm):
            return
        self._device(vm, hostdev_xml(address, managed), True,
                     lambda x: add_pci_hostdev(x, address, managed=managed))

    def remove_hostdev(self, vm: str, address: str) -> None:
        if parse_pci_address(address) not in self.pci_hostdevs(vm):
            return
        # detach matches on the source address; managed= does not take part in the match
        self._device(vm, hostdev_xml(address), False, lambda x: remove_pci_hostdev(x, address))

    # -- run state (console/vms/backend.py's run-state block) -------------------------------------------
    def _call(self, vm: str, what: str) -> Any:
        import libvirt

        dom = self._dom(vm)
        try:
            return getattr(dom, what)()
        except libvirt.libvirtError as e:
            raise DomainConfigError(f"libvirt {what} of {vm}: {e.get_error_message()}") from None

    def run_state(self, vm: str) -> str:
        from nodeconsole.console.sources.libvirt_src import STATES

        code = int(self._call(vm, "state")[0])
        return STATES.get(code, f"state {code}")

    def shutdown(self, vm: str) -> None:
        self._call(vm, "shutdown")

    def destroy(self, vm: str) -> None:
        self._call(vm, "destroy")

    def start(self, vm: str) -> None:
        self._call(vm, "create")

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None


def node_file_of(uri: str | None) -> Path | None:
    """The node file of a `test:///ABS/file.xml` URI (None for `test:///default` and other drivers)."""
    if not uri or not uri.startswith("test://"):
        return None
    path = urllib.parse.urlparse(uri).path
    return Path(path) if path and path != "/default" and os.path.isfile(path) else None


def libvirt_domains(uri: str | None) -> LibvirtDomainConfig | None:
    """A libvirt connection's domain store (console/seams.py's choice for every host but the demo);
    None: the host has no libvirt."""
    return LibvirtDomainConfig(uri) if uri is not None else None
