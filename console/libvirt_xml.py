"""libvirt domain XML: read the facts the console shows. Edits are console/domain_edits.py's (one
splicing editor, console/domain_xml.py, that keeps everything it does not touch byte for byte)."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from nodeconsole.console.cpulist import parse_cpulist
from nodeconsole.console.model import Hostdev, VcpuPin
from nodeconsole.console.pciaddr import format_pci_address

NUMA_MODES = ("strict", "preferred", "interleave", "restrictive")


@dataclass(frozen=True)
class DomainXml:
    """What the console reads from a domain's XML (only explicit settings; absent = empty/None)."""
    pins: tuple[VcpuPin, ...] = ()
    emulator_pins: tuple[int, ...] = ()
    numa_mode: str | None = None
    numa_nodeset: tuple[int, ...] = ()
    hostdevs: tuple[Hostdev, ...] = ()
    threads_per_core: int = 1
    vcpus: int | None = None  # <vcpu> (the maximum), None when absent
    hugepages_kib: int | None = None  # <memoryBacking><hugepages>: page size, 0 = host default, None = none


def parse_libvirt_set(text: str) -> tuple[int, ...]:
    """libvirt's cpuset/nodeset syntax: a cpulist where `^N` excludes, e.g. "0-7,^3" → (0,1,2,4,5,6,7)."""
    keep: list[str] = []
    drop: list[str] = []
    for part in text.split(","):
        part = part.strip()
        if part.startswith("^"):
            drop.append(part[1:])
        elif part:
            keep.append(part)
    excluded = set(parse_cpulist(",".join(drop)))
    return tuple(c for c in parse_cpulist(",".join(keep)) if c not in excluded)


# -- reading ------------------------------------------------------------------------------------------

def parse_domain(xml: str) -> DomainXml:
    """Pins, emulator pins, numatune, hostdevs and guest threads per core of one domain XML.
    Raises ValueError when the XML is not well formed."""
    root = _parse(xml)
    pins = []
    for pin in root.findall("./cputune/vcpupin"):
        pins.append(VcpuPin(vcpu=int(pin.get("vcpu", "0")), cpus=parse_libvirt_set(pin.get("cpuset", ""))))
    pins.sort(key=lambda p: p.vcpu)
    emu = root.find("./cputune/emulatorpin")
    mem = root.find("./numatune/memory")
    numa_mode = numa_nodeset = None
    if mem is not None:
        numa_mode = mem.get("mode", "strict")  # libvirt's default mode
        numa_nodeset = parse_libvirt_set(mem.get("nodeset", ""))
    topo = root.find("./cpu/topology")
    vcpu = root.find("./vcpu")
    vcpus_text = (vcpu.text or "").strip() if vcpu is not None else ""
    return DomainXml(
        pins=tuple(pins),
        emulator_pins=parse_libvirt_set(emu.get("cpuset", "")) if emu is not None else (),
        numa_mode=numa_mode,
        numa_nodeset=numa_nodeset or (),
        hostdevs=tuple(_hostdevs(root)),
        threads_per_core=int(topo.get("threads", "1")) if topo is not None else 1,
        vcpus=int(vcpus_text) if vcpus_text.isdigit() else None,
        hugepages_kib=_hugepages(root),
    )


# libvirt's memory units (domain XML "unit" attribute): powers of 1024, and of 1000 for KB/MB/...
_UNITS = {"b": 1, "bytes": 1, "k": 1024, "kib": 1024, "kb": 1000, "m": 1024 ** 2, "mib": 1024 ** 2,
          "mb": 1000 ** 2, "g": 1024 ** 3, "gib": 1024 ** 3, "gb": 1000 ** 3, "t": 1024 ** 4,
          "tib": 1024 ** 4, "tb": 1000 ** 4}


def _hugepages(root: ET.Element) -> int | None:
    """The huge page size in KiB of <memoryBacking><hugepages>: the first <page> that names no guest
    nodeset (else the first <page>), 0 when there is no <page> (the host's default size), None without
    <hugepages> or when the size cannot be read."""
    huge = root.find("./memoryBacking/hugepages")
    if huge is None:
        return None
    pages = huge.findall("./page")
    if not pages:
        return 0
    page = next((p for p in pages if p.get("nodeset") is None), pages[0])
    factor = _UNITS.get((page.get("unit") or "KiB").strip().lower())
    try:
        size = int((page.get("size") or "").strip())
    except ValueError:
        return None
    if factor is None or size <= 0:
        return None
    return size * factor // 1024


def _pci_from_address(addr: ET.Element | None) -> str | None:
    if addr is None or addr.get("bus") is None:
        return None
    try:
        return format_pci_address(int(addr.get("domain", "0"), 0), int(addr.get("bus", "0"), 0),
                                  int(addr.get("slot", "0"), 0), int(addr.get("function", "0"), 0))
    except ValueError:
        return None


def _guest_address(dev: ET.Element) -> str | None:
    """The PCI address the guest sees a device at: its own <address type='pci' .../> (libvirt writes
    one when it defines the domain), None when absent."""
    addr = dev.find("./address")
    if addr is None or addr.get("type", "pci") != "pci":
        return None
    return _pci_from_address(addr)


def _hostdevs(root: ET.Element) -> list[Hostdev]:
    out: list[Hostdev] = []
    devices = root.find("./devices")
    if devices is None:
        return out
    for dev in devices:
        # SR-IOV NICs given as <interface type='hostdev'> hold a host PCI device just like <hostdev>
        is_hostdev = dev.tag == "hostdev" and dev.get("mode", "subsystem") == "subsystem"
        is_iface = dev.tag == "interface" and dev.get("type") == "hostdev"
        if not (is_hostdev or is_iface):
            continue
        kind = "pci" if is_iface else dev.get("type")
        managed = dev.get("managed", "no") == "yes"
        if kind == "pci":
            address = _pci_from_address(dev.find("./source/address"))
            if address:
                out.append(Hostdev(type="pci", address=address, managed=managed,
                                   guest_address=_guest_address(dev)))
        elif kind == "mdev":
            addr = dev.find("./source/address")
            uuid = addr.get("uuid") if addr is not None else None
            if uuid:
                out.append(Hostdev(type="mdev", uuid=uuid.lower(), managed=managed))
    return out


# -- reading helpers ----------------------------------------------------------------------------------

def _parse(xml: str) -> ET.Element:
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise ValueError(f"domain XML is not well formed: {e}") from None
    if root.tag != "domain":
        raise ValueError(f"not a domain XML (root element is <{root.tag}>)")
    return root
