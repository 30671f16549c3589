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

from nodeconsole.console.domain_edits import add_pci_hostdev, hostdev_place, remove_pci_hostdev
from nodeconsole.console.libvirt_xml import parse_domain
from nodeconsole.console.pciaddr import parse_pci_address

if TYPE_CHECKING:
    from nodeconsole.console.model import Vm
    from nodeconsole.console.sources.libvirt_src import LibvirtSource

_ERR_NO_SUPPORT = 3  # libvirt.VIR_ERR_NO_SUPPORT: the driver lacks the call (test driver: attach)
_ERR_NO_DOMAIN = 42
_AFFECT_CONFIG = 2  # libvirt.VIR_DOMAIN_AFFECT_CONFIG
_XML_INACTIVE = 2  # libvirt.VIR_DOMAIN_XML_INACTIVE


class DomainConfigError(Exception):
    """A domain's configuration cannot be read or changed; the message says why."""


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
