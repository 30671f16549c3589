"""The demo host's domain store: the libvirt test driver's node file, edited in place.

The test driver re-reads its node file on every open and never persists a change, so the demo's changes
are made in the node file itself: the <domain> element's text is edited by console/domain_edits.py (one
splicing editor; the rest of the file stays byte for byte) and the file replaced atomically.
console/seams.py chooses it for the demo host.
"""
from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from nodeconsole.console.demo.gen_libvirt import FIRST_GUEST_BUS, RUNSTATE
from nodeconsole.console.domain_edits import pci_hostdev_spec, put_hostdev
from nodeconsole.console.libvirt_xml import parse_domain
from nodeconsole.console.outfile import write_atomic
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.vms.libvirt_domains import DomainConfig, DomainConfigError

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


# <domain ...>...</domain> or <domain file='...'/> at any depth of the node file (domains do not nest)
_DOMAIN_RE = re.compile(r"<domain\b[^>]*/>|<domain\b[^>]*>.*?</domain>", re.S)
_NAME_RE = re.compile(r"<name>\s*([^<]*?)\s*</name>")
_FILE_RE = re.compile(r"""\bfile\s*=\s*(['"])(.*?)\1""")


class NodeFileDomainConfig(DomainConfig):
    """Domains of a libvirt test-driver node file (`test:///ABS/node.xml`), edited in place."""

    label = "node file"
    one_state = True  # the test driver serves the file as both the running and the persistent state

    def __init__(self, path: Path, uri: str | None = None) -> None:
        self.path = Path(path)
        self.reader_uri = uri if uri is not None else f"test://{self.path}"  # its domains as libvirt serves them

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

    def add_hostdev(self, vm: str, address: str, managed: bool = True, index: int | None = None) -> None:
        """Add a PCI hostdev with a guest address of its own, as libvirt does when it defines the domain
        (the lowest free guest bus from FIRST_GUEST_BUS on, slot 0)."""
        want = parse_pci_address(address)

        def change(text: str) -> str:
            if any(h.type == "pci" and h.address == want for h in parse_domain(text).hostdevs):
                return text
            tag, attrs, kids = pci_hostdev_spec(want, managed)
            bus = _free_guest_bus(text)
            guest = ("address", (("type", "pci"), ("domain", "0x0000"), ("bus", f"0x{bus:02x}"), ("slot", "0x00"),
                                 ("function", "0x0")), ())
            return put_hostdev(text, (tag, attrs, (*kids, guest)), index)

        self.edit(vm, change)

    def edit(self, vm: str, change: Callable[[str], str]) -> None:
        """`change` gets the domain's text exactly as the file holds it (console/domain_edits.py splices
        it), so what it does not touch stays byte for byte, and an edit plus its undo leave the file as
        it was."""
        where, start, end = self._find(vm)
        text = where.read_text(encoding="utf-8")
        new = change(text[start:end])
        if new != text[start:end]:
            parse_domain(new)  # refuse a broken document before touching the file
            _atomic_write(where, text[:start] + new + text[end:])

    # -- run state (console/vms/backend.py's run-state block): the node file's <test:runstate> -----------
    def run_state(self, vm: str) -> str:
        where, start, end = self._find(vm)
        m = _RUNSTATE_RE.search(where.read_text(encoding="utf-8")[start:end])
        code = int(m.group(1)) if m else 1  # the test driver starts a domain without one running
        return _STATE_NAMES.get(code, f"state {code}")

    def _set_state(self, vm: str, state: str) -> None:
        code = RUNSTATE[state]

        def change(text: str) -> str:
            if _RUNSTATE_RE.search(text):
                return _RUNSTATE_RE.sub(f"<test:runstate>{code}</test:runstate>", text, count=1)
            raise DomainConfigError(f"{vm}: the node file gives it no <test:runstate> to change")

        self.edit(vm, change)

    def shutdown(self, vm: str) -> None:
        """The demo's guests honour ACPI at once: the VM is shut off."""
        if self.run_state(vm) != "running":
            raise DomainConfigError(f"{vm} is not running")
        self._set_state(vm, "shut off")

    def destroy(self, vm: str) -> None:
        if self.run_state(vm) == "shut off":
            raise DomainConfigError(f"{vm} is not running")
        self._set_state(vm, "shut off")

    def start(self, vm: str) -> None:
        if self.run_state(vm) != "shut off":
            raise DomainConfigError(f"{vm} is already active")
        self._set_state(vm, "running")


_RUNSTATE_RE = re.compile(r"<test:runstate>\s*([0-9]+)\s*</test:runstate>")
_STATE_NAMES = {code: name for name, code in RUNSTATE.items()}


def _free_guest_bus(text: str) -> int:
    """The lowest guest PCI bus from FIRST_GUEST_BUS on that no device of the domain uses."""
    import xml.etree.ElementTree as ET

    used = set()
    devices = ET.fromstring(text).find("./devices")
    for dev in devices if devices is not None else ():
        addr = dev.find("./address")
        if addr is not None and addr.get("type") == "pci":
            try:
                used.add(int(addr.get("bus", "0"), 0))
            except ValueError:
                continue
    bus = FIRST_GUEST_BUS
    while bus in used:
        bus += 1
    return bus


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
    """Replace `path` with `text` (its mode kept) so a reader sees the old or the new file, never half
    of one (console/outfile.write_atomic)."""
    write_atomic(path, text.encode("utf-8"), stat.S_IMODE(os.lstat(path).st_mode))
