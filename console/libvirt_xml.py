"""libvirt domain XML: read the facts the console shows, and pure edits for the actions that change them.

Every edit takes a domain XML string and returns a new one; the rest of the document (other elements,
attributes, comments, namespaced elements) is kept. Edits are idempotent: asking for what is already
there returns an equivalent document, so a plan can tell "nothing to do" by comparing `parse_domain`.
"""
from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nodeconsole.console.cpulist import format_cpulist, parse_cpulist
from nodeconsole.console.model import Hostdev, VcpuPin
from nodeconsole.console.pciaddr import format_pci_address, parse_pci_address

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
    )


def _pci_from_address(addr: ET.Element | None) -> str | None:
    if addr is None or addr.get("bus") is None:
        return None
    try:
        return format_pci_address(int(addr.get("domain", "0"), 0), int(addr.get("bus", "0"), 0),
                                  int(addr.get("slot", "0"), 0), int(addr.get("function", "0"), 0))
    except ValueError:
        return None


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
                out.append(Hostdev(type="pci", address=address, managed=managed))
        elif kind == "mdev":
            addr = dev.find("./source/address")
            uuid = addr.get("uuid") if addr is not None else None
            if uuid:
                out.append(Hostdev(type="mdev", uuid=uuid.lower(), managed=managed))
    return out


# -- editing ------------------------------------------------------------------------------------------

def set_vcpu_pins(xml: str, pins: Mapping[int, Iterable[int]]) -> str:
    """Set <vcpupin> for the given vCPUs (an empty CPU set removes that vCPU's pin); other pins stay.
    Raises ValueError for a vCPU the domain does not have."""
    root = _parse(xml)
    nvcpu = parse_domain(xml).vcpus
    cputune = _child(root, "cputune", before=("numatune", "cpu", "os"))
    for vcpu, cpus in sorted(pins.items()):
        if vcpu < 0 or (nvcpu is not None and vcpu >= nvcpu):
            raise ValueError(f"vCPU {vcpu} does not exist (the domain has {nvcpu} vCPUs)")
        cpuset = format_cpulist(cpus)
        existing = [p for p in cputune.findall("vcpupin") if p.get("vcpu") == str(vcpu)]
        for p in existing[1:]:
            cputune.remove(p)
        if not cpuset:
            if existing:
                _remove(cputune, existing[0])
        elif existing:
            existing[0].set("cpuset", cpuset)
        else:
            # keep vcpupins in vCPU order, as libvirt writes them
            after = [p for p in cputune.findall("vcpupin") if int(p.get("vcpu", "0")) < vcpu]
            index = list(cputune).index(after[-1]) + 1 if after else 0
            _insert(root, cputune, 1, index, ET.Element("vcpupin", {"vcpu": str(vcpu), "cpuset": cpuset}))
    _drop_if_empty(root, cputune)
    return _serialize(root, xml)


def set_emulator_pins(xml: str, cpus: Iterable[int]) -> str:
    """Set <emulatorpin cpuset>; an empty CPU set removes it."""
    root = _parse(xml)
    cputune = _child(root, "cputune", before=("numatune", "cpu", "os"))
    cpuset = format_cpulist(cpus)
    emu = cputune.find("emulatorpin")
    if not cpuset:
        if emu is not None:
            _remove(cputune, emu)
    elif emu is not None:
        emu.set("cpuset", cpuset)
    else:
        _insert(root, cputune, 1, len(cputune), ET.Element("emulatorpin", {"cpuset": cpuset}))
    _drop_if_empty(root, cputune)
    return _serialize(root, xml)


def set_numatune(xml: str, mode: str | None, nodeset: Iterable[int]) -> str:
    """Set <numatune><memory mode nodeset/>; mode None or an empty nodeset removes the memory policy."""
    nodes = format_cpulist(nodeset)
    if mode is not None and mode not in NUMA_MODES:
        raise ValueError(f"unknown numatune mode {mode!r} (one of {', '.join(NUMA_MODES)})")
    root = _parse(xml)
    numatune = _child(root, "numatune", before=("cpu", "os"))
    mem = numatune.find("memory")
    if mode is None or not nodes:
        if mem is not None:
            _remove(numatune, mem)
    else:
        attrs = {"mode": mode, "nodeset": nodes}
        if mem is None:
            _insert(root, numatune, 1, 0, ET.Element("memory", attrs))
        else:
            mem.attrib.pop("placement", None)  # an explicit nodeset replaces placement='auto'
            mem.attrib.update(attrs)
    _drop_if_empty(root, numatune)
    return _serialize(root, xml)


def add_pci_hostdev(xml: str, address: str, managed: bool = True) -> str:
    """Add a PCI <hostdev> for the host device `address`; unchanged if the domain already has it."""
    address = parse_pci_address(address)
    root = _parse(xml)
    if any(h.type == "pci" and h.address == address for h in _hostdevs(root)):
        return xml
    dom, bus, rest = address.split(":")
    slot, fn = rest.split(".")
    dev = ET.Element("hostdev", {"mode": "subsystem", "type": "pci", "managed": "yes" if managed else "no"})
    src = ET.SubElement(dev, "source")
    ET.SubElement(src, "address", {"domain": f"0x{dom}", "bus": f"0x{bus}", "slot": f"0x{slot}",
                                   "function": f"0x{fn}"})
    _add_device(root, dev)
    return _serialize(root, xml)


def remove_pci_hostdev(xml: str, address: str) -> str:
    """Remove the PCI <hostdev> for host device `address`; unchanged if the domain has none."""
    address = parse_pci_address(address)
    root = _parse(xml)
    devices = root.find("devices")
    if devices is None:
        return xml
    gone = [d for d in devices.findall("hostdev")
            if d.get("type") == "pci" and _pci_from_address(d.find("./source/address")) == address]
    if not gone:
        return xml
    for d in gone:
        _remove(devices, d)
    return _serialize(root, xml)


def add_mdev_hostdev(xml: str, uuid: str, model: str = "vfio-pci") -> str:
    """Add an mdev <hostdev> (e.g. an NVIDIA vGPU) for mediated device `uuid`; unchanged if present."""
    uuid = uuid.lower()
    root = _parse(xml)
    if any(h.type == "mdev" and h.uuid == uuid for h in _hostdevs(root)):
        return xml
    # mdevs are created outside libvirt, so managed='no' (libvirt cannot detach/reattach them)
    dev = ET.Element("hostdev", {"mode": "subsystem", "type": "mdev", "managed": "no", "model": model})
    ET.SubElement(ET.SubElement(dev, "source"), "address", {"uuid": uuid})
    _add_device(root, dev)
    return _serialize(root, xml)


def remove_mdev_hostdev(xml: str, uuid: str) -> str:
    """Remove the mdev <hostdev> for `uuid`; unchanged if the domain has none."""
    uuid = uuid.lower()
    root = _parse(xml)
    devices = root.find("devices")
    if devices is None:
        return xml
    gone = [d for d in devices.findall("hostdev") if d.get("type") == "mdev"
            and (addr := d.find("./source/address")) is not None
            and (addr.get("uuid") or "").lower() == uuid]
    if not gone:
        return xml
    for d in gone:
        _remove(devices, d)
    return _serialize(root, xml)


# -- tree plumbing ------------------------------------------------------------------------------------

def _parse(xml: str) -> ET.Element:
    parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))
    try:
        parser.feed(xml)
        root = parser.close()
    except ET.ParseError as e:
        raise ValueError(f"domain XML is not well formed: {e}") from None
    if root.tag != "domain":
        raise ValueError(f"not a domain XML (root element is <{root.tag}>)")
    return root


def _serialize(root: ET.Element, original: str) -> str:
    # ElementTree would rename namespace prefixes (ns0:); register the document's own ones so
    # e.g. <qemu:commandline> keeps its prefix.
    for _event, (prefix, uri) in ET.iterparse(io.StringIO(original), events=("start-ns",)):
        if prefix and not (prefix.startswith("ns") and prefix[2:].isdigit()):
            ET.register_namespace(prefix, uri)
    return ET.tostring(root, encoding="unicode")


def _unit(root: ET.Element) -> str | None:
    """The document's indentation step ("  "), or None for a document written without whitespace."""
    text = root.text or ""
    if "\n" in text and not text.strip():
        return text.rsplit("\n", 1)[1] or "  "
    return None


def _child(root: ET.Element, tag: str, before: tuple[str, ...]) -> ET.Element:
    """`root`'s child `tag`, created (before the first child named in `before`) when it has none."""
    el = root.find(tag)
    if el is None:
        el = ET.Element(tag)
        index = len(root)
        for i, sib in enumerate(root):
            if sib.tag in before:
                index = i
                break
        _insert(root, root, 0, index, el)
    return el


def _insert(root: ET.Element, parent: ET.Element, depth: int, index: int, child: ET.Element) -> None:
    """Insert `child` into `parent` (at `depth` below the root), indented like the rest of the document."""
    unit = _unit(root)
    if unit is None:
        parent.insert(index, child)
        return
    inner, close = "\n" + unit * (depth + 1), "\n" + unit * depth
    _reindent(child, inner, unit)
    if not len(parent):
        parent.text = inner
        child.tail = close
    elif index >= len(parent):
        child.tail = close
        parent[-1].tail = inner
    else:
        child.tail = inner
    parent.insert(index, child)


def _reindent(el: ET.Element, indent: str, unit: str) -> None:
    if len(el):
        el.text = indent + unit
        for sub in el:
            _reindent(sub, indent + unit, unit)
            sub.tail = indent + unit
        el[-1].tail = indent


def _remove(parent: ET.Element, child: ET.Element) -> None:
    kids = list(parent)
    i = kids.index(child)
    if i == len(kids) - 1 and i > 0:
        kids[i - 1].tail = child.tail  # the new last child takes the closing indentation
    parent.remove(child)
    if not len(parent):
        parent.text = None


def _drop_if_empty(root: ET.Element, el: ET.Element) -> None:
    if not len(el) and not el.attrib:
        _remove(root, el)


def _add_device(root: ET.Element, dev: ET.Element) -> None:
    devices = _child(root, "devices", before=("seclabel",))
    # after the last hostdev, else at the end (before nothing in particular: device order is free)
    hostdevs = devices.findall("hostdev")
    index = list(devices).index(hostdevs[-1]) + 1 if hostdevs else len(devices)
    _insert(root, devices, 1, index, dev)
