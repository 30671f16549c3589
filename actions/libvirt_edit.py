"""Read-write libvirt domain configuration for actions, behind one interface with two implementations.

- `LibvirtDomainConfig`: a libvirt connection. Host devices go through `attachDeviceFlags` /
  `detachDeviceFlags` with VIR_DOMAIN_AFFECT_CONFIG (the persistent config; a running guest sees the
  change at its next start); drivers without device attach (the test driver) get `defineXML` of the
  edited inactive XML instead, as does every other edit.
- `NodeFileDomainConfig`: the demo host. Its libvirt is the test driver, which re-reads its node file on
  every open and never persists a change, so the change is made in the node file itself: the <domain>
  element is edited as text and the file replaced atomically; the rest of the file stays byte for byte.
"""
from __future__ import annotations

import os
import re
import tempfile
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodeconsole.actions.plan import Op, Step, StepError, step_kind
from nodeconsole.actions.runner import ActionHost
from nodeconsole.console.libvirt_xml import add_pci_hostdev, parse_domain, remove_pci_hostdev
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.seams import Seams

_ERR_NO_SUPPORT = 3  # libvirt.VIR_ERR_NO_SUPPORT: the driver lacks the call (test driver: attach)
_ERR_NO_DOMAIN = 42
_AFFECT_CONFIG = 2  # libvirt.VIR_DOMAIN_AFFECT_CONFIG
_XML_INACTIVE = 2  # libvirt.VIR_DOMAIN_XML_INACTIVE



_XML_REF = re.compile(r"&(?:#([0-9]+)|#x([0-9a-fA-F]+)|(amp|lt|gt|quot|apos));")
_XML_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


def xml_text(raw: str) -> str:
    """XML character data with its entity and character references replaced (what a parser returns)."""
    def one(m: re.Match[str]) -> str:
        if m.group(3):
            return _XML_NAMED[m.group(3)]
        code = int(m.group(1), 10) if m.group(1) else int(m.group(2), 16)
        return chr(code) if 0 < code <= 0x10FFFF else m.group(0)
    return _XML_REF.sub(one, raw)

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
    """The persistent configuration of a host's domains."""

    label = "libvirt"

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
        self.edit(vm, lambda x: add_pci_hostdev(x, address, managed=managed))

    def remove_hostdev(self, vm: str, address: str) -> None:
        self.edit(vm, lambda x: remove_pci_hostdev(x, address))

    def edit(self, vm: str, change: Callable[[str], str]) -> None:
        old = self.xml(vm)
        new = change(old)
        if new != old:
            self.define(vm, new)

    def edit_text(self, vm: str, change: Callable[[str], str | None]) -> bool:
        """Change the domain's XML as stored, as text (`change` returns None when it cannot). False when
        this config has no stored text to edit: the caller then uses `edit`."""
        return False

    def pci_hostdevs(self, vm: str) -> set[str]:
        return {h.address for h in parse_domain(self.xml(vm)).hostdevs if h.type == "pci" and h.address}

    def hostdev_place(self, vm: str, address: str) -> tuple[int, bool] | None:
        """(index among the domain's <hostdev> elements, managed) of the PCI hostdev for `address`."""
        root = ET.fromstring(self.xml(vm))
        for i, el in enumerate(root.findall("./devices/hostdev")):
            found = parse_domain(f"<domain><devices>{ET.tostring(el, encoding='unicode')}</devices></domain>")
            if any(h.type == "pci" and h.address == address for h in found.hostdevs):
                return i, el.get("managed", "no") == "yes"
        return None

    def close(self) -> None:
        pass


class LibvirtDomainConfig(DomainConfig):
    """A libvirt connection (opened on first use, kept: the test driver forgets changes on reopen)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
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

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None


# <domain ...>...</domain> or <domain file='...'/> at any depth of the node file (domains do not nest)
_DOMAIN_RE = re.compile(r"<domain\b[^>]*/>|<domain\b[^>]*>.*?</domain>", re.S)
_NAME_RE = re.compile(r"<name>\s*([^<]*?)\s*</name>")
_FILE_RE = re.compile(r"""\bfile\s*=\s*(['"])(.*?)\1""")


class NodeFileDomainConfig(DomainConfig):
    """Domains of a libvirt test-driver node file (`test:///ABS/node.xml`), edited in place."""

    label = "node file"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _spans(self) -> list[tuple[str, Path, int, int]]:
        """(name, file, start, end) of every domain; a `<domain file=...>` names an external file."""
        text = self.path.read_text(encoding="utf-8")
        out = []
        for m in _DOMAIN_RE.finditer(text):
            body, start, end, where = m.group(0), m.start(), m.end(), self.path
            if body.endswith("/>"):
                f = _FILE_RE.search(body)
                if not f:
                    continue
                where = (self.path.parent / f.group(2)).resolve()
                inner = where.read_text(encoding="utf-8")
                dm = _DOMAIN_RE.search(inner)
                if not dm:
                    continue
                body, start, end = dm.group(0), dm.start(), dm.end()
            n = _NAME_RE.search(body)
            if n:  # the name as libvirt reads it: `a&amp;b` is the VM `a&b`
                out.append((xml_text(n.group(1)), where, start, end))
        return out

    def _find(self, vm: str) -> tuple[Path, int, int]:
        for name, where, start, end in self._spans():
            if name == vm:
                return where, start, end
        raise DomainConfigError(f"no VM named {vm!r} in {self.path}")

    def names(self) -> list[str]:
        return sorted(name for name, *_ in self._spans())

    def xml(self, vm: str) -> str:
        where, start, end = self._find(vm)
        text = where.read_text(encoding="utf-8")
        return _dedent(text[start:end], _indent_before(text, start))

    def define(self, vm: str, xml: str) -> None:
        parse_domain(xml)  # refuse a broken document before touching the file
        new_name = _NAME_RE.search(xml)
        if not new_name or new_name.group(1) != vm:
            raise DomainConfigError(f"the new config of {vm} names another domain")
        where, start, end = self._find(vm)
        text = where.read_text(encoding="utf-8")
        indent = _indent_before(text, start)
        _atomic_write(where, text[:start] + _reindent(xml, indent) + text[end:])

    def edit_text(self, vm: str, change: Callable[[str], str | None]) -> bool:
        where, start, end = self._find(vm)
        text = where.read_text(encoding="utf-8")
        new = change(text[start:end])
        if new is None:
            return False
        parse_domain(new)  # refuse a broken document before touching the file
        if new != text[start:end]:
            _atomic_write(where, text[:start] + new + text[end:])
        return True

    # Host devices are added and removed as text, so an add followed by its undo leaves the file byte for
    # byte as it was (a re-serialised document would change quoting and layout everywhere).
    def add_hostdev(self, vm: str, address: str, managed: bool = True, index: int | None = None) -> None:
        address = parse_pci_address(address)
        if address in self.pci_hostdevs(vm):
            return
        where, start, end = self._find(vm)
        text = where.read_text(encoding="utf-8")
        dom = text[start:end]
        close = re.search(r"(?m)^([ \t]*)</devices>", dom)
        if close is None:
            return super().add_hostdev(vm, address, managed)
        outer = close.group(1)
        first = re.search(r"<devices>[ \t]*\n([ \t]*)<", dom)
        inner = first.group(1) if first and len(first.group(1)) > len(outer) else outer + "  "
        unit = inner[len(outer):]
        dom_, bus, rest = address.split(":")
        slot, fn = rest.split(".")
        block = (f"{inner}<hostdev mode='subsystem' type='pci' managed='{'yes' if managed else 'no'}'>\n"
                 f"{inner}{unit}<source>\n"
                 f"{inner}{unit}{unit}<address domain='0x{dom_}' bus='0x{bus}' slot='0x{slot}' "
                 f"function='0x{fn}'/>\n"
                 f"{inner}{unit}</source>\n"
                 f"{inner}</hostdev>\n")
        blocks = list(_HOSTDEV_BLOCK.finditer(dom, 0, close.start()))
        if index is not None and 0 <= index < len(blocks):
            at = blocks[index].start()
        else:
            at = blocks[-1].end() if blocks else close.start()
        new = dom[:at] + block + dom[at:]
        parse_domain(new)
        _atomic_write(where, text[:start] + new + text[end:])

    def remove_hostdev(self, vm: str, address: str) -> None:
        address = parse_pci_address(address)
        if address not in self.pci_hostdevs(vm):
            return
        where, start, end = self._find(vm)
        text = where.read_text(encoding="utf-8")
        dom = text[start:end]
        for m in _HOSTDEV_BLOCK.finditer(dom):
            found = parse_domain(f"<domain><devices>{m.group(0)}</devices></domain>").hostdevs
            if any(h.type == "pci" and h.address == address for h in found) and "<interface" not in m.group(0):
                new = dom[:m.start()] + dom[m.end():]
                if address not in {h.address for h in parse_domain(new).hostdevs}:
                    _atomic_write(where, text[:start] + new + text[end:])
                    return
        super().remove_hostdev(vm, address)


# one <hostdev> element on lines of its own, with its indentation and line end
_HOSTDEV_BLOCK = re.compile(r"(?m)^[ \t]*<hostdev\b[^>]*>.*?</hostdev>[ \t]*\n", re.S)


def _indent_before(text: str, start: int) -> str:
    line_start = text.rfind("\n", 0, start) + 1
    lead = text[line_start:start]
    return lead if not lead.strip() else ""


def _dedent(body: str, indent: str) -> str:
    if not indent:
        return body
    lines = body.split("\n")
    return "\n".join([lines[0]] + [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[1:]])


def _reindent(body: str, indent: str) -> str:
    if not indent:
        return body
    lines = body.split("\n")
    return "\n".join([lines[0]] + [indent + ln if ln else ln for ln in lines[1:]])


def _atomic_write(path: Path, text: str) -> None:
    """Replace `path` with `text` so a reader sees the old or the new file, never half of one."""
    mode = os.stat(path).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def node_file_of(uri: str | None) -> Path | None:
    """The node file of a `test:///ABS/file.xml` URI (None for `test:///default` and other drivers)."""
    if not uri or not uri.startswith("test://"):
        return None
    path = urllib.parse.urlparse(uri).path
    return Path(path) if path and path != "/default" and os.path.isfile(path) else None


def domain_config_for(seams: Seams) -> DomainConfig | None:
    """The demo host edits its node file; every other host talks to libvirt. None: no libvirt."""
    node = node_file_of(seams.libvirt_uri)
    if seams.is_demo and node is not None:
        return NodeFileDomainConfig(node)
    if seams.libvirt_uri is None:
        return None
    return LibvirtDomainConfig(seams.libvirt_uri)


# -- step kind ----------------------------------------------------------------------------------------

@step_kind("vm_hostdev")
def vm_hostdev_step(host: ActionHost, op: Op) -> Step | None:
    """`{"kind": "vm_hostdev", "vm": NAME, "address": PCI, "present": bool, "managed": bool}`: the VM's
    persistent config has (present) or has not a PCI <hostdev> for the address."""
    vm, address, present = op["vm"], parse_pci_address(op["address"]), bool(op["present"])
    managed = bool(op.get("managed", True))
    cfg = host.domains
    if cfg is None:
        raise StepError("this host has no libvirt connection")
    try:
        has = address in cfg.pci_hostdevs(vm)
    except DomainConfigError as e:
        raise StepError(str(e)) from None
    if has == present:
        return None
    inverse = {"kind": "vm_hostdev", "vm": vm, "address": address, "present": not present, "managed": managed}
    if not present:
        place = cfg.hostdev_place(vm, address)
        if place is not None:  # put it back where it was, as it was
            inverse.update(index=place[0], managed=place[1])

    def apply() -> None:
        if present:
            cfg.add_hostdev(vm, address, managed=managed, index=op.get("index"))
        else:
            cfg.remove_hostdev(vm, address)

    def verify() -> str | None:
        now = address in cfg.pci_hostdevs(vm)
        if now == present:
            return None
        return f"the config of VM {vm} {'still lacks' if present else 'still has'} hostdev {address}"

    if present:
        title = f"Add {address} to VM {vm}'s config"
        why = (f"VM {vm} gets the device at its next start; managed='yes' lets libvirt keep it on vfio-pci "
               "while the VM runs")
        cmd = f"virsh attach-device {vm} hostdev-{address}.xml --config"
    else:
        title = f"Remove {address} from VM {vm}'s config"
        why = f"VM {vm} must not claim the device once it is given back to the host"
        cmd = f"virsh detach-device {vm} hostdev-{address}.xml --config"
    return Step(title=title, why=why, commands=(cmd,), op=dict(op), inverse=inverse, apply_fn=apply,
                verify_fn=verify, detail=hostdev_xml(address, managed) if present else "")

